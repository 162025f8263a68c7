package retry

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/retryguard/retryguard/contract/backoff"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/budget"
)

// hedging is a policy's spec.hedging, compiled: an attempt still pending
// after wait() is hedged, at most max times. A hedge is an attempt: it counts
// against maxAttempts, asks the budget as a retry does (a refused hedge is not
// sent) and carries the operation's key.
type hedging struct {
	delay      time.Duration // fixed; 0 when taken from observed latency
	percentile int
	floor, cap time.Duration
	max        int
	observed   *latencies
}

// compileHedging returns nil when the policy does not hedge, or when it
// could not hedge safely (Parse refuses such a payload; the check here keeps
// a payload built in Go from hedging an unsafe operation all the same).
func compileHedging(pol *policyconfig.Policy, replaySafe bool) *hedging {
	h := pol.Hedging
	if h == nil || !replaySafe || h.MaxHedges < 1 {
		return nil
	}
	out := &hedging{delay: h.Delay.D(), percentile: int(h.Percentile), floor: h.Floor.D(), cap: h.Cap.D(), max: int(h.MaxHedges)}
	if out.delay <= 0 {
		out.observed = &latencies{}
	}
	return out
}

// wait is how long an attempt may be pending before it is hedged: the fixed
// delay, or the percentile of recent answers within [floor, cap]; cap until
// enough answers are seen.
func (h *hedging) wait() time.Duration {
	if h.delay > 0 {
		return h.delay
	}
	d, ok := h.observed.percentile(h.percentile)
	if !ok {
		return h.cap
	}
	return min(max(d, h.floor), h.cap)
}

// latencies is a window of the most recent answered attempts' durations.
type latencies struct {
	mu   sync.Mutex
	ring [256]time.Duration
	n    int // answers seen, up to len(ring) counted
	next int
}

// minObserved is how many answers a percentile needs before it is trusted.
const minObserved = 32

func (l *latencies) observe(d time.Duration) {
	l.mu.Lock()
	l.ring[l.next] = d
	l.next = (l.next + 1) % len(l.ring)
	l.n = min(l.n+1, len(l.ring))
	l.mu.Unlock()
}

func (l *latencies) percentile(p int) (time.Duration, bool) {
	l.mu.Lock()
	if l.n < minObserved {
		l.mu.Unlock()
		return 0, false
	}
	s := slices.Clone(l.ring[:l.n])
	l.mu.Unlock()
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)], true
}

// hedgeResult is one attempt's end, as a hedged attempt collects it.
type hedgeResult struct {
	number int
	err    error
	took   time.Duration
	call   *call           // the RoundTripper's forked attempt, or nil
	ev     Evidence        // err classified, once every attempt sent has failed
	ctx    context.Context // the attempt's, with an Observer (nil without)
}

// hedged runs attempt a and, while it is pending, its hedges. The first
// success wins and the others are cancelled (an Operation's ctx ends; it
// drains what it read; a RoundTripper's attempt has its context ended and
// its response closed). When every attempt sent fails, it returns the
// decisive failure (decisive), for the retry loop to decide on, and records
// the others as attempts. last is the number of the last attempt sent,
// whichever won: the operation made them all; decided is the number of the
// winner, or of the decisive failure. With an Observer, actx is the
// context of the attempt the retry loop ends (that one); the round ends
// the others' itself.
// Nothing is sent once the deadline, less its reserve, cannot hold an
// attempt, or once the budget refuses.
func (r *run) hedged(ctx context.Context, op Operation, a Attempt, elapsed time.Duration) (err error, last, decided int, actx context.Context) {
	c, e, h := r.c, r.e, r.c.hedge
	hedges := min(h.max, c.maxAttempts-a.Number)
	if hedges <= 0 {
		if e.observer == nil {
			return r.attempt(ctx, op, a, elapsed), a.Number, a.Number, nil
		}
		actx = r.startAttempt(ctx, r.call, a)
		return r.attempt(actx, op, a, elapsed), a.Number, a.Number, actx
	}
	if !e.realBase.IsZero() && r.start.IsZero() {
		// The retry loop makes r.start when a first attempt fails; a hedged
		// round may end past the first attempt's number, so it is made here.
		r.start = e.realBase.Add(r.startOffset)
	}
	// The RoundTripper's attempts each run as a call of their own (fork).
	var first *call
	if r.call != nil {
		var ferr error
		if first, ferr = r.call.fork(a.Number == 1); ferr != nil {
			if e.observer != nil {
				actx = r.startAttempt(ctx, nil, a) // the retry loop ends it, as an attempt not sent
			}
			return NotDispatched(ferr), a.Number, a.Number, actx
		}
	}
	now := e.clock.Now()
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan hedgeResult, hedges+1)
	// The attempts run on a copy of the run, which they only read: r itself
	// must not escape, or every Do would allocate it, hedging or not.
	cp := new(run)
	*cp = *r
	var calls []*call // the RoundTripper's attempts sent, to cancel the losers
	launch := func(n int, at time.Time, elapsed time.Duration, f *call) {
		b := a
		b.Number = n
		ar := cp
		if f != nil {
			ar = new(run)
			*ar = *cp
			ar.call = f
			calls = append(calls, f)
		}
		var sctx context.Context // the attempt's, observed
		if e.observer != nil {
			sctx = r.startAttempt(hctx, f, b) // ended by the round, or (the winner's, the decisive one's) by the retry loop
		}
		go func() {
			ctx := hctx
			if sctx != nil {
				ctx = sctx
			}
			err := ar.attempt(ctx, op, b, elapsed)
			results <- hedgeResult{number: n, err: err, took: e.clock.Now().Sub(at), call: f, ctx: sctx}
		}()
	}
	fire := make(chan struct{}, 1)
	arm := func() {
		go func() {
			if e.clock.Sleep(hctx, h.wait()) == nil {
				fire <- struct{}{}
			}
		}()
	}
	launch(a.Number, now, elapsed, first)
	arm()
	last, inFlight := a.Number, 1
	var failed []hedgeResult
	stopped := false // no more hedges: the budget refused, or the deadline cannot hold one
	for inFlight > 0 {
		select {
		case res := <-results:
			inFlight--
			if res.err == nil {
				// The losers are cancelled, and waited for: no Operation of
				// this call runs after Do returns, and each has drained and
				// closed what it read. Their results are dropped.
				cancel()
				for _, f := range calls {
					if f != res.call {
						f.stop()
					}
				}
				for ; inFlight > 0; inFlight-- {
					lost := <-results
					if lost.call != nil {
						lost.call.drop()
					}
					r.endHedge(lost.ctx, AttemptRecord{Attempt: lost.number})
				}
				actx = res.ctx
				if h.observed != nil {
					h.observed.observe(res.took)
				}
				for _, f := range failed {
					if f.call != nil {
						f.call.drop()
					}
				}
				now = e.clock.Now()
				r.classifyHedges(failed, now) // they failed: their evidence is recorded, not a cancellation's
				r.recordHedges(failed, now)
				if res.call != nil {
					r.call.adopt(res.call)
				}
				// The operation made every attempt sent, the winner's and the
				// cancelled ones': the retry loop counts them all (its
				// attempts per operation, and no first-try success when a
				// hedge was sent, so no deposit either: fewer tokens, never more).
				if a.Number == 1 && last > 1 {
					c.metrics.started() // not a first-attempt success, as the retry loop counts one
				}
				return nil, last, res.number, actx
			}
			failed = append(failed, res)
			// An answer that failed ends the hedging: what follows it is the
			// retry loop's, with its backoff, jitter and the answer's
			// Retry-After (INV-RTY-02, and 002's "do not retry before a
			// valid Retry-After"). Attempts in flight may still win.
			stopped = true
		case <-fire:
			if stopped || last-a.Number >= hedges {
				continue
			}
			at := e.clock.Now()
			if !backoff.CanStart(r.remaining(ctx, at), c.perAttemptTimeout, c.minRemaining) {
				stopped = true
				continue
			}
			var f *call
			if r.call != nil {
				// The body is made before the budget is asked: no token for
				// a hedge that cannot be sent.
				var ferr error
				if f, ferr = r.call.fork(false); ferr != nil {
					stopped = true
					continue
				}
			}
			if !r.hedgeGranted() {
				if f != nil {
					f.drop() // a refused hedge is not sent
				}
				stopped = true
				continue
			}
			last++
			// Not counted in the recovery window (retried): a hedge answers
			// a slow attempt, not a fault, and a policy that hedges at a
			// steady rate would otherwise never be back at the baseline of
			// retries, and its recovery lag would grow after every fault.
			r.emit(Attempting, Attempting, last, "")
			launch(last, at, r.sinceStart(at), f)
			inFlight++
			if last-a.Number < hedges {
				arm()
			}
		}
	}
	// Every attempt sent failed: the decisive one goes to the retry loop, the
	// others are recorded here, each as an attempt.
	now = e.clock.Now()
	r.classifyHedges(failed, now)
	i := decisive(failed, last)
	err, decided, actx = failed[i].err, failed[i].number, failed[i].ctx
	if f := failed[i].call; f != nil {
		r.call.adopt(f) // its response, if any, is the one the retry loop keeps or discards
	}
	for j, f := range failed {
		if j != i && f.call != nil {
			f.call.drop()
		}
	}
	r.recordHedges(slices.Delete(failed, i, i+1), now)
	if a.Number == 1 && last > 1 {
		c.metrics.started() // the retry loop counts it for a first attempt that failed alone
	}
	return err, last, decided, actx
}

// hedgeable says whether this operation's attempts may run at once: the
// RoundTripper's when the request itself is replay-safe and its body can be
// sent again, Do's only when its Operation is safe for concurrent use
// (DoHedged).
func (r *run) hedgeable() bool {
	if r.call != nil {
		return r.call.canHedge(r.key)
	}
	return r.concurrent
}

// decisive is the index of the failure, of a round whose attempts all
// failed, that the retry loop decides on: one after which no attempt may
// follow (a permanent answer, such as a 4xx other than 429 (INV-RTY-03), an
// unparseable Retry-After (MC-FM-01), or a Final error) over any other, then
// the longest Retry-After (MC-PO-01), then the last sent. A round never
// retries past what one of its answers forbade.
func decisive(failed []hedgeResult, last int) int {
	best, bestStops, bestAfter := -1, false, time.Duration(0)
	for i, f := range failed {
		ev := f.ev
		stops := ev.Class == Permanent || ev.RetryAfterUnparseable || finalOf(f.err) != ""
		better := best < 0 || (stops && !bestStops)
		if !better && stops == bestStops {
			better = ev.RetryAfter > bestAfter || (ev.RetryAfter == bestAfter && f.number == last)
		}
		if better {
			best, bestStops, bestAfter = i, stops, ev.RetryAfter
		}
	}
	return best
}

// hedgeGranted asks the budget for a hedge as the retry loop asks it for a
// retry: without a budget, never.
func (r *run) hedgeGranted() bool {
	c := r.c
	if c.budget == nil {
		return false
	}
	d := c.budget.TryRetry()
	if c.tokens != nil {
		c.tokens.Set(c.budget.Tokens())
	}
	return d == budget.Allowed
}

// classifyHedges gives each failed attempt of a round its evidence.
func (r *run) classifyHedges(failed []hedgeResult, now time.Time) {
	for j, f := range failed {
		failed[j].ev = classify(clientResent(f.err, r.call == nil, r.key != ""), r.c.retryOnStatus, r.c.retryOnError, now)
	}
}

// recordHedges records attempts that failed beside the one the retry loop
// decides on: their evidence, in the attempts of a dead letter, and whether
// they may have been applied, which keeps a later stop UNKNOWN_OUTCOME.
func (r *run) recordHedges(failed []hedgeResult, now time.Time) {
	c := r.c
	for _, f := range failed {
		ev := f.ev
		c.metrics.attempt(ev.Class)
		if f.number == 1 {
			c.metrics.primaryFailed(ev.Class, now)
		}
		r.applied = r.applied || mayHaveApplied(ev)
		rec := AttemptRecord{Attempt: f.number, Evidence: ev, BudgetConsumed: f.number > 1, Error: f.err.Error()}
		r.records = append(r.records, rec)
		r.endHedge(f.ctx, rec)
	}
}
