// Package retry runs logical operations under published Retryguard
// policies: Do retries an operation as its policy allows (attempts,
// full-jitter backoff, deadline, Retry-After, retry budget, idempotency key)
// and nothing more; RoundTripper does the same for HTTP.
package retry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryguard/retryguard/api/codes"
	"github.com/retryguard/retryguard/api/httprules"
	"github.com/retryguard/retryguard/runtime/backoff"
	"github.com/retryguard/retryguard/runtime/budget"
	"github.com/retryguard/retryguard/runtime/clock"
	"github.com/retryguard/retryguard/runtime/policyconfig"
)

// Source serves the current policies by name; the watchers implement it.
type Source interface {
	Policy(name string) (*policyconfig.Payload, bool)
}

// Operation is one attempt of a logical operation. It returns nil on
// success, a *StatusError for an HTTP status, or the transport error.
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

	compiled sync.Map // policy name → *compiled
	opSeq    atomic.Uint64
}

// Option configures an Executor.
type Option func(*Executor)

// WithClock injects a clock (tests use clock.Fake).
func WithClock(c clock.Clock) Option { return func(e *Executor) { e.clock = c } }

// WithRand injects the random source of the backoff draws.
func WithRand(r backoff.Rand) Option { return func(e *Executor) { e.rand = r } }

// WithEventSink sends lifecycle events to s.
func WithEventSink(s EventSink) Option { return func(e *Executor) { e.events = s } }

// WithDeadLetters sends operations that did not complete to s.
func WithDeadLetters(s DeadLetterSink) Option { return func(e *Executor) { e.deadLetters = s } }

// WithMetrics records metrics in m.
func WithMetrics(m *Metrics) Option { return func(e *Executor) { e.metrics = m } }

// WithBudgets shares a budget registry (one per process is right).
func WithBudgets(r *budget.Registry) Option { return func(e *Executor) { e.budgets = r } }

// New returns an Executor reading policies from src.
func New(src Source, opts ...Option) *Executor {
	e := &Executor{source: src, clock: clock.Real{}}
	for _, o := range opts {
		o(e)
	}
	if e.budgets == nil {
		e.budgets = budget.NewRegistry(e.clock)
	}
	return e
}

// compiled is a policy prepared for the hot path; rebuilt when its payload
// changes.
type compiled struct {
	payload     *policyconfig.Payload
	name        string
	enforced    bool
	maxAttempts int
	key         *keyTemplate
	keyErr      error
	strategy    backoff.Strategy
	budget      *budget.Budget
	replaySafe  bool // a key, or an idempotent method
	metrics     *policyMetrics
}

// failClosed is the policy of a name the Source does not know: one attempt.
func (e *Executor) failClosed(name string) *compiled {
	return &compiled{name: name, maxAttempts: 1, metrics: e.metrics.forPolicy(name)}
}

func (e *Executor) policy(name string) *compiled {
	p, ok := e.source.Policy(name)
	if v, hit := e.compiled.Load(name); hit {
		c := v.(*compiled)
		if (ok && c.payload == p) || (!ok && c.payload == nil) {
			return c
		}
	}
	c := e.compile(name, p, ok)
	e.compiled.Store(name, c)
	return c
}

func (e *Executor) compile(name string, p *policyconfig.Payload, ok bool) *compiled {
	if !ok {
		return e.failClosed(name)
	}
	pol := &p.Policy
	c := &compiled{payload: p, name: name, maxAttempts: 1, metrics: e.metrics.forPolicy(name)}
	if pol.KeyTemplate != "" {
		c.key, c.keyErr = compileKey(pol.KeyTemplate)
	}
	if p.Enforcement.Mode != policyconfig.Enforced {
		return c
	}
	c.enforced = true
	c.maxAttempts = int(pol.MaxAttempts)
	c.strategy = backoff.Strategy{Jitter: backoff.Jitter(pol.Backoff.Jitter), Base: pol.Backoff.Base.D(),
		Cap: pol.Backoff.Cap.D(), Multiplier: pol.Backoff.Multiplier, Rand: e.rand}
	c.replaySafe = c.key != nil || httprules.IsIdempotentOperation(pol.Operation)
	if b := p.Budget; b != nil {
		c.budget = e.budgets.Get(b.Key(pol.Namespace), budget.Config{RetryPercent: b.RetryPercent, Window: b.Window.D(),
			MaxTokens: b.MaxTokens, MinRetriesPerSecond: b.MinRetriesPerSecond, Partitions: b.Partitions})
		if c.metrics != nil {
			c.metrics.budget = e.metrics.forBudget(b.Key(pol.Namespace), c.budget)
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
// rendered once from vars; a missing variable fails before any attempt. A
// policy that is unknown or published NoRetry gets exactly one attempt.
func (e *Executor) Do(ctx context.Context, policy string, vars Vars, op Operation) error {
	c := e.policy(policy)
	r := run{e: e, c: c, op: e.opSeq.Add(1)}
	if c.key != nil || c.keyErr != nil {
		key, err := c.renderKey(vars)
		if err != nil {
			return &Error{Code: codes.MissingKeyVariable, Policy: policy, Detail: err.Error(), Err: err}
		}
		r.key = key
	}
	return r.execute(ctx, op)
}

func (c *compiled) renderKey(vars Vars) (string, error) {
	if c.keyErr != nil {
		return "", c.keyErr
	}
	return c.key.render(vars)
}

// run is one logical operation's state, on the caller's stack.
type run struct {
	e       *Executor
	c       *compiled
	op      uint64
	key     string
	m       machine
	records []AttemptRecord
}

func (r *run) emit(from, to State, attempt int, code codes.Code) {
	r.c.metrics.transition(to)
	if r.e.events == nil {
		return
	}
	ev := Event{Operation: r.op, Policy: r.c.name, From: from, To: to, Attempt: attempt, At: r.e.clock.Now(), Key: r.key, Code: code}
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
		r.emit(from, next, attempt, code)
	}
}

func (r *run) execute(ctx context.Context, op Operation) error {
	c, e := r.c, r.e
	start := e.clock.Now()
	var deadline time.Time
	if c.payload != nil {
		deadline = start.Add(c.payload.Policy.Deadline.D())
	}
	r.m.state = Submitted
	r.emit("", Submitted, 0, "")
	var header string
	if c.payload != nil {
		header = c.payload.Policy.IdempotencyHeader
	}
	var prevDelay time.Duration
	now := start // one clock reading serves the first attempt
	for n := 1; ; n++ {
		r.to(Attempting, n, "")
		if n == 1 && c.budget != nil {
			c.budget.PrimaryAt(now)
		} else if n > 1 {
			now = e.clock.Now()
		}
		err := r.attempt(ctx, op, Attempt{Number: n, Policy: c.name, Key: r.key, Header: header}, deadline, now)
		if err == nil {
			if c.budget != nil {
				c.budget.Success()
			}
			c.metrics.attempt(Success)
			c.metrics.finished(n)
			r.to(Dispatched, n, "")
			return nil
		}
		ev := classify(err, c.retryOnStatus, c.retryOnError, e.clock.Now())
		c.metrics.attempt(ev.Class)
		d := c.decide(n, ev, remaining(ctx, deadline, e.clock.Now()), prevDelay)
		rec := AttemptRecord{Attempt: n, Evidence: ev, RetryEligible: d.eligible, Error: err.Error()}
		if d.next == BackoffWait {
			denial := budget.NoTokens // a retrying policy always carries a budget; without one, never retry
			if c.budget != nil {
				denial = c.budget.TryRetry()
				c.metrics.tokens(c.budget)
			}
			if denial != budget.Allowed {
				d = stop(BudgetExhausted, codes.RetryBudgetExhausted, fmt.Sprintf("retry budget denied a retry (%s)", denial), deniedBudget)
			} else {
				rec.BudgetConsumed = true
			}
		}
		r.records = append(r.records, rec)
		if d.next != BackoffWait {
			c.metrics.denied(d.reason)
			c.metrics.finished(n)
			return r.finish(ctx, d, err)
		}
		r.to(BackoffWait, n, "")
		if err := e.clock.Sleep(ctx, d.sleep); err != nil {
			// The lifecycle has no cancelled state: the operation takes one
			// last, empty ATTEMPTING step and ends as its last evidence says.
			r.to(Attempting, n+1, "")
			end := TerminalExhausted
			if ev.Class == Ambiguous {
				end = UnknownOutcome
			}
			return r.finish(ctx, stop(end, codes.DeadlineExceeded, "the caller's context ended during backoff", deniedDeadline), err)
		}
		prevDelay = d.sleep
	}
}

// attempt runs one attempt, bounded by perAttemptTimeout and the
// operation's deadline. When the caller's context already ends sooner, it is
// used as it is: no timer, no allocation.
func (r *run) attempt(ctx context.Context, op Operation, a Attempt, deadline, now time.Time) error {
	var limit time.Duration
	if p := r.c.payload; p != nil {
		limit = deadline.Sub(now)
		if t := p.Policy.PerAttemptTimeout.D(); t > 0 && t < limit {
			limit = t
		}
	}
	if limit > 0 {
		if d, ok := ctx.Deadline(); !ok || d.Sub(now) > limit {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, limit)
			defer cancel()
		}
	}
	return op(ctx, a)
}

func remaining(ctx context.Context, deadline, now time.Time) time.Duration {
	left := deadline.Sub(now)
	if d, ok := ctx.Deadline(); ok {
		left = min(left, time.Until(d))
	}
	return left
}

// Reasons a retry was denied, bounded for metric labels.
const (
	deniedBudget     = "budget"
	deniedDeadline   = "deadline"
	deniedRetryAfter = "retry_after"
	deniedPermanent  = "permanent"
	deniedAmbiguous  = "ambiguous"
	deniedExhausted  = "exhausted"
)

// decision is what to do after a failed attempt.
type decision struct {
	next     State
	code     codes.Code
	detail   string
	reason   string
	sleep    time.Duration
	eligible bool
}

func stop(s State, c codes.Code, detail, reason string) decision {
	return decision{next: s, code: c, detail: detail, reason: reason}
}

// decide applies the policy to one failed attempt. It does not touch the
// budget; the caller asks it last, so no token is spent on a retry that
// could not run anyway.
func (c *compiled) decide(n int, ev Evidence, left, prev time.Duration) decision {
	switch {
	case ev.Class == Permanent:
		return stop(TerminalExhausted, codes.PermanentFailure, fmt.Sprintf("HTTP %d is permanent", ev.Status), deniedPermanent)
	case !c.enforced:
		end := TerminalExhausted
		if ev.Dispatched && ev.Transport != "" {
			end = UnknownOutcome
		}
		reason := "the policy is not published"
		if c.payload != nil {
			reason = fmt.Sprintf("the policy is NoRetry (%s)", c.payload.Enforcement.Reason)
		}
		return stop(end, codes.PolicyNotEnforced, reason+": one attempt, failed"+describe(ev), deniedExhausted)
	case ev.Class == Ambiguous && !c.replaySafe:
		return stop(UnknownOutcome, codes.UnknownOutcome,
			ev.Transport+" after the request may have been applied, with no idempotency key and no idempotent method", deniedAmbiguous)
	case ev.Class == Unrecognized && ev.Transport != "" && ev.Dispatched:
		return stop(UnknownOutcome, codes.UnknownOutcome, ev.Transport+" (not listed for retry) after the request may have been applied", deniedAmbiguous)
	case ev.Class == Unrecognized:
		return stop(TerminalExhausted, codes.PermanentFailure, "evidence the policy does not list for retry"+describe(ev), deniedPermanent)
	}
	last := TerminalExhausted
	if ev.Class == Ambiguous {
		last = UnknownOutcome // stopping after an ambiguous failure leaves the outcome unknown
	}
	d := decision{eligible: true}
	switch {
	case n >= c.maxAttempts:
		d = stop(last, codes.AttemptsExhausted, fmt.Sprintf("all %d attempts failed", c.maxAttempts), deniedExhausted)
	case ev.RetryAfter > c.payload.Policy.RetryAfterMax.D():
		d = stop(last, codes.RetryAfterTooLong, fmt.Sprintf("Retry-After %s is beyond retryAfter.maxDelay %s", ev.RetryAfter, c.payload.Policy.RetryAfterMax.D()), deniedRetryAfter)
	default:
		sleep := max(c.strategy.Delay(n, prev), ev.RetryAfter)
		cost, reserve := c.payload.Policy.PerAttemptTimeout.D(), c.payload.Policy.MinRemaining.D()
		if left < sleep+cost || left <= reserve {
			d = stop(last, codes.DeadlineExceeded, fmt.Sprintf("%s left cannot hold a %s wait and a %s attempt above the %s reserve", left.Round(time.Millisecond), sleep, cost, reserve), deniedDeadline)
		} else {
			d.next, d.sleep = BackoffWait, sleep
		}
	}
	d.eligible = true
	return d
}

func describe(ev Evidence) string {
	switch {
	case ev.Status != 0:
		return fmt.Sprintf(" (HTTP %d)", ev.Status)
	case ev.Transport != "":
		return " (" + ev.Transport + ")"
	}
	return ""
}

// finish ends the operation in d's state, dead-lettering it when the state
// calls for it.
func (r *run) finish(ctx context.Context, d decision, last error) error {
	r.to(d.next, len(r.records), d.code)
	e := &Error{Code: d.code, State: d.next, Policy: r.c.name, Key: r.key, Attempts: len(r.records), Detail: d.detail, Err: last}
	if n := len(r.records); n > 0 {
		e.Last = r.records[n-1].Evidence
	}
	if d.next.DeadLettered() && r.e.deadLetters != nil {
		letter := DeadLetter{Operation: r.op, Policy: r.c.name, Key: r.key, State: d.next, Code: d.code, Attempts: r.records, At: r.e.clock.Now()}
		if p := r.c.payload; p != nil {
			letter.Namespace = p.Policy.Namespace
		}
		if err := r.e.deadLetters.Write(ctx, letter); err != nil {
			return errors.Join(e, fmt.Errorf("retryguard: the dead letter was not stored: %w", err))
		}
	}
	return e
}
