package retrygrpc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/runtime/retry"
)

// ErrHiddenRetries is matched, with errors.Is, by a call on which grpc-go
// retried by itself (a service config retryPolicy on a channel without
// grpc.WithDisableRetry): the dependency received attempts that the
// executor did not schedule. The executor then adds none of its own.
var ErrHiddenRetries = errors.New("retryguard: grpc-go retried the call itself (a service config retryPolicy); install the interceptor with DialOptions")

// ErrWithoutDialOptions is matched, with errors.Is, by a failed call on a
// channel built with the Interceptor's Unary but not with its DialOptions,
// whose stats handler did not see the call: what grpc-go did below the
// interceptor (its own retries, whether anything left the process) cannot
// be told, so the call gets one attempt.
var ErrWithoutDialOptions = errors.New("retryguard: the channel was not built with DialOptions: " +
	"the interceptor cannot see grpc-go's attempts, so the call gets one attempt")

// ErrNotReplaySafe is matched by an operation whose attempt without an
// idempotency key may have been applied: every gRPC call is an HTTP/2 POST,
// so without the key it is not sent again, whatever the policy's operation
// says.
var ErrNotReplaySafe = errors.New("retryguard: a gRPC call without an idempotency key is not sent again after it may have been applied")

// Interceptor enforces one published policy on a channel's unary calls
// through retry.Executor.Do (DoHedged under a hedging policy). It is also
// the stats.Handler that shows it what grpc-go did below it: how many
// attempts a call made and whether any of them
// left the process. It is safe for concurrent use; one Interceptor serves any
// number of channels, and judges each call by what its own channel showed.
type Interceptor struct {
	executor *retry.Executor
	policy   string
	// header caches the last idempotency header's metadata key.
	header atomic.Pointer[headerKey]
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
// defaults elsewhere"), the interceptor, and its stats handler. The
// interceptor they install knows that its channel has the handler: a call
// the handler did not see failed before grpc-go began any attempt, so it
// sent nothing.
func (i *Interceptor) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithDisableRetry(), grpc.WithChainUnaryInterceptor(i.watchedUnary), grpc.WithStatsHandler(i)}
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
// status.Code(err) still reports it. On a channel built without
// DialOptions, a call the Interceptor's stats handler did not see gets one
// attempt, and its failure matches ErrWithoutDialOptions.
func (i *Interceptor) Unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return i.unary(ctx, false, method, req, reply, cc, invoker, opts)
}

// watchedUnary is Unary on a channel built with DialOptions, whose stats
// handler is known to be installed.
func (i *Interceptor) watchedUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker,
	opts ...grpc.CallOption) error {
	return i.unary(ctx, true, method, req, reply, cc, invoker, opts)
}

func (i *Interceptor) unary(ctx context.Context, watched bool, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker,
	opts []grpc.CallOption) error {
	var vars retry.Vars
	for _, o := range opts {
		if v, ok := o.(varsOption); ok {
			vars = v.vars
		}
	}
	if m, ok := reply.(proto.Message); ok && i.executor.Hedges(i.policy) {
		return i.hedged(ctx, watched, method, req, m, cc, invoker, opts, vars)
	}
	op := &operation{i: i, watched: watched, method: method, req: req, reply: reply, cc: cc, invoker: invoker, opts: opts}
	err := i.executor.Do(ctx, i.policy, vars, op.attempt)
	if err == nil {
		return nil
	}
	var re *retry.Error // escapes to the heap: declared past the success path
	if errors.As(err, &re) && re.Code == codes.PermanentFailure && re.Last.Class == retry.Permanent && op.answered != nil {
		return op.answered // the dependency's own answer, as the caller would have had it
	}
	return err
}

// operation is one call's state across the executor's attempts, which Do
// makes one after another.
type operation struct {
	i       *Interceptor
	watched bool // the channel was built with DialOptions: its stats handler sees every attempt
	method  string
	req     any
	reply   any
	cc      *grpc.ClientConn
	invoker grpc.UnaryInvoker
	opts    []grpc.CallOption

	md       metadata.MD // the caller's metadata and the key, built once per call
	key      [1]string   // the key's value in md
	applied  bool        // an earlier attempt may have been applied
	answered error       // the server's own status of the last attempt

	// first is the first attempt's record, allocated with the operation:
	// most calls make one attempt. Each later attempt gets a record of its
	// own, since the transport may still report to an earlier one.
	first     call
	firstUsed bool
}

// attempt is the retry.Operation of one call.
func (o *operation) attempt(ctx context.Context, a retry.Attempt) error {
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
			o.key[0] = a.Key
			o.md[hk.key] = o.key[:] // as md.Set, in the operation's own array
		}
		ctx = metadata.NewOutgoingContext(ctx, o.md)
	}
	ctx = o.i.propagate(ctx)
	c := &o.first
	if o.firstUsed {
		c = new(call)
	}
	o.firstUsed = true
	c.Context, c.watched = ctx, o.watched
	err := o.invoker(c, o.method, o.req, o.reply, o.cc, o.opts...)
	hidden := c.hiddenRetries()
	if hidden > 0 {
		o.i.charge(hidden)
	}
	if err == nil {
		return nil
	}
	ev := c.evidence(err)
	o.applied = o.applied || c.mayHaveApplied(err)
	o.answered = nil
	if c.fromServer() {
		o.answered = err
	}
	return o.judge(c, ev, hidden)
}

// judge is a failed attempt's error for the executor: its evidence, or
// final when grpc-go retried by itself or could not be watched.
func (o *operation) judge(c *call, ev error, hidden int) error {
	switch {
	case hidden > 0:
		// The retries grpc-go sent cannot be recalled; none of the
		// executor's is added, and the status stays the server's.
		note := fmt.Sprintf("up to %d attempts reached the dependency within one", hidden+1)
		return retry.Final(&refused{err: ev, sentinel: ErrHiddenRetries, note: note}, "grpc-go retried the call itself")
	case !c.judged():
		return retry.Final(&refused{err: ev, sentinel: ErrWithoutDialOptions}, "the channel was not built with DialOptions")
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

// refused is the error of an attempt after which the operation may send no
// other: the attempt's evidence, and the sentinel that says why.
type refused struct {
	err      error
	sentinel error
	note     string // what the sentinel does not say
}

func (e *refused) Error() string {
	if e.note == "" {
		return fmt.Sprintf("%s: %s", e.sentinel, e.err)
	}
	return fmt.Sprintf("%s: %s: %s", e.sentinel, e.note, e.err)
}

func (e *refused) Unwrap() []error { return []error{e.err, e.sentinel} }

// propagate puts what the executor's Observer sends with the attempt
// running under ctx (a W3C traceparent) into the attempt's own copy of the
// outgoing metadata, its keys in lower case as gRPC's are; without an
// Observer it returns ctx as it is.
func (i *Interceptor) propagate(ctx context.Context) context.Context {
	if !i.executor.Observed() {
		return ctx
	}
	h := http.Header{}
	i.executor.Inject(ctx, h)
	if len(h) == 0 {
		return ctx
	}
	md, _ := metadata.FromOutgoingContext(ctx) // a copy: attempts do not share what each carries
	if md == nil {
		md = metadata.MD{}
	}
	for k, v := range h {
		md.Set(strings.ToLower(k), v...)
	}
	return metadata.NewOutgoingContext(ctx, md)
}
