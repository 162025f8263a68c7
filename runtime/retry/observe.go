package retry

import (
	"context"
	"net/http"
)

// Observer watches operations as the executor runs them, for tracing: an
// operation's start and end, and each attempt's start and end with the
// decision taken on it (runtime/otel implements it with OpenTelemetry).
// Without one (WithObserver not given) the executor pays a nil check at
// each of these points and nothing else.
//
// Each Start returns the context what follows runs under, derived from the
// one it is given (carrying a span, say; the context given when there is
// nothing to add): an attempt's is the one its Operation, its HTTP request
// or its gRPC call runs under, and the matching End is given it back. The
// calls of one operation are made one after another, from the goroutine
// that runs it, hedged attempts included; one Observer serves every
// operation at once, so it must be safe for concurrent use, and must not
// block: it runs on the caller's path.
type Observer interface {
	// StartOperation is given the RoundTripper's request (nil for Do and
	// DoHedged), the caller's: an Observer reads it and never changes it.
	StartOperation(ctx context.Context, policy string, req *http.Request) context.Context
	// StartAttempt is given a context derived from StartOperation's.
	StartAttempt(ctx context.Context, a Attempt) context.Context
	// EndAttempt is given the attempt's record (its Evidence: the class
	// success, and the status, for an attempt that succeeded; none for a
	// hedge cancelled when another succeeded) and the decision that
	// followed it: Next is DISPATCHED for a success, BACKOFF_WAIT for a
	// retry after Sleep, a final state (with Code and Reason) for a stop,
	// and ATTEMPTING for a hedged attempt the executor did not decide on
	// (cancelled, or failed beside the one decided on).
	EndAttempt(ctx context.Context, r AttemptRecord, d Decision)
	// EndOperation is given the attempts made and what Do returns.
	EndOperation(ctx context.Context, attempts int, err error)
	// Inject puts into h what the dependency receives with the attempt
	// running under ctx (a W3C traceparent): the RoundTripper calls it with
	// each attempt's request header, runtime/grpc for each attempt's
	// metadata.
	Inject(ctx context.Context, h http.Header)
}

// WithObserver has o watch every operation (see Observer).
func WithObserver(o Observer) Option { return func(e *Executor) { e.observer = o } }

// Observed reports whether the executor has an Observer, for a caller that
// prepares a carrier for Inject only then (runtime/grpc copies a call's
// metadata per attempt).
func (e *Executor) Observed() bool { return e.observer != nil }

// Inject puts into h what the executor's Observer sends with the attempt
// running under ctx (nothing without one): for an Operation that sends its
// request by other means than the RoundTripper.
func (e *Executor) Inject(ctx context.Context, h http.Header) {
	if e.observer != nil {
		e.observer.Inject(ctx, h)
	}
}

// startAttempt starts the observation of attempt a, which runs under ctx,
// or under f's context when it is an HTTP attempt (the call's or a hedge's
// fork). It returns the attempt's context.
func (r *run) startAttempt(ctx context.Context, f *call, a Attempt) context.Context {
	parent := ctx
	if f != nil {
		parent = f.ctx
	}
	actx := r.e.observer.StartAttempt(parent, a)
	if actx == nil {
		actx = parent
	}
	if f != nil {
		f.actx = actx
	}
	return actx
}

// endAttempt ends the observation of the attempt the retry loop decided on,
// which runs under actx (nil when it was not observed).
func (r *run) endAttempt(actx context.Context, rec AttemptRecord, d Decision) {
	if actx != nil {
		r.e.observer.EndAttempt(actx, rec, d)
	}
}

// endHedge ends the observation of a hedged attempt the retry loop does not
// decide on (see Observer.EndAttempt).
func (r *run) endHedge(ctx context.Context, rec AttemptRecord) {
	if ctx != nil {
		r.e.observer.EndAttempt(ctx, rec, Decision{Next: Attempting})
	}
}
