// Package budget is the in-pod retry budget: a token bucket refilled by
// primary successes, plus a hard cap on retries as a share of primary
// attempts over a rolling window. One Budget serves every policy that names
// the same RetryBudget.
//
// The arithmetic is RETRY-SMS-001's (MC-PO-01): a first attempt that
// succeeds deposits retryPercent/100 of a token (0.1 at 10%); a success that
// needed retries deposits nothing. A retry withdraws 1.0 token, and retries
// are blocked when the balance is <= 0. So a balance of 0.1 still buys a
// retry (leaving -0.9), and a balance of exactly 0 does not: the seed's rule,
// chosen over "needs a whole token", which would deny a retry the seed
// allows. The balance therefore never falls to -1 or below, and over time
// the bucket still grants one retry per 100/retryPercent primary successes.
//
// The ratio cap (retries within retryPercent% of the primaries in the
// window) would deny every retry of a process that has seen no traffic yet.
// A new Budget therefore counts Credit primaries at its creation: exactly
// enough for its full bucket of retries, and like real primaries they leave
// the window once it has passed. A cold pod can retry its first failures,
// at most maxTokens of them, as gRPC's retry throttling and the AWS SDK's
// standard mode allow with their full initial buckets.
//
// minRetriesPerSecond is a floor, not an addition: while the retries this
// second (granted by any rule) are below it, a retry is granted whatever the
// ratio and the tokens. Floor retries are accounted like any other: they
// count in the window and withdraw a token while the balance is above 0.
package budget

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryguard/retryguard/runtime/clock"
)

// scale makes tokens fixed-point: 1 token is 1000 milli-tokens, so a 10%
// budget deposits exactly 100 per success and ten successes buy one retry.
const scale = 1000

// bucketsPerWindow divides the rolling window; the ring has one more, for
// the bucket the window's far edge falls in.
const bucketsPerWindow = 10

// Config is a budget's figures, as a payload carries them.
type Config struct {
	RetryPercent        int32
	Window              time.Duration
	MaxTokens           int32
	MinRetriesPerSecond int32
	Partitions          int32
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
)

type params struct {
	deposit  int64 // milli-tokens per primary success
	capacity int64 // milli-tokens
	percent  int64
	width    int64 // bucket width, ns
	floor    int64 // retries per second allowed whatever the ratio
	credit   int64 // primaries a new budget counts at its creation
}

func paramsOf(c Config) *params {
	parts := int64(max(c.Partitions, 1))
	ceilDiv := func(a int64) int64 { return (a + parts - 1) / parts }
	window := max(c.Window, time.Second)
	tokens := ceilDiv(int64(max(c.MaxTokens, 1)))
	percent := int64(max(c.RetryPercent, 1))
	return &params{
		deposit:  int64(c.RetryPercent) * scale / 100,
		capacity: tokens * scale,
		percent:  int64(c.RetryPercent),
		width:    int64(window) / bucketsPerWindow,
		floor:    ceilDiv(int64(max(c.MinRetriesPerSecond, 0))),
		credit:   (tokens*100 + percent - 1) / percent,
	}
}

// Credit is the number of primaries a new budget counts at its creation, so
// that the ratio allows its full bucket (this pod's share of maxTokens) of
// retries: ceil(tokens·100/retryPercent).
func Credit(c Config) int64 { return paramsOf(c).credit }

// PodShare is one pod's share of the budget's absolute figures, as the
// budget enforces them: maxTokens and minRetriesPerSecond divided over the
// partitions, rounded up. The ratio needs no split.
func PodShare(c Config) (tokens, minRetriesPerSecond int64) {
	p := paramsOf(c)
	return p.capacity / scale, p.floor
}

type bucket struct {
	epoch     atomic.Int64
	primaries atomic.Int64
}

// Budget is safe for concurrent use. Primary and Success, the success path,
// use atomics only; TryRetry takes a mutex, and only failures reach it.
type Budget struct {
	clock  clock.Clock
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
}

// New returns a full budget that counts Credit(c) primaries now.
func New(c Config, clk clock.Clock) *Budget {
	if clk == nil {
		clk = clock.Real{}
	}
	b := &Budget{clock: clk}
	p := paramsOf(c)
	b.params.Store(p)
	b.tokens.Store(p.capacity)
	for i := range b.primaries {
		b.primaries[i].epoch.Store(-1)
		b.retryEpochs[i] = -1
	}
	now := clk.Now()
	b.second = now.Unix()
	bk := &b.primaries[b.epoch(p, now)%int64(len(b.primaries))]
	bk.epoch.Store(b.high.Load())
	bk.primaries.Store(p.credit)
	return b
}

// Update applies new figures, keeping the tokens (clamped to the new capacity).
func (b *Budget) Update(c Config) {
	p := paramsOf(c)
	old := b.params.Swap(p)
	if old.width != p.width {
		// New bucket boundaries: start the window afresh rather than mix widths.
		b.mu.Lock()
		for i := range b.primaries {
			b.primaries[i].epoch.Store(-1)
			b.retryEpochs[i] = -1
		}
		b.high.Store(0)
		b.mu.Unlock()
	}
	for {
		cur := b.tokens.Load()
		if cur <= p.capacity || b.tokens.CompareAndSwap(cur, p.capacity) {
			return
		}
	}
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

// TryRetry asks for one retry. It is granted when the balance is above 0
// and the retry keeps retries within retryPercent% of the primaries in the
// window; or, whatever the ratio and the balance, while this second's
// retries are below the floor. A granted retry withdraws a token when the
// balance is above 0, and counts toward the window and the second.
func (b *Budget) TryRetry() Denial {
	p := b.params.Load()
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	e := b.epoch(p, now)
	n := int64(len(b.primaries))
	var primaries, retries int64
	for i := range n {
		ep := e - i
		if i < bucketsPerWindow && b.primaries[ep%n].epoch.Load() == ep {
			primaries += b.primaries[ep%n].primaries.Load() // buckets wholly inside the window
		}
		if b.retryEpochs[ep%n] == ep {
			retries += b.retries[ep%n] // and the one the far edge cuts, to err on the safe side
		}
	}
	if sec := now.Unix(); sec > b.second {
		b.second, b.secondRetries = sec, 0
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
	return Allowed
}

// Tokens returns the balance in tokens, for metrics: at most maxTokens
// (this pod's share), and above -1 (see the package doc).
func (b *Budget) Tokens() float64 { return float64(b.tokens.Load()) / scale }
