// Package legacy is the retry budget as it stood before the rules of
// docs/runtime.md "Fleet budgets" replaced it, frozen: runtime/budget's fleet
// simulation runs it beside the budget that replaced it, in the same run,
// so that each scenario shows what the new rule prevents. Nothing else may
// import it. It differs from that code only in its package name and this
// comment; every rule below is the old one (the credit counted on top of
// real primaries, shares rounded up, the count's timestamp as inclusion,
// growth applied at once, budgets known by name alone).
package legacy

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryguard/retryguard/runtime/clock"
	"github.com/retryguard/retryguard/runtime/policyconfig"
)

// scale makes tokens fixed-point: 1 token is 1000 milli-tokens, so a 10%
// budget deposits exactly 100 per success and ten successes buy one retry.
const scale = 1000

// bucketsPerWindow divides the rolling window; the ring has one more, for
// the bucket the window's far edge falls in.
const bucketsPerWindow = 10

// Config is a budget's figures, as a payload carries them, with the
// controller's count of the pods that share them.
type Config struct {
	RetryPercent        int32
	Window              time.Duration
	MaxTokens           int32
	MinRetriesPerSecond int32
	Partitions          int32
	// MaxRetriesPerSecond is the fleet's absolute retry allowance per
	// second, enforced only when LimitRetriesPerSecond is set (then 0
	// allows no retry at all).
	MaxRetriesPerSecond   int32
	LimitRetriesPerSecond bool
	// Consumers is the published count of the pods that share the budget;
	// its zero value (a budget that selects no consumers) divides the
	// absolute figures over Partitions.
	Consumers Consumers
}

// Consumers is a published count of the pods that share a budget.
type Consumers struct {
	// Counted says the budget selects its consumers and the payload
	// carries their count.
	Counted bool
	// N is the number of pod objects the controller counted at ObservedAt.
	N int32
	// ObservedAt is when the controller counted, on its wall clock.
	ObservedAt time.Time
}

// figures is c without the consumer count: what a budget's generation
// decides. The count changes between generations, as pods come and go.
func (c Config) figures() Config {
	c.Consumers = Consumers{}
	return c
}

// ZeroShare is the Denominator of a pod whose share is zero.
const ZeroShare = 0

// Denominator returns D, the number of pods the budget's absolute figures
// (maxRetriesPerSecond, maxTokens, minRetriesPerSecond) are divided over,
// for a process that started at start, judged at now on its clock:
//   - no count (the budget selects no consumers): Partitions;
//   - a fresh count (at most policyconfig.ConsumerCountStaleAfter old) that
//     covers the process (taken at least ConsumerCountClockSkew after it
//     started): N;
//   - a fresh count of zero, which cannot be right while this process
//     draws on the budget (the selector misses it): Partitions;
//   - a fresh count that does not cover it: ZeroShare, since the N pods it
//     counted may together be using the whole allowance; this ends when a
//     covering count arrives or the count goes stale;
//   - a stale count (the controller is down or cut off): max(Partitions, N).
//
// A count dated more than the skew in the future is no evidence of a
// recent count either; it is treated as stale. D never grows a share past
// the stale one except on a fresh count that includes this process.
func Denominator(c Config, start, now time.Time) int64 {
	parts := int64(max(c.Partitions, 1))
	if !c.Consumers.Counted {
		return parts
	}
	n := int64(c.Consumers.N)
	age := now.Sub(c.Consumers.ObservedAt)
	switch {
	case age > policyconfig.ConsumerCountStaleAfter || age < -policyconfig.ConsumerCountClockSkew:
		return max(parts, n)
	case n < 1:
		// A pod is drawing on the budget, yet the count found none: the
		// selector misses this pod (or the count is not yet the pods').
		// That count is no evidence of how many share it.
		return parts
	case c.Consumers.ObservedAt.Before(start.Add(policyconfig.ConsumerCountClockSkew)):
		return ZeroShare
	}
	return n
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
	// NoShare: this pod's share of the fleet's budget is zero, because the
	// consumer count it holds was taken before it started (see Denominator).
	NoShare Denial = "share"
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
	credit    int64 // primaries a new budget counts at its creation
	limited   bool  // maxRetriesPerSecond is set
	perSecond int64 // milli-retries of rate credit each new second adds: whole retries
	maxRate   int64 // the rate credit's cap: one second's worth, never saved up
}

// paramsOf divides c's absolute figures over d pods. The two that grant
// retries whatever the ratio, the per-second allowance and the floor, are
// rounded down to whole retries, so that d pods never grant more than the
// fleet's figure in one second: a pod whose share is below one retry a
// second retries under neither. maxTokens is rounded up: tokens only ever
// grant within the ratio, which needs no split.
func paramsOf(c Config, d int64) *params {
	window := max(c.Window, time.Second)
	percent := int64(max(c.RetryPercent, 1))
	p := &params{config: c, share: d, deposit: int64(c.RetryPercent) * scale / 100, percent: int64(c.RetryPercent),
		width: int64(window) / bucketsPerWindow, limited: c.LimitRetriesPerSecond}
	if d <= ZeroShare {
		p.share = ZeroShare
		return p
	}
	ceilDiv := func(a int64) int64 { return (a + d - 1) / d }
	tokens := ceilDiv(int64(max(c.MaxTokens, 1)))
	p.capacity = tokens * scale
	p.floor = int64(max(c.MinRetriesPerSecond, 0)) / d
	p.credit = (tokens*100 + percent - 1) / percent
	if p.limited {
		p.perSecond = int64(max(c.MaxRetriesPerSecond, 0)) / d * scale
		p.maxRate = p.perSecond
	}
	return p
}

// partitioned is c's figures divided as a budget without a consumer count
// divides them: over Partitions.
func partitioned(c Config) *params { return paramsOf(c, int64(max(c.Partitions, 1))) }

// Credit is the number of primaries a new budget counts at its creation, so
// that the ratio allows its full bucket (this pod's share of maxTokens) of
// retries: ceil(tokens·100/retryPercent).
func Credit(c Config) int64 { return partitioned(c).credit }

// PodShare is one pod's share of the budget's absolute figures, as the
// budget enforces them without a consumer count: maxTokens divided over
// the partitions and rounded up, minRetriesPerSecond rounded down. The
// ratio needs no split.
func PodShare(c Config) (tokens, minRetriesPerSecond int64) {
	p := partitioned(c)
	return p.capacity / scale, p.floor
}

// Share is one pod's share of a budget's absolute figures.
type Share struct {
	// Tokens is maxTokens over D, rounded up; MinRetriesPerSecond is
	// minRetriesPerSecond over D, rounded down.
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
	// start is when this process started, on clock: a consumer count
	// covers the process only when taken after it (see Denominator).
	start  time.Time
	params atomic.Pointer[params]
	tokens atomic.Int64 // milli-tokens
	// high is the latest bucket epoch seen: a clock that steps backwards is
	// held at it, so it can never reopen old buckets or mint allowances.
	high      atomic.Int64
	primaries [bucketsPerWindow + 1]bucket

	mu          sync.Mutex
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
	// full bucket and start credit. A budget created with a zero share gets
	// them when its share first becomes non-zero.
	filled bool
}

// Option configures a Budget.
type Option func(*Budget)

// StartedAt sets when this process started, on the budget's clock (its
// creation unless set). A consumer count taken earlier, give or take the
// allowed clock skew, may not include this process.
func StartedAt(t time.Time) Option { return func(b *Budget) { b.start = t } }

// New returns a budget that counts Credit primaries now and holds its full
// bucket, unless its share is zero (see Denominator). Its first second
// grants no retry under maxRetriesPerSecond: rate credit comes with each
// new second, as it does for every pod at the same instant.
func New(c Config, clk clock.Clock, opts ...Option) *Budget {
	if clk == nil {
		clk = clock.Real{}
	}
	now := clk.Now()
	b := &Budget{clock: clk, start: now}
	for _, o := range opts {
		o(b)
	}
	p := paramsOf(c, Denominator(c, b.start, now))
	b.params.Store(p)
	for i := range b.primaries {
		b.primaries[i].epoch.Store(-1)
		b.retryEpochs[i] = -1
	}
	b.second = now.Unix()
	b.fill(p, now)
	return b
}

// fill gives a budget its full bucket and start credit the first time its
// share is non-zero. The caller holds mu, or owns b alone.
func (b *Budget) fill(p *params, now time.Time) {
	if b.filled || p.share == ZeroShare {
		return
	}
	b.filled = true
	b.tokens.Store(p.capacity)
	e := b.epoch(p, now)
	bk := &b.primaries[e%int64(len(b.primaries))]
	if old := bk.epoch.Load(); old != e {
		if bk.epoch.CompareAndSwap(old, e) {
			bk.primaries.Store(0)
		}
	}
	bk.primaries.Add(p.credit)
}

// Update applies new figures or a new consumer count, keeping the tokens
// (clamped to the new capacity).
func (b *Budget) Update(c Config) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	b.apply(paramsOf(c, Denominator(c, b.start, now)), now)
}

// apply installs p: a share that shrank clamps the tokens and this
// second's rate credit at once; one that grew adds rate credit only from
// the next second, so no second sees two shares' worth. The caller holds mu.
func (b *Budget) apply(p *params, now time.Time) *params {
	old := b.params.Swap(p)
	if old.width != p.width {
		// New bucket boundaries: start the window afresh rather than mix widths.
		for i := range b.primaries {
			b.primaries[i].epoch.Store(-1)
			b.retryEpochs[i] = -1
		}
		b.high.Store(0)
	}
	b.rate = min(b.rate, p.maxRate)
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
func (b *Budget) epoch(p *params, now time.Time) int64 {
	e := now.UnixNano() / p.width
	for {
		h := b.high.Load()
		if e <= h {
			return h
		}
		if b.high.CompareAndSwap(h, e) {
			return e
		}
	}
}

// Primary counts a first attempt toward the ratio's denominator.
func (b *Budget) Primary() { b.PrimaryAt(b.clock.Now()) }

// PrimaryAt is Primary for a caller that has just read the budget's clock,
// saving a second reading on the hot path.
func (b *Budget) PrimaryAt(now time.Time) {
	p := b.params.Load()
	e := b.epoch(p, now)
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
// and the retry keeps retries within retryPercent% of the primaries in the
// window; or, whatever the ratio and the balance, while this second's
// retries are below the floor. A granted retry withdraws a token when the
// balance is above 0, and counts toward the window and the second.
//
// The share is judged on the budget's clock at every call: a count goes
// stale, and a zero share ends, with no new payload.
func (b *Budget) TryRetry() Denial {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	p := b.params.Load()
	if d := Denominator(p.config, b.start, now); d != p.share {
		p = b.apply(paramsOf(p.config, d), now)
	}
	if sec := now.Unix(); sec > b.second {
		b.rate = min(b.rate+min(sec-b.second, maxCreditSeconds)*p.perSecond, p.maxRate)
		b.second, b.secondRetries = sec, 0
	}
	switch {
	case p.share == ZeroShare:
		return NoShare
	case p.limited && b.rate < scale:
		return RateExceeded
	}
	e := b.epoch(p, now)
	n := int64(len(b.primaries))
	var primaries, retries int64
	for i := range n {
		ep := e - i
		if ep < 0 {
			break // a clock near 1970: no older buckets
		}
		if i < bucketsPerWindow && b.primaries[ep%n].epoch.Load() == ep {
			primaries += b.primaries[ep%n].primaries.Load() // buckets wholly inside the window
		}
		if b.retryEpochs[ep%n] == ep {
			retries += b.retries[ep%n] // and the one the far edge cuts, to err on the safe side
		}
	}
	balance := b.tokens.Load()
	denial := Allowed
	switch {
	case (retries+1)*100 > p.percent*primaries:
		denial = RatioExceeded
	case balance <= 0:
		denial = NoTokens
	}
	if denial != Allowed && b.secondRetries >= p.floor {
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

// Tokens returns the balance in tokens, for metrics: at most maxTokens
// (this pod's share), and above -1 (see the package doc).
func (b *Budget) Tokens() float64 { return float64(b.tokens.Load()) / scale }
