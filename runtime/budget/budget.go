// Package budget is the in-pod retry budget: a token bucket refilled by
// successes, plus a hard cap on retries as a share of primary attempts over a
// rolling window. One Budget serves every policy that names the same
// RetryBudget.
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
	// NoTokens: the bucket is empty.
	NoTokens Denial = "tokens"
	// RatioExceeded: retries would pass retryPercent% of primaries in the window.
	RatioExceeded Denial = "ratio"
)

type params struct {
	deposit  int64 // milli-tokens per success
	capacity int64 // milli-tokens
	percent  int64
	width    int64 // bucket width, ns
	floor    int64 // retries per second allowed whatever the ratio
}

func paramsOf(c Config) *params {
	parts := int64(max(c.Partitions, 1))
	ceilDiv := func(a int64) int64 { return (a + parts - 1) / parts }
	window := max(c.Window, time.Second)
	return &params{
		deposit:  int64(c.RetryPercent) * scale / 100,
		capacity: ceilDiv(int64(max(c.MaxTokens, 1))) * scale,
		percent:  int64(c.RetryPercent),
		width:    int64(window) / bucketsPerWindow,
		floor:    ceilDiv(int64(max(c.MinRetriesPerSecond, 0))),
	}
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

	mu            sync.Mutex
	retries       [bucketsPerWindow + 1]int64
	retryEpochs   [bucketsPerWindow + 1]int64
	floorSecond   int64
	floorUsed     int64
	highestSecond int64
}

// New returns a full budget.
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

// Success deposits retryPercent/100 of a token, up to capacity.
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

// TryRetry asks for one retry. It is granted when the bucket holds a token
// and the retry keeps retries within retryPercent% of the primaries in the
// window; or, whatever the ratio and tokens, while this second's retries are
// below the floor. A granted retry withdraws a token (when one is there) and
// counts toward the window.
func (b *Budget) TryRetry() Denial {
	p := b.params.Load()
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.epoch(p, b.clock.Now())
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
	denial := Allowed
	switch {
	case (retries+1)*100 > p.percent*primaries:
		denial = RatioExceeded
	case b.tokens.Load() < scale:
		denial = NoTokens
	}
	if denial != Allowed && !b.floorAllows(p) {
		return denial
	}
	if denial == Allowed {
		b.tokens.Add(-scale)
	}
	if b.retryEpochs[e%n] != e {
		b.retryEpochs[e%n], b.retries[e%n] = e, 0
	}
	b.retries[e%n]++
	return Allowed
}

// floorAllows spends one of this second's floor retries, if any are left.
// Seconds only move forward, so a backward clock cannot refill the floor.
func (b *Budget) floorAllows(p *params) bool {
	if p.floor == 0 {
		return false
	}
	sec := b.clock.Now().Unix()
	if sec < b.highestSecond {
		sec = b.highestSecond
	}
	b.highestSecond = sec
	if sec != b.floorSecond {
		b.floorSecond, b.floorUsed = sec, 0
	}
	if b.floorUsed >= p.floor {
		return false
	}
	b.floorUsed++
	return true
}

// Tokens returns the whole tokens in the bucket, for metrics.
func (b *Budget) Tokens() float64 { return float64(b.tokens.Load()) / scale }
