// Package budget is the in-pod retry budget: a token bucket refilled by
// primary successes, plus a hard cap on retries as a share of primary
// attempts over a rolling window. One Budget serves every policy that names
// the same RetryBudget.
//
// The arithmetic is RETRY-SMS-001's (MC-PO-01): a first attempt that
// succeeds deposits retryPercent/100 of a token (0.1 at 10%); a success that
// needed retries deposits nothing. A retry withdraws 1.0 token, and retries
// are blocked when the balance is <= 0. So a balance of 0.1 still buys a
// retry (leaving -0.9), and a balance of exactly 0 does not: the spec's rule,
// chosen over "needs a whole token", which would deny a retry the spec
// allows. The balance therefore never falls to -1 or below, and over time
// the bucket still grants one retry per 100/retryPercent primary successes.
//
// The ratio cap (INV-RTY-04: retries within retryPercent% of the primaries
// in the window) would deny every retry of a process that has seen no
// traffic yet. A budget therefore holds a start credit of Credit primaries,
// exactly enough for its full bucket of retries, and the ratio divides by
// max(the real primaries in the window, the credit while it is in the
// window): never by their sum, so the credit never adds to real traffic.
// The one bounded exception: until the pod has seen Credit real primaries
// in the window, its retries may exceed retryPercent% of them, by at most
// its share of maxTokens (the bucket it started with). A cold pod can
// retry its first failures, as gRPC's retry throttling and the AWS SDK's
// standard mode allow with their full initial buckets, and no more.
//
// minRetriesPerSecond is a floor, not an addition: while the retries this
// second (granted by any rule) are below it, a retry is granted whatever the
// tokens, and whatever the ratio only for a low-traffic caller, one whose
// window holds fewer than Credit real primaries (this pod's start credit,
// or none at all when its share of maxTokens rounds to zero).
// Once the window holds Credit real primaries the ratio rules, floor or
// not: INV-RTY-04, "Under no circumstance may retry volume exceed 10% of
// primary request volume over any 60-second rolling window". Floor retries
// are accounted like any other: they count in the window and withdraw a
// token while the balance is above 0.
//
// A budget shared by a fleet of pods divides its absolute figures
// (maxRetriesPerSecond, maxTokens, minRetriesPerSecond) over D pods, every
// share rounded down, so that D pods together never hold more than the
// figure (see Denominator). A pod's share of a counted budget is positive
// only while a published consumer count names it, and a share that grows
// waits policyconfig.ConsumerCountDelivery first, so that the pods whose
// shares shrank have heard of it. maxRetriesPerSecond is a hard cap,
// credited per second of the budget's clock, that no other rule (the floor
// included) grants past. docs/runtime.md states each rule with the spec
// sentence it serves.
package budget

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/clock"
)

// scale makes tokens fixed-point: 1 token is 1000 milli-tokens, so a 10%
// budget deposits exactly 100 per success and ten successes buy one retry.
const scale = 1000

// bucketsPerWindow divides the rolling window; the ring has one more, for
// the bucket the window's far edge falls in.
const bucketsPerWindow = 10

// Config is a budget's figures, as a payload carries them (the same names
// as policyconfig.Budget's), with the controller's count of the pods that
// share them. Its optional fields are pointers, as in the payload: a Budget
// keeps its own copy of what they point to, and compares them by value.
type Config struct {
	RetryPercent        int32
	Window              time.Duration
	MaxTokens           int32
	MinRetriesPerSecond int32
	Partitions          int32
	// MaxRetriesPerSecond is the fleet's absolute retry allowance per
	// second; nil when the budget sets none (a pointer to 0 allows no retry
	// at all), as in the RetryBudget's spec and the payload.
	MaxRetriesPerSecond *int32
	// Counted says the budget selects its consumers: the payload says so,
	// its count comes from the budget's ConfigMap, and until one is joined
	// (policyconfig.Payload.Join) Consumers is nil: no share. An uncounted
	// budget divides the absolute figures over Partitions.
	Counted bool
	// Consumers is the published count of the pods that share the budget
	// (nil: none joined). Only its Count and ObservedAt are read, and only
	// they are kept (clone): what its Members say of this pod is Included.
	Consumers *policyconfig.Consumers
	// Included says Consumers names this pod (by the UID the downward API
	// gives it): the one fact about the count that is this pod's, not the
	// payload's, decided once by ConfigOf.
	Included bool
}

// figures is c without the consumer count: what a budget's generation
// decides. The count changes between generations, as pods come and go.
func (c Config) figures() Config { return withCountOf(c, Config{}) }

// withCountOf is c's figures with o's consumer count.
func withCountOf(c, o Config) Config {
	c.Counted, c.Consumers, c.Included = o.Counted, o.Consumers, o.Included
	return c
}

// clone is c with copies of what its pointers point to (of the count, its
// Count and ObservedAt), so that a caller that keeps c, and later changes
// what it points to, changes no budget's.
func (c Config) clone() Config {
	if m := c.MaxRetriesPerSecond; m != nil {
		c.MaxRetriesPerSecond = new(*m)
	}
	if n := c.Consumers; n != nil {
		c.Consumers = &policyconfig.Consumers{Count: n.Count, ObservedAt: n.ObservedAt}
	}
	return c
}

// equal says a and b hold the same figures and count, comparing what their
// pointers point to (of the count, its Count and ObservedAt).
func equal(a, b Config) bool {
	if !same(a.MaxRetriesPerSecond, b.MaxRetriesPerSecond) || !sameCount(a.Consumers, b.Consumers) {
		return false
	}
	a.MaxRetriesPerSecond, a.Consumers, b.MaxRetriesPerSecond, b.Consumers = nil, nil, nil, nil
	return a == b
}

// same says p and q are both nil, or point to equal values.
func same[T comparable](p, q *T) bool {
	return p == q || p != nil && q != nil && *p == *q
}

// sameCount says p and q are both nil, or counts of the same Count at the
// same ObservedAt (compared as Config values always were, with ==).
func sameCount(p, q *policyconfig.Consumers) bool {
	return p == q || p != nil && q != nil && p.Count == q.Count && p.ObservedAt == q.ObservedAt
}

// ZeroShare is the Denominator of a pod whose share is zero.
const ZeroShare = 0

// Denominator returns D, the number of pods the budget's absolute figures
// (maxRetriesPerSecond, maxTokens, minRetriesPerSecond) are divided over,
// judged at now on the pod's clock:
//   - an uncounted budget (it selects no consumers): Partitions;
//   - a counted one without a count joined, or with one that does not name
//     this pod: ZeroShare, whatever its age, since the Count pods it
//     counted may together be using the whole allowance (a count of 0
//     names no pod);
//   - a fresh count (at most policyconfig.ConsumerCountStaleAfter old) that
//     names it: its Count;
//   - a stale count (the controller is down, or this pod's watch is cut
//     off): ZeroShare. The fleet may have grown meanwhile, and the pods
//     that heard a newer count hold its shares, which add up to the whole
//     allowance; only a share of zero keeps "the fleet never grants more
//     than the allowance in a second" whatever the fleet became, since
//     partitions is not a declared maximum of the fleet's size.
//
// A count dated more than the clock skew in the future is no evidence of
// a recent count either; it is treated as stale (the Registry dates such a
// count when this pod read it, so that a pod whose clock runs behind keeps
// its share). So the pods a count names hold at most the allowance
// together, and the pods it does not name hold nothing: the fleet may grow
// while the controller is down, or while the selector misses pods, and
// never grant more than the allowance. A Budget applies a D that grows its
// share only after the delivery bound.
func Denominator(c Config, now time.Time) int64 {
	parts := int64(max(c.Partitions, 1))
	if !c.Counted {
		return parts
	}
	if c.Consumers == nil || !c.Included || c.Consumers.Count < 1 {
		return ZeroShare
	}
	if age := now.Sub(c.Consumers.ObservedAt); age > policyconfig.ConsumerCountStaleAfter || age < -policyconfig.ConsumerCountClockSkew {
		return ZeroShare
	}
	return int64(c.Consumers.Count)
}

// grows says a share over d pods is larger than one over cur pods.
func grows(d, cur int64) bool {
	return d != ZeroShare && (cur == ZeroShare || d < cur)
}

// Denial says why a retry was refused.
type Denial string

const (
	// Allowed: not refused.
	Allowed Denial = ""
	// NoTokens: the balance is at or below 0.
	NoTokens Denial = "tokens"
	// RatioExceeded: retries would pass retryPercent% of primaries in the window.
	RatioExceeded Denial = "ratio"
	// RateExceeded: this second's share of maxRetriesPerSecond is spent.
	RateExceeded Denial = "rate"
	// NoShare: this pod's share of the fleet's budget is zero: no consumer
	// count names it, or the share it is named for still waits the
	// delivery bound (see Denominator).
	NoShare Denial = "share"
	// SlowDelivery: this pod reads payloads through a source slower than
	// the delivery bound (a mounted volume), so it takes no share of a
	// counted budget's absolute figures (see WithDelivery).
	SlowDelivery Denial = "delivery"
)

// maxCreditSeconds bounds the seconds of rate credit added at once, so a
// clock that jumps years ahead cannot overflow it (the credit is capped at
// a second's worth, or one retry, long before).
const maxCreditSeconds = 1 << 20

type params struct {
	config    Config
	share     int64 // D, the pods the absolute figures are divided over; ZeroShare refuses every retry
	deposit   int64 // milli-tokens per primary success
	capacity  int64 // milli-tokens
	percent   int64
	width     int64 // bucket width, ns
	floor     int64 // retries per second allowed whatever the ratio
	credit    int64 // the start credit, in primaries
	limited   bool  // maxRetriesPerSecond is set
	perSecond int64 // milli-retries of rate credit each new second adds: whole retries
	maxRate   int64 // the rate credit's cap: one second's worth, never saved up
}

// paramsOf divides c's absolute figures over d pods, each rounded down:
// tokens, the floor and the per-second allowance, so that d pods never hold
// more than the fleet's figure (d cold pods never more than maxTokens), and
// never grant more than its figure in one second. A pod whose share of a
// figure is below one holds none of it.
func paramsOf(c Config, d int64) *params {
	window := max(c.Window, time.Second)
	percent := int64(max(c.RetryPercent, 1))
	p := &params{config: c, share: d, deposit: int64(c.RetryPercent) * scale / 100, percent: int64(c.RetryPercent),
		width: int64(window) / bucketsPerWindow, limited: c.MaxRetriesPerSecond != nil}
	if d <= ZeroShare {
		p.share = ZeroShare
		return p
	}
	tokens := int64(max(c.MaxTokens, 1)) / d
	p.capacity = tokens * scale
	p.floor = int64(max(c.MinRetriesPerSecond, 0)) / d
	p.credit = (tokens*100 + percent - 1) / percent
	if p.limited {
		p.perSecond = int64(max(*c.MaxRetriesPerSecond, 0)) / d * scale
		p.maxRate = p.perSecond
	}
	return p
}

// partitioned is c's figures divided as a budget without a consumer count
// divides them: over Partitions.
func partitioned(c Config) *params { return paramsOf(c, int64(max(c.Partitions, 1))) }

// credit is the start credit of a budget without a consumer count: the
// primaries that let the ratio allow its full bucket (this pod's share of
// maxTokens, rounded down) of retries, ceil(tokens·100/retryPercent).
func credit(c Config) int64 { return partitioned(c).credit }

// Share is one pod's share of a budget's absolute figures.
type Share struct {
	// Tokens is maxTokens over D and MinRetriesPerSecond is
	// minRetriesPerSecond over D, both rounded down.
	Tokens, MinRetriesPerSecond int64
	// MilliRetriesPerSecond is maxRetriesPerSecond over D, rounded down to
	// whole retries, times 1000: the rate credit each new second adds.
	// Meaningful only when Limited (the budget sets maxRetriesPerSecond).
	MilliRetriesPerSecond int64
	Limited               bool
}

// ShareOver is a pod's share of c when the absolute figures are divided
// over d pods (Denominator's answer; ZeroShare gives nothing), as the
// budget enforces it.
func ShareOver(c Config, d int64) Share {
	p := paramsOf(c, d)
	return Share{Tokens: p.capacity / scale, MinRetriesPerSecond: p.floor, MilliRetriesPerSecond: p.perSecond, Limited: p.limited}
}

type bucket struct {
	epoch     atomic.Int64
	primaries atomic.Int64
}

// Budget is safe for concurrent use. Primary and Success, the success path,
// use atomics only; TryRetry takes a mutex, and only failures reach it.
type Budget struct {
	clock clock.Clock
	// base is a reading of the real clock taken by New (zero on any other
	// clock), and baseNanos its UnixNano: Primary counts from base on the
	// monotonic clock alone, one clock read where time.Now takes two.
	base      time.Time
	baseNanos int64
	// delay is how long a growing share waits: the delivery bound.
	delay time.Duration
	// unshared says this pod's payloads arrive later than the delivery
	// bound: it takes no share of a counted budget.
	unshared bool
	params   atomic.Pointer[params] // the share in force
	tokens   atomic.Int64           // milli-tokens
	// high is the latest bucket epoch seen: a clock that steps backwards is
	// held at it, so it can never reopen old buckets or mint allowances.
	high atomic.Int64
	// The success path writes the ring; the pad keeps those writes off the
	// line that holds the fields above, which every operation reads.
	_         [64]byte
	primaries [bucketsPerWindow + 1]bucket

	mu sync.Mutex
	// config is the latest configuration offered; params may still hold
	// an older one while a larger share waits (pending, from pendingAt).
	config    Config
	pending   *params
	pendingAt time.Time

	retries     [bucketsPerWindow + 1]int64
	retryEpochs [bucketsPerWindow + 1]int64
	// second is the latest whole second seen (held, like high, against a
	// clock that steps back); secondRetries counts every retry granted in it.
	second        int64
	secondRetries int64
	// rate is the maxRetriesPerSecond credit, in milli-retries: each new
	// second adds the pod's share, a retry spends 1000.
	rate int64
	// filled says the budget has had a non-zero share, and with it its
	// full bucket and start credit. A budget whose share starts at zero
	// gets them when its share first becomes non-zero.
	filled bool
	// credit is the start credit's primaries and creditEpoch the bucket it
	// was granted in (-1: none); it counts while that bucket is in the window.
	credit, creditEpoch int64
	// olderEpoch is the bucket epoch (-1: none) for which olderPrimaries
	// and olderRetries hold the window's counts outside its own bucket:
	// the primaries of the 9 buckets before it, the retries of the 10. Those
	// buckets are closed, so TryRetry sums them once a bucket, not on every
	// call. A primary that a racing goroutine adds to a closed bucket after
	// the sum is left out of it, which only ever lowers the allowance.
	olderEpoch, olderPrimaries, olderRetries int64
}

// Option configures a Budget.
type Option func(*Budget)

// New returns a budget that holds its full bucket and start credit, unless
// its share is zero (see Denominator). The share of a counted budget starts
// at zero and takes the count's share after policyconfig.ConsumerCountDelivery,
// as any share that grows does. Its first second grants no retry under
// maxRetriesPerSecond: rate credit comes with each new second, as it does
// for every pod at the same instant. It keeps a copy of c: changing what
// c's pointers point to later changes no budget.
func New(c Config, clk clock.Clock, opts ...Option) *Budget {
	if clk == nil {
		clk = clock.Real{}
	}
	b := &Budget{clock: clk, delay: policyconfig.ConsumerCountDelivery}
	for _, o := range opts {
		o(b)
	}
	if _, real := clk.(clock.Real); real {
		b.base = time.Now()
		b.baseNanos = b.base.UnixNano()
	}
	b.reset(c.clone(), clk.Now())
	return b
}

// reset makes b a new budget of c: no tokens, no window, no share until
// offer gives it one. The caller holds mu, or owns b alone.
func (b *Budget) reset(c Config, now time.Time) {
	b.params.Store(paramsOf(c, ZeroShare))
	b.tokens.Store(0)
	b.high.Store(0)
	for i := range b.primaries {
		b.primaries[i].epoch.Store(-1)
		b.retryEpochs[i] = -1
	}
	b.config, b.pending = c, nil
	b.second, b.secondRetries, b.rate = now.Unix(), 0, 0
	b.filled, b.credit, b.creditEpoch, b.olderEpoch = false, 0, -1, -1
	b.offer(now)
}

// fill gives a budget its full bucket and start credit the first time its
// share is non-zero. The caller holds mu, or owns b alone.
func (b *Budget) fill(p *params, now time.Time) {
	if b.filled || p.share == ZeroShare {
		return
	}
	b.filled = true
	b.tokens.Store(p.capacity)
	b.credit, b.creditEpoch = p.credit, b.epoch(p, now)
}

// Update applies new figures or a new consumer count, keeping the tokens
// (clamped to the new capacity). b keeps a copy of c, as New does.
func (b *Budget) Update(c Config) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.config = c.clone()
	b.offer(b.clock.Now())
}

// denominator is Denominator for this pod: zero for a counted budget when
// its payloads arrive too late to share one.
func (b *Budget) denominator(c Config, now time.Time) int64 {
	if b.unshared && c.Counted {
		return ZeroShare
	}
	return Denominator(c, now)
}

// offer puts b.config's share at now in force: at once when it is no larger
// than the share in force, or when no count is involved (a budget over
// partitions alone coordinates with no one); after the delivery bound when
// it grows a counted share, so that the pods whose shares the same count
// shrank have heard of it first. A later count that asks for the same
// share keeps the wait already served; one that asks for another restarts
// it. The caller holds mu, or owns b alone. It returns the share in force.
func (b *Budget) offer(now time.Time) *params {
	cur := b.params.Load()
	d := b.denominator(b.config, now)
	coordinated := cur.config.Counted || b.config.Counted
	switch {
	case d == cur.share && equal(b.config, cur.config):
		b.pending = nil
		return cur
	case !grows(d, cur.share) || !coordinated || b.delay <= 0:
		b.pending = nil
		return b.apply(paramsOf(b.config, d), now)
	case b.pending != nil && b.pending.share == d:
		if !equal(b.pending.config, b.config) {
			b.pending = paramsOf(b.config, d)
		}
	default:
		b.pending, b.pendingAt = paramsOf(b.config, d), now.Add(b.delay)
	}
	if !now.Before(b.pendingAt) {
		p := b.pending
		b.pending = nil
		return b.apply(p, now)
	}
	return cur
}

// apply installs p: a share that shrank clamps the tokens and this
// second's rate credit at once; one that grew adds rate credit only from
// the next second, so no second sees two shares' worth, and mints no
// tokens. The caller holds mu.
func (b *Budget) apply(p *params, now time.Time) *params {
	old := b.params.Swap(p)
	if old.width != p.width {
		// New bucket boundaries: start the window afresh rather than mix
		// widths; the start credit, dated in the old width, goes too.
		for i := range b.primaries {
			b.primaries[i].epoch.Store(-1)
			b.retryEpochs[i] = -1
		}
		b.high.Store(0)
		b.creditEpoch, b.olderEpoch = -1, -1
	}
	b.rate = min(b.rate, p.maxRate)
	b.credit = min(b.credit, p.credit)
	for {
		cur := b.tokens.Load()
		if cur <= p.capacity || b.tokens.CompareAndSwap(cur, p.capacity) {
			break
		}
	}
	b.fill(p, now)
	return p
}

// epoch returns the bucket epoch of now, never below one already seen.
func (b *Budget) epoch(p *params, now time.Time) int64 { return b.epochOf(p, now.UnixNano()) }

// epochOf is epoch for a reading in Unix nanoseconds. A reading within the
// latest bucket (or behind it) is judged by one multiplication; only a
// new bucket pays the division.
func (b *Budget) epochOf(p *params, ns int64) int64 {
	for {
		h := b.high.Load()
		if ns < (h+1)*p.width {
			return h // ns/width <= h
		}
		if e := ns / p.width; b.high.CompareAndSwap(h, e) {
			return e
		}
	}
}

// Primary counts a first attempt toward the ratio's denominator.
func (b *Budget) Primary() {
	if b.baseNanos != 0 {
		// The real clock, read as New's reading plus the monotonic time
		// since: a wall-clock step changes no bucket it picks, and the
		// bucket is never below the latest one seen (see epoch).
		b.primaryAt(b.baseNanos + int64(time.Since(b.base)))
		return
	}
	b.PrimaryAt(b.clock.Now())
}

// PrimaryAt is Primary for a caller that has just read the budget's clock,
// saving a second reading on the hot path.
func (b *Budget) PrimaryAt(now time.Time) { b.primaryAt(now.UnixNano()) }

// PrimaryAtUnixNano is PrimaryAt for a reading in Unix nanoseconds, for a
// caller that keeps its readings as offsets from one time.Time (the
// executor): no time.Time arithmetic on the hot path.
func (b *Budget) PrimaryAtUnixNano(ns int64) { b.primaryAt(ns) }

// primaryAt is PrimaryAt for a reading in Unix nanoseconds.
func (b *Budget) primaryAt(ns int64) {
	p := b.params.Load()
	e := b.epochOf(p, ns)
	bk := &b.primaries[e%int64(len(b.primaries))]
	if old := bk.epoch.Load(); old != e {
		// The slot holds an old bucket: the first to notice resets it. A
		// primary counted by a racing goroutine in between may be lost,
		// which only ever lowers the allowance.
		if bk.epoch.CompareAndSwap(old, e) {
			bk.primaries.Store(0)
		}
	}
	bk.primaries.Add(1)
}

// Success deposits retryPercent/100 of a token, up to capacity. Call it for
// a first attempt that succeeded, and only then: a success that needed
// retries deposits nothing.
func (b *Budget) Success() {
	p := b.params.Load()
	for {
		cur := b.tokens.Load()
		if cur >= p.capacity {
			return
		}
		if b.tokens.CompareAndSwap(cur, min(cur+p.deposit, p.capacity)) {
			return
		}
	}
}

// TryRetry asks for one retry. It is refused while this pod's share of the
// fleet's budget is zero, and when this second's share of
// maxRetriesPerSecond is spent: that cap holds over every other rule,
// the floor included. Otherwise it is granted when the balance is above 0
// and the retry keeps retries within retryPercent% of max(the primaries in
// the window, the start credit while it is in the window); or, while this
// second's retries are below the floor, whatever the balance, and whatever
// the ratio too while the window holds fewer real primaries than the start
// credit (a low-traffic caller).
// A granted retry withdraws a token when the balance is above 0, and counts
// toward the window and the second.
//
// The share is judged on the budget's clock at every call: a count goes
// stale, and a share that waited the delivery bound comes into force, with
// no new payload.
func (b *Budget) TryRetry() Denial {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	p := b.offer(now)
	if sec := now.Unix(); sec > b.second {
		b.rate = min(b.rate+min(sec-b.second, maxCreditSeconds)*p.perSecond, p.maxRate)
		b.second, b.secondRetries = sec, 0
	}
	switch {
	case p.share == ZeroShare && b.unshared && b.config.Counted:
		return SlowDelivery
	case p.share == ZeroShare:
		return NoShare
	case p.limited && b.rate < scale:
		return RateExceeded
	}
	e := b.epoch(p, now)
	n := int64(len(b.primaries))
	if b.olderEpoch != e {
		b.olderEpoch, b.olderPrimaries, b.olderRetries = e, 0, 0
		for i := int64(1); i < n && e-i >= 0; i++ { // a clock near 1970: no older buckets
			ep := e - i
			if i < bucketsPerWindow && b.primaries[ep%n].epoch.Load() == ep {
				b.olderPrimaries += b.primaries[ep%n].primaries.Load() // buckets wholly inside the window
			}
			if b.retryEpochs[ep%n] == ep {
				b.olderRetries += b.retries[ep%n] // and the one the far edge cuts, to err on the safe side
			}
		}
	}
	primaries, retries := b.olderPrimaries, b.olderRetries
	if bk := &b.primaries[e%n]; bk.epoch.Load() == e {
		primaries += bk.primaries.Load()
	}
	if b.retryEpochs[e%n] == e {
		retries += b.retries[e%n]
	}
	// The floor is for a caller whose window holds fewer real primaries
	// than the start credit; past it the ratio rules (INV-RTY-04).
	lowTraffic := primaries < max(p.credit, 1)
	if b.creditEpoch >= 0 && e-b.creditEpoch < bucketsPerWindow {
		primaries = max(primaries, b.credit) // never real traffic plus the credit
	}
	balance := b.tokens.Load()
	denial := Allowed
	switch {
	case (retries+1)*100 > p.percent*primaries:
		denial = RatioExceeded
	case balance <= 0:
		denial = NoTokens
	}
	if denial != Allowed && (b.secondRetries >= p.floor || denial == RatioExceeded && !lowTraffic) {
		return denial
	}
	if balance > 0 {
		b.tokens.Add(-scale)
	}
	if b.retryEpochs[e%n] != e {
		b.retryEpochs[e%n], b.retries[e%n] = e, 0
	}
	b.retries[e%n]++
	b.secondRetries++
	if p.limited {
		b.rate -= scale
	}
	return Allowed
}

// Denominator is the D this budget enforces now: Denominator's answer once
// any growth has waited the delivery bound (ZeroShare while it waits).
func (b *Budget) Denominator() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.offer(b.clock.Now()).share
}

// Tokens returns the balance in tokens, for metrics: at most maxTokens
// (this pod's share), and above -1 (see the package doc).
func (b *Budget) Tokens() float64 { return float64(b.tokens.Load()) / scale }
