// Package retry runs logical operations under published Retryguard
// policies: Do retries an operation as its policy allows (attempts,
// full-jitter backoff, deadline, Retry-After, retry budget, idempotency key)
// and nothing more; RoundTripper does the same for HTTP.
package retry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptrace"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/retryguard/retryguard/contract/backoff"
	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/httprules"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/budget"
	"github.com/retryguard/retryguard/runtime/clock"
)

// Source serves the current policies by name; the watchers implement it.
// A Source that also has OnChange(func(name string)), as every
// watch.Watcher does, must run its handlers after every change it applies:
// the executor then asks it for a policy again only after a change.
type Source interface {
	Policy(name string) (*policyconfig.Payload, bool)
}

// Operation is one attempt of a logical operation. It returns nil on
// success, a *StatusError for an HTTP status, or the transport error as it
// is. Do takes an error as proof that the request never left only when it
// is a failed dial or lookup, a refused connection, or wrapped with
// NotDispatched, which an operation adds only with such proof. HTTP callers
// use the RoundTripper instead: an http.Client's error for a request that
// net/http may have re-sent by itself is no proof (docs/runtime.md, "Do and
// net/http"), and Do cannot see the request.
type Operation func(ctx context.Context, a Attempt) error

// Attempt tells an operation which attempt this is and the idempotency key
// every attempt of the operation carries.
type Attempt struct {
	Number int
	Policy string
	// Key is the rendered idempotency key ("" when the policy has no template).
	Key string
	// Header is the header the key belongs in.
	Header string
}

// Executor runs operations under policies from a Source. It is safe for
// concurrent use; create one per process.
type Executor struct {
	source      Source
	clock       clock.Clock
	rand        backoff.Rand
	budgets     *budget.Registry
	events      EventSink
	deadLetters DeadLetterSink
	metrics     *Metrics
	observer    Observer // nil unless WithObserver

	// compiled maps policy names to compiled policies. It is copied on
	// write (rare: a new name or payload) so that the hot path reads a
	// plain map, cheaper than sync.Map's interface-keyed lookup.
	compiled atomic.Pointer[map[string]*compiled]
	// only is the one compiled policy while the map holds one (nil
	// otherwise): most processes enforce one policy, found by comparing
	// its name instead of hashing it.
	only         atomic.Pointer[compiled]
	compileMu    sync.Mutex
	operationIDs atomic.Uint64
	// changes counts the Source's changes when it reports them (nil when it
	// does not): a compiled policy checked against the Source at the
	// current count is current, with no lookup. The Source's handler holds
	// the counter alone, never the executor.
	changes *atomic.Uint64

	// realBase is a wall-and-monotonic reading taken by New when the clock
	// is the real one (zero otherwise), realBaseUnix its Unix nanoseconds;
	// see execute.
	realBase     time.Time
	realBaseUnix int64
}

// Option configures an Executor.
type Option func(*Executor)

// WithClock injects a clock (tests use clock.Fake).
func WithClock(c clock.Clock) Option { return func(e *Executor) { e.clock = c } }

// withRand injects the random source of the backoff draws.
func withRand(r backoff.Rand) Option { return func(e *Executor) { e.rand = r } }

// WithEventSink sends lifecycle events to s.
func WithEventSink(s EventSink) Option { return func(e *Executor) { e.events = s } }

// WithDeadLetters sends operations that did not complete to s.
func WithDeadLetters(s DeadLetterSink) Option { return func(e *Executor) { e.deadLetters = s } }

// WithMetrics records metrics in m.
func WithMetrics(m *Metrics) Option { return func(e *Executor) { e.metrics = m } }

// WithBudgets shares a budget registry. Without it the executor makes its
// own, on the executor's clock, told the Source's delivery bound
// (budget.WithDelivery); a shared registry is told by its creator. Either
// way the process holds one share of each budget: registries on one clock
// for one pod share their budgets (see budget.Registry).
func WithBudgets(r *budget.Registry) Option { return func(e *Executor) { e.budgets = r } }

// New returns an Executor reading policies from src.
func New(src Source, opts ...Option) *Executor {
	e := &Executor{source: src, clock: clock.Real{}}
	for _, o := range opts {
		o(e)
	}
	if e.budgets == nil {
		// After the options, so WithClock reaches it. A Source states how
		// late it may deliver a payload; the registry takes no share of a
		// counted budget when that is later than the count's delivery
		// bound (a mounted volume), or when the Source states no bound at
		// all: an unknown delay is not a bounded one (docs/runtime.md).
		delivery := time.Duration(math.MaxInt64)
		if d, ok := src.(interface{ DeliveryBound() time.Duration }); ok {
			delivery = d.DeliveryBound()
		}
		e.budgets = budget.NewRegistry(e.clock, budget.WithDelivery(delivery))
	}
	if _, real := e.clock.(clock.Real); real {
		e.realBase = time.Now()
		e.realBaseUnix = e.realBase.UnixNano()
	}
	if s, ok := src.(interface{ OnChange(func(string)) }); ok {
		changes := new(atomic.Uint64)
		s.OnChange(func(string) { changes.Add(1) })
		e.changes = changes
	}
	return e
}

// Budget returns the retry budget the named policy draws on, as the
// executor enforces it (false when the policy has none, or is not in force).
func (e *Executor) Budget(policy string) (*budget.Budget, bool) {
	c := e.policy(policy)
	return c.budget, c.budget != nil
}

// compiled is a policy prepared for the hot path; rebuilt when its payload
// changes.
type compiled struct {
	payload            *policyconfig.Payload
	name               string
	notEnforced        string // why the policy is not in force; "" when it is
	maxAttempts        int
	key                *keyTemplate
	strategy           backoff.Strategy
	budget             *budget.Budget
	replaySafe         bool // a key, or an idempotent method
	header             string
	deadline           time.Duration
	perAttemptTimeout  time.Duration
	minRemaining       time.Duration
	retryAfterMaxDelay time.Duration
	hedge              *hedging // nil unless the policy hedges (hedge.go)
	metrics            *policyMetrics
	tokens             prometheus.Gauge // the budget's tokens, when metrics are on
	// checked is the Source's change count when the payload was last found
	// to be the Source's (see Executor.changes).
	checked atomic.Uint64
}

// failClosed is the policy of a name the Source does not know: one attempt.
func (e *Executor) failClosed(name string) *compiled {
	return &compiled{name: name, maxAttempts: 1, notEnforced: "the policy is not published", metrics: e.metrics.forPolicy(name, e.clock)}
}

func (e *Executor) policy(name string) *compiled {
	// The count is read before the Source: a change after this reading
	// counts past it, so c is checked again on the next call.
	var changes uint64
	if e.changes != nil {
		changes = e.changes.Load()
	}
	var c *compiled
	if o := e.only.Load(); o != nil && o.name == name {
		c = o
	} else if m := e.compiled.Load(); m != nil {
		c = (*m)[name]
	}
	if c != nil && e.changes != nil && c.checked.Load() == changes {
		return c
	}
	p, ok := e.source.Policy(name)
	if c != nil && ((ok && c.payload == p) || (!ok && c.payload == nil)) {
		c.checked.Store(changes)
		return c
	}
	c = e.compile(name, p, ok)
	c.checked.Store(changes)
	e.compileMu.Lock()
	defer e.compileMu.Unlock()
	next := make(map[string]*compiled, 1)
	if m := e.compiled.Load(); m != nil {
		for k, v := range *m {
			next[k] = v
		}
	}
	next[name] = c
	e.compiled.Store(&next)
	if len(next) == 1 {
		e.only.Store(c)
	} else {
		e.only.Store(nil)
	}
	return c
}

func (e *Executor) compile(name string, p *policyconfig.Payload, ok bool) *compiled {
	if !ok {
		return e.failClosed(name)
	}
	pol := &p.Policy
	c := &compiled{payload: p, name: name, maxAttempts: 1, metrics: e.metrics.forPolicy(name, e.clock),
		header: pol.IdempotencyHeader, deadline: pol.Deadline.D()}
	if pol.KeyTemplate != "" {
		key, err := compileKey(pol.KeyTemplate)
		if err != nil {
			// Fail closed, never shut: one attempt without a key, not zero.
			c.notEnforced = "the key template cannot render: " + err.Error()
			return c
		}
		c.key = key // a NoRetry policy's one attempt carries its key too
	}
	if p.Enforcement.Mode != policyconfig.Enforced {
		c.notEnforced = fmt.Sprintf("the policy is NoRetry (%s)", p.Enforcement.Reason)
		return c
	}
	c.maxAttempts = int(pol.MaxAttempts)
	c.strategy = backoff.Strategy{Jitter: backoff.Jitter(pol.Backoff.Jitter), Base: pol.Backoff.Base.D(),
		Cap: pol.Backoff.Cap.D(), Multiplier: pol.Backoff.Multiplier, Rand: e.rand}
	c.replaySafe = c.key != nil || httprules.IsIdempotentOperation(pol.Operation)
	c.hedge = compileHedging(pol, c.replaySafe)
	if h := c.hedge; h != nil && h.observed != nil {
		// The observed latency outlives a recompile: a counted budget's
		// renewal recompiles every 15 s, and a window started again each
		// time would hedge at cap forever on a policy with few answers.
		if m := e.compiled.Load(); m != nil {
			if old := (*m)[name]; old != nil && old.hedge != nil && old.hedge.observed != nil {
				h.observed = old.hedge.observed
			}
		}
	}
	c.perAttemptTimeout, c.minRemaining, c.retryAfterMaxDelay = pol.PerAttemptTimeout.D(), pol.MinRemaining.D(), pol.RetryAfterMaxDelay.D()
	if b := p.Budget; b != nil {
		var err error
		c.budget, err = e.budgets.Resolve(pol.Namespace, b)
		if c.metrics != nil {
			c.tokens = e.metrics.forBudget(b.Key(pol.Namespace), c.budget)
			if err != nil {
				e.metrics.conflict(b.Key(pol.Namespace))
			}
		}
	}
	return c
}

func (c *compiled) retryOnStatus(code int) bool {
	return c.payload != nil && slices.Contains(c.payload.Policy.RetryOnStatus, int32(code))
}

func (c *compiled) retryOnError(name string) bool {
	return c.payload != nil && slices.Contains(c.payload.Policy.RetryOnErrors, name)
}

// Do runs op as one logical operation under the named policy. It returns nil
// once an attempt succeeds, or an *Error saying why it stopped. The key is
// rendered once from vars; a missing variable, or a key that is too long or
// not printable ASCII, fails before any attempt. A policy that is unknown,
// published NoRetry, or whose key template cannot render gets exactly one
// attempt. For HTTP, use the RoundTripper (see Operation).
//
// Do never runs two attempts of one operation at once, whatever the policy:
// under a policy with hedging, its attempts are made one after another, as
// retries. Use DoHedged for an Operation that is safe for concurrent use.
func (e *Executor) Do(ctx context.Context, policy string, vars Vars, op Operation) error {
	return e.do(ctx, policy, vars, op, nil, false)
}

// DoHedged is Do for an Operation that is safe for concurrent use: under a
// policy with hedging, an attempt still pending after the hedging delay is
// hedged, so that two or more attempts of the operation run at once (each
// with its own Attempt), and the first success wins (see docs/runtime.md,
// Hedging). Without hedging, it is Do.
func (e *Executor) DoHedged(ctx context.Context, policy string, vars Vars, op Operation) error {
	return e.do(ctx, policy, vars, op, nil, true)
}

// Hedges reports whether the named policy, as now published, hedges: an
// Operation that needs its own state per attempt to run hedged (a gRPC
// reply message) pays for it only under such a policy.
func (e *Executor) Hedges(policy string) bool { return e.policy(policy).hedge != nil }

// do is Do for an Operation, or for the RoundTripper's call when call is
// not nil: its attempts are HTTP requests whose replay safety is the
// request's own, and which own their contexts.
func (e *Executor) do(ctx context.Context, policy string, vars Vars, op Operation, call *call, concurrent bool) error {
	c := e.policy(policy)
	r := run{e: e, c: c, call: call, concurrent: concurrent}
	if c.key != nil {
		key, err := c.key.render(vars)
		if err != nil {
			code := codes.MissingKeyVariable
			if _, bad := err.(*errBadKey); bad {
				code = codes.InvalidKeyTemplate
			}
			refused := &Error{Code: code, Policy: policy, Detail: err.Error(), Err: err}
			if e.observer != nil {
				// An operation of no attempt, so that its trace says why nothing was sent.
				e.observer.EndOperation(r.startOperation(ctx), 0, refused)
			}
			return refused
		}
		r.key = key
	}
	return r.execute(ctx, op)
}

// run is one logical operation's state, on the caller's stack.
type run struct {
	e           *Executor
	c           *compiled
	operationID uint64
	key         string
	start       time.Time     // when the operation started; on the real clock, made once an attempt fails
	startOffset time.Duration // start's offset from the executor's realBase (see elapsed)
	m           machine
	records     []AttemptRecord
	// applied: an attempt so far may have been applied (mayHaveApplied);
	// every later stop ends UNKNOWN_OUTCOME.
	applied bool
	call    *call // the RoundTripper's request, or nil
	// concurrent: op is safe for concurrent use (DoHedged), so a hedging
	// policy may run its attempts at once.
	concurrent bool
}

// id is the operation's number, taken from the executor's sequence the
// first time an event or a dead letter needs it: a successful operation with
// no event sink never pays for the shared counter.
func (r *run) id() uint64 {
	if r.operationID == 0 {
		r.operationID = r.e.operationIDs.Add(1)
	}
	return r.operationID
}

// emit sends an event when the executor has a sink; small enough to inline,
// so that the success path without one pays a test, not a call.
func (r *run) emit(from, to State, attempt int, code codes.Code) {
	if r.e.events != nil {
		r.send(from, to, attempt, code)
	}
}

func (r *run) send(from, to State, attempt int, code codes.Code) {
	ev := Event{OperationID: r.id(), Policy: r.c.name, From: from, To: to, Attempt: attempt, At: r.e.clock.Now(), Key: r.key, Code: code}
	if p := r.c.payload; p != nil {
		ev.Namespace, ev.Topic = p.Policy.Namespace, p.Policy.EventsTopic
	}
	r.e.events.Emit(ev)
}

func (r *run) to(next State, attempt int, code codes.Code) {
	from := r.m.state
	// The loop below only asks for legal transitions; were it ever to ask for
	// another, the operation still ends, and the error says why.
	if err := r.m.to(next); err == nil {
		if attempt > 1 || next != Attempting && next != Dispatched {
			// The first ATTEMPTING and its DISPATCHED are counted with the
			// attempt's outcome: succeededFirst, or started.
			r.c.metrics.transition(next)
		}
		r.emit(from, next, attempt, code)
	}
}

func (r *run) execute(ctx context.Context, op Operation) error {
	c, e := r.c, r.e
	// One clock reading serves the first attempt. On the real clock it is
	// the monotonic clock only, kept as its offset from New's reading: one
	// read instead of time.Now's two, and no time.Time arithmetic until an
	// attempt fails (r.start is made then). Everything Do computes from it
	// is a duration between monotonic readings (deadlines, the caller's
	// context deadline, budget windows), so a wall-clock step after start
	// changes nothing it decides.
	var now time.Time
	onReal := !e.realBase.IsZero()
	if onReal {
		r.startOffset = time.Since(e.realBase)
	} else {
		now = e.clock.Now()
		r.start = now
	}
	obs := e.observer
	if obs != nil {
		ctx = r.startOperation(ctx)
	}
	r.m.state = Submitted
	r.emit("", Submitted, 0, "")
	var prevDelay time.Duration
	// A call that does not succeed leaves the loop with the decision that
	// ended it, the error to return and the attempts made, for the one exit
	// below.
	var (
		d   Decision
		err error
		n   int
	)
	for n = 1; ; n++ {
		if n > 1 {
			c.metrics.retried(now)
		}
		r.to(Attempting, n, "")
		var elapsed time.Duration // since the start, when the attempt starts
		switch {
		case n > 1:
			elapsed = now.Sub(r.start)
		case c.budget == nil:
		case onReal:
			c.budget.PrimaryAtUnixNano(e.realBaseUnix + int64(r.startOffset))
		default:
			c.budget.PrimaryAt(now)
		}
		a := Attempt{Number: n, Policy: c.name, Key: r.key, Header: c.header}
		var actx context.Context // the attempt the Observer is told the end of (nil without one)
		decided := n             // the number of the attempt decided on: a hedged round's winner, or its decisive failure
		if c.hedge != nil && r.hedgeable() {
			err, n, decided, actx = r.hedged(ctx, op, a, elapsed)
		} else if obs == nil {
			err = r.attempt(ctx, op, a, elapsed)
		} else {
			actx = r.startAttempt(ctx, r.call, a)
			err = r.attempt(actx, op, a, elapsed)
		}
		if err == nil {
			if n == 1 && c.budget != nil {
				c.budget.Success() // only a primary success deposits
			}
			if c.metrics != nil { // the clock is read only for the metric
				if took := r.elapsed(); n == 1 {
					c.metrics.succeededFirst(took)
				} else {
					c.metrics.took(Dispatched, took)
					c.metrics.attempt(classSuccess)
					c.metrics.finished(n)
				}
			}
			r.to(Dispatched, n, "")
			if obs != nil {
				rec := AttemptRecord{Attempt: decided, Evidence: Evidence{Class: classSuccess, Dispatched: true}}
				if r.call != nil && r.call.res != nil {
					rec.Evidence.Status = r.call.res.StatusCode
				}
				r.endAttempt(actx, rec, Decision{Next: Dispatched})
				obs.EndOperation(ctx, n, nil)
			}
			return nil
		}
		if n == 1 {
			c.metrics.started()
			if onReal {
				r.start = e.realBase.Add(r.startOffset)
			}
		}
		now = e.clock.Now()
		ev := classify(clientResent(err, r.call == nil, r.key != ""), c.retryOnStatus, c.retryOnError, now)
		c.metrics.attempt(ev.Class)
		if n == 1 {
			c.metrics.primaryFailed(ev.Class, now)
		}
		in := DecisionInput{Evidence: ev, NotEnforced: c.notEnforced, ReplaySafe: c.replaySafe, MayHaveApplied: r.applied,
			Attempt: n, MaxAttempts: c.maxAttempts, Remaining: r.remaining(ctx, now), PerAttemptTimeout: c.perAttemptTimeout,
			MinRemaining: c.minRemaining, RetryAfterMaxDelay: c.retryAfterMaxDelay}
		if r.call != nil {
			in.ReplaySafe, in.Unrepeatable = r.call.replaySafe(r.key), r.call.unrepeatable
		} else {
			in.Unrepeatable = finalOf(err)
		}
		r.applied = r.applied || mayHaveApplied(ev)
		if c.notEnforced == "" && ev.Class != Permanent {
			in.Wait = c.strategy.Delay(n, prevDelay)
		}
		d = Decide(in)
		if d.AskBudget && r.call != nil {
			if in.Unrepeatable = r.call.prepare(); in.Unrepeatable != "" {
				d = Decide(in) // no token for an attempt that cannot be sent
			}
		}
		rec := AttemptRecord{Attempt: decided, Evidence: ev, RetryEligible: d.Eligible, Error: err.Error()}
		if d.AskBudget {
			in.BudgetAsked, in.Budget = true, budget.NoTokens // without a budget, never retry
			if c.budget != nil {
				in.Budget = c.budget.TryRetry()
				if c.tokens != nil {
					c.tokens.Set(c.budget.Tokens())
				}
			}
			d = Decide(in)
			rec.BudgetConsumed, rec.BudgetDenied = d.Retry(), in.Budget
		}
		r.records = append(r.records, rec)
		if obs != nil {
			r.endAttempt(actx, rec, d)
		}
		if !d.Retry() {
			break
		}
		if r.call != nil {
			r.call.discard() // at once, not when the next attempt starts
		}
		r.to(BackoffWait, n, "")
		c.metrics.waits(d.Sleep)
		end := TerminalExhausted // how a wait that starts no attempt ends
		if r.applied {
			end = UnknownOutcome
		}
		if serr := e.clock.Sleep(ctx, d.Sleep); serr != nil {
			d, err = stop(end, codes.DeadlineExceeded, "the caller's context ended during the backoff: "+serr.Error(), deniedCancelled), errors.Join(err, serr)
			break
		}
		now = e.clock.Now()
		if left := r.remaining(ctx, now); !backoff.CanStart(left, c.perAttemptTimeout, c.minRemaining) {
			// The wait overran what Decide foresaw: the rule holds when the
			// attempt would start, not only when the wait was chosen.
			d = stop(end, codes.DeadlineExceeded, fmt.Sprintf("%s left when the backoff ended, below the %s reserve or short of a %s attempt",
				left.Round(time.Millisecond), c.minRemaining, c.perAttemptTimeout), deniedDeadlineAtStart)
			break
		}
		prevDelay = d.Sleep
	}
	// The one way out of a call that did not succeed: the refusal counted by
	// its reason, the attempts made, and the terminal state finish records.
	c.metrics.denied(d.Reason)
	c.metrics.finished(n)
	err = r.finish(ctx, d, err)
	if obs != nil {
		obs.EndOperation(ctx, len(r.records), err)
	}
	return err
}

// startOperation starts the Observer's observation of the operation and
// returns the context it runs under; an HTTP call's attempts then run
// under it too.
func (r *run) startOperation(ctx context.Context) context.Context {
	var req *http.Request
	if r.call != nil {
		req = r.call.req
	}
	octx := r.e.observer.StartOperation(ctx, r.c.name, req)
	if octx == nil {
		return ctx
	}
	if r.call != nil {
		r.call.parent = octx
		r.call.ctx = httptrace.WithClientTrace(octx, &r.call.hooks.trace)
	}
	return octx
}

// attempt runs one attempt, bounded by perAttemptTimeout and the
// operation's deadline. When the caller's context already ends sooner, it is
// used as it is: no timer, no allocation. The RoundTripper's attempts make
// their own context from the limit, since a response outlives the attempt
// that returned it (its body is read after RoundTrip returns).
func (r *run) attempt(ctx context.Context, op Operation, a Attempt, elapsed time.Duration) error {
	var limit time.Duration
	if left, ok := r.leftAfter(elapsed); ok {
		limit = left
		if t := r.c.perAttemptTimeout; t > 0 && t < limit {
			limit = t
		}
	}
	if limit > 0 {
		if d, ok := ctx.Deadline(); ok && r.sinceStart(d)-elapsed <= limit {
			limit = 0 // the caller's deadline comes first
		}
	}
	if r.call != nil {
		return r.call.attempt(ctx, a, limit)
	}
	if limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	return op(ctx, a)
}

// elapsed is the time since the operation started, for its duration: on
// the real clock one monotonic reading less the start's offset, with no
// time.Time arithmetic (what a metered success pays over a plain one).
func (r *run) elapsed() time.Duration {
	if e := r.e; !e.realBase.IsZero() {
		return time.Since(e.realBase) - r.startOffset
	}
	return r.e.clock.Now().Sub(r.start)
}

// left is the policy's deadline left at now, false when it sets none. The
// deadline is the start plus the policy's, kept as that duration so that
// the success path adds no time.Time.
func (r *run) left(now time.Time) (time.Duration, bool) { return r.leftAfter(now.Sub(r.start)) }

// leftAfter is left at elapsed after the start.
func (r *run) leftAfter(elapsed time.Duration) (time.Duration, bool) {
	if r.c.deadline <= 0 {
		return 0, false
	}
	return r.c.deadline - elapsed, true
}

// sinceStart is how long after the operation's start t is (negative
// before it), with no r.start on the real clock: t less New's reading less
// the start's offset from it.
func (r *run) sinceStart(t time.Time) time.Duration {
	if e := r.e; !e.realBase.IsZero() {
		return t.Sub(e.realBase) - r.startOffset
	}
	return t.Sub(r.start)
}

// remaining is the deadline left at now: the sooner of the policy's and
// the caller's, both read on the executor's clock.
func (r *run) remaining(ctx context.Context, now time.Time) time.Duration {
	left := time.Duration(math.MaxInt64)
	if l, ok := r.left(now); ok {
		left = l
	}
	if d, ok := ctx.Deadline(); ok {
		left = min(left, d.Sub(now))
	}
	return left
}

// letterContext bounds a dead letter's write by the operation's remaining
// deadline, the sooner of the policy's and the caller's, so that no sink
// holds the caller past its own deadline (docs/deadletter-journal.md). The
// time left is read before the cancellation is stripped, since
// WithoutCancel drops the deadline too. It does not end when the caller
// cancels: an operation the caller gave up on still owes its record to
// reconciliation.
func (r *run) letterContext(ctx context.Context) (context.Context, context.CancelFunc) {
	now := r.e.clock.Now()
	left := r.remaining(ctx, now)
	lctx := context.WithoutCancel(ctx)
	if d, ok := ctx.Deadline(); ok && d.Sub(now) <= left {
		return context.WithDeadline(lctx, d) // the caller's own deadline, to the nanosecond
	}
	if left != time.Duration(math.MaxInt64) {
		return context.WithTimeout(lctx, left)
	}
	return lctx, func() {}
}

// finish ends the operation in d's state, dead-lettering it when the state
// calls for it.
func (r *run) finish(ctx context.Context, d Decision, last error) error {
	r.to(d.Next, len(r.records), d.Code)
	if r.c.metrics != nil {
		r.c.metrics.took(d.Next, r.elapsed())
	}
	e := &Error{Code: d.Code, State: d.Next, Policy: r.c.name, Key: r.key, Attempts: len(r.records), Detail: d.Detail, Err: last}
	if n := len(r.records); n > 0 {
		e.Last = r.records[n-1].Evidence
	}
	if d.Next.DeadLettered() && r.e.deadLetters != nil {
		letter := DeadLetter{OperationID: r.id(), Policy: r.c.name, Key: r.key, State: d.Next, Code: d.Code, Attempts: r.records, At: r.e.clock.Now()}
		if p := r.c.payload; p != nil {
			letter.Namespace = p.Policy.Namespace
		}
		lctx, cancel := r.letterContext(ctx)
		defer cancel()
		if err := r.e.deadLetters.Write(lctx, letter); err != nil {
			return errors.Join(e, fmt.Errorf("retryguard: the dead letter was not stored: %w", err))
		}
	}
	return e
}
