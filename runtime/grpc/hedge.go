package retrygrpc

import (
	"context"
	"errors"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/runtime/retry"
)

// hedged runs a unary call under a hedging policy through
// retry.Executor.DoHedged: attempts in flight side by side each invoke into
// a reply message, header, trailer and peer of their own, and only the
// winner's are given to the caller, so a cancelled loser never writes into
// what the caller reads.
func (i *Interceptor) hedged(ctx context.Context, watched bool, method string, req any, reply proto.Message, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts []grpc.CallOption, vars retry.Vars) error {
	op := &hedgedOperation{operation: operation{i: i, watched: watched, method: method, req: req, cc: cc, invoker: invoker}, reply: reply}
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			op.header = append(op.header, o.HeaderAddr)
		case grpc.TrailerCallOption:
			op.trailer = append(op.trailer, o.TrailerAddr)
		case grpc.PeerCallOption:
			op.peer = append(op.peer, o.PeerAddr)
		default:
			op.opts = append(op.opts, o)
		}
	}
	err := i.executor.DoHedged(ctx, i.policy, vars, op.attempt)
	if err == nil {
		op.mu.Lock()
		w := op.winner
		op.mu.Unlock()
		proto.Reset(reply)
		proto.Merge(reply, w.reply)
		for _, h := range op.header {
			*h = w.header
		}
		for _, t := range op.trailer {
			*t = w.trailer
		}
		for _, p := range op.peer {
			*p = w.peer
		}
		return nil
	}
	var re *retry.Error
	if errors.As(err, &re) && re.Code == codes.PermanentFailure && re.Last.Class == retry.Permanent {
		op.mu.Lock()
		defer op.mu.Unlock()
		// The server's own status of the decisive attempt, as the caller
		// would have had it; attempts ran side by side, so it is the one
		// whose status the executor decided on, never merely the last.
		for _, a := range op.statuses {
			if a.code == re.Last.Status {
				return a.err
			}
		}
	}
	return err
}

// hedgedOperation is one hedged call's state. Its attempts may run at
// once: what they share is guarded by mu, and each owns its reply.
type hedgedOperation struct {
	mu sync.Mutex
	operation
	reply   proto.Message
	header  []*metadata.MD
	trailer []*metadata.MD
	peer    []*peer.Peer
	winner  *hedgedAttempt
	// inflight counts the attempts invoking now.
	inflight int
	// statuses are the server's own answers of the failed attempts.
	statuses []answer
}

// answer is a server's status and its HTTP mapping.
type answer struct {
	code int
	err  error
}

// hedgedAttempt is what one attempt received.
type hedgedAttempt struct {
	reply           proto.Message
	header, trailer metadata.MD
	peer            peer.Peer
}

func (o *hedgedOperation) attempt(ctx context.Context, a retry.Attempt) error {
	o.mu.Lock()
	if a.Key == "" && (o.applied || o.inflight > 0) {
		// Every gRPC call is a POST: without the key, a hedge beside an
		// attempt still in flight is a replay of what may be applied.
		o.mu.Unlock()
		return retry.NotDispatched(ErrNotReplaySafe)
	}
	o.inflight++
	defer func() {
		o.mu.Lock()
		o.inflight--
		o.mu.Unlock()
	}()
	if a.Key != "" {
		if o.md == nil {
			hk := o.i.metadataKey(a.Header)
			if hk.err != nil {
				o.mu.Unlock()
				return retry.NotDispatched(hk.err)
			}
			md, _ := metadata.FromOutgoingContext(ctx) // a copy
			if md == nil {
				md = metadata.MD{}
			}
			md[hk.key] = []string{a.Key}
			o.md = md
		}
		ctx = metadata.NewOutgoingContext(ctx, o.md) // read only from here on, by every attempt
	}
	o.mu.Unlock()
	ctx = o.i.propagate(ctx)

	at := &hedgedAttempt{reply: o.reply.ProtoReflect().New().Interface()}
	opts := append(o.opts[:len(o.opts):len(o.opts)], grpc.Header(&at.header), grpc.Trailer(&at.trailer), grpc.Peer(&at.peer))
	c := &call{watched: o.watched}
	c.Context = ctx
	err := o.invoker(c, o.method, o.req, at.reply, o.cc, opts...)
	hidden := c.hiddenRetries()
	if hidden > 0 {
		o.i.charge(hidden)
	}
	if err == nil {
		o.mu.Lock()
		if o.winner == nil {
			o.winner = at
		}
		o.mu.Unlock()
		return nil
	}
	ev := c.evidence(err)
	o.mu.Lock()
	o.applied = o.applied || c.mayHaveApplied(err)
	var se *retry.StatusError
	if c.fromServer() && errors.As(ev, &se) {
		o.statuses = append(o.statuses, answer{code: se.Code, err: err})
	}
	o.mu.Unlock()
	return o.judge(c, ev, hidden)
}
