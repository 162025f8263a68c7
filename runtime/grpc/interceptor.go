package retrygrpc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/retryguard/retryguard/runtime/codes"
	"github.com/retryguard/retryguard/runtime/retry"
)

// ErrHiddenRetries is matched, with errors.Is, by a call on which grpc-go
// retried by itself (a service config retryPolicy on a channel without
// grpc.WithDisableRetry): the dependency received attempts that the
// executor did not schedule. The executor then adds none of its own.
var ErrHiddenRetries = errors.New("retryguard: grpc-go retried the call itself (a service config retryPolicy); install the interceptor with DialOptions")

// ErrNotReplaySafe is matched by an operation whose attempt without an
// idempotency key may have been applied: every gRPC call is an HTTP/2 POST,
// so without the key it is not sent again, whatever the policy's operation
// says.
var ErrNotReplaySafe = errors.New("retryguard: a gRPC call without an idempotency key is not sent again after it may have been applied")

// Interceptor enforces one published policy on a channel's unary calls
// through retry.Executor.Do. It is also the stats.Handler that shows it what
// grpc-go did below it: how many attempts a call made and whether any of them
// left the process. It is safe for concurrent use; one Interceptor serves any
// number of channels.
type Interceptor struct {
	executor *retry.Executor
	policy   string
	// header caches the last idempotency header's metadata key.
	header atomic.Pointer[headerKey]
	// installed: the stats handler has seen a call begin.
	installed atomic.Bool
}

type headerKey struct {
	header string // as the policy writes it
	key    string // as metadata carries it
	err    error  // why it cannot travel as metadata
}

// New returns an Interceptor that runs every unary call as one logical
// operation under the named policy of ex.
func New(ex *retry.Executor, policy string) *Interceptor {
	return &Interceptor{executor: ex, policy: policy}
}

// DialOptions are what a channel needs, for grpc.NewClient: grpc-go's own
// retries disabled (grpc.WithDisableRetry; RG-RETRY: "disable hidden
// defaults elsewhere"), the interceptor, and its stats handler.
func (i *Interceptor) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithDisableRetry(), grpc.WithChainUnaryInterceptor(i.Unary), grpc.WithStatsHandler(i)}
}

type varsOption struct {
	grpc.EmptyCallOption
	vars retry.Vars
}

// WithVars gives a call the values of its policy's key template, as
// retry.WithVars does for an HTTP request: client.Send(ctx, req,
// retrygrpc.WithVars(retry.Vars{"user_id": "42"})).
func WithVars(vars retry.Vars) grpc.CallOption { return varsOption{vars: vars} }

// Unary is a grpc.UnaryClientInterceptor. It returns nil when an attempt
// succeeds; the server's own status when its answer is permanent (as
// retry.RoundTripper returns a 4xx response); otherwise the *retry.Error
// that ended the operation, which wraps the last attempt's status, so that
// status.Code(err) still reports it.
func (i *Interceptor) Unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	var vars retry.Vars
	for _, o := range opts {
		if v, ok := o.(varsOption); ok {
			vars = v.vars
		}
	}
	op := &operation{i: i, method: method, req: req, reply: reply, cc: cc, invoker: invoker, opts: opts}
	err := i.executor.Do(ctx, i.policy, vars, op.attempt)
	var re *retry.Error
	if errors.As(err, &re) && re.Code == codes.PermanentFailure && re.Last.Class == retry.Permanent && op.answered != nil {
		return op.answered // the dependency's own answer, as the caller would have had it
	}
	return err
}

// operation is one call's state across the executor's attempts, which Do
// makes one after another.
type operation struct {
	i       *Interceptor
	method  string
	req     any
	reply   any
	cc      *grpc.ClientConn
	invoker grpc.UnaryInvoker
	opts    []grpc.CallOption

	md       metadata.MD // the caller's metadata and the key, built once per call
	applied  bool        // an earlier attempt may have been applied
	refuse   error       // set when no further attempt may be sent
	answered error       // the server's own status of the last attempt
}

// attempt is the retry.Operation of one call.
func (o *operation) attempt(ctx context.Context, a retry.Attempt) error {
	if o.refuse != nil {
		return retry.NotDispatched(o.refuse)
	}
	if a.Key == "" && o.applied {
		return retry.NotDispatched(ErrNotReplaySafe)
	}
	if a.Key != "" {
		if o.md == nil {
			hk := o.i.metadataKey(a.Header)
			if hk.err != nil {
				return retry.NotDispatched(hk.err)
			}
			o.md, _ = metadata.FromOutgoingContext(ctx) // a copy
			if o.md == nil {
				o.md = metadata.MD{}
			}
			o.md.Set(hk.key, a.Key)
		}
		ctx = metadata.NewOutgoingContext(ctx, o.md)
	}
	c := &call{Context: ctx}
	err := o.invoker(c, o.method, o.req, o.reply, o.cc, o.opts...)
	hidden, counted := c.hiddenRetries(o.i.installed.Load(), o.cc, o.method)
	if hidden > 0 {
		o.refuse = ErrHiddenRetries
		if counted {
			o.i.charge(hidden)
		}
	}
	if err == nil {
		return nil
	}
	ev := c.evidence(err)
	o.applied = o.applied || c.mayHaveApplied()
	o.answered = nil
	if c.fromServer() {
		o.answered = err
	}
	if hidden > 0 {
		return &hiddenRetries{attempts: hidden + 1, err: ev}
	}
	return ev
}

// charge asks the policy's retry budget for each retry grpc-go made by
// itself, so that the budget counts every attempt the dependency received
// (RETRY-SMS-001 ADV-IR-01: no uncounted retries). They were already sent:
// a refusal cannot undo them, and the executor makes no further attempt.
func (i *Interceptor) charge(retries int) {
	b, ok := i.executor.Budget(i.policy)
	if !ok {
		return
	}
	for range retries {
		b.TryRetry()
	}
}

// metadataKey turns the policy's idempotency header into a metadata key:
// lower case, as gRPC requires. A header that gRPC would refuse, reserve or
// drop cannot carry the key, and no attempt is sent without it.
func (i *Interceptor) metadataKey(header string) *headerKey {
	if hk := i.header.Load(); hk != nil && hk.header == header {
		return hk
	}
	hk := &headerKey{header: header, key: strings.ToLower(header)}
	switch k := hk.key; {
	case k == "":
		hk.err = fmt.Errorf("retryguard: policy %s: idempotencyHeader is empty: the key cannot travel as gRPC metadata", i.policy)
	case strings.Trim(k, "abcdefghijklmnopqrstuvwxyz0123456789-_.") != "":
		hk.err = fmt.Errorf("retryguard: policy %s: idempotencyHeader %q: a gRPC metadata key holds only [0-9a-z-_.]", i.policy, header)
	case strings.HasPrefix(k, "grpc-"), strings.HasSuffix(k, "-bin"), k == "content-type", k == "user-agent", k == "te":
		hk.err = fmt.Errorf("retryguard: policy %s: idempotencyHeader %q is reserved by gRPC (grpc-*, *-bin, content-type, user-agent, te)", i.policy, header)
	}
	i.header.Store(hk)
	return hk
}

// hiddenRetries is the error of an attempt within which grpc-go retried.
type hiddenRetries struct {
	attempts int
	err      error
}

func (e *hiddenRetries) Error() string {
	return fmt.Sprintf("%s: up to %d attempts reached the dependency within one: %s", ErrHiddenRetries, e.attempts, e.err)
}

func (e *hiddenRetries) Unwrap() []error { return []error{e.err, ErrHiddenRetries} }
