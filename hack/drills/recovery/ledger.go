package main

import "time"

// ledger is the carrier's ban ledger: more arrivals than the limit in any
// sliding window ban the caller. It also tells which bans the retries
// caused: those during which the window's retries alone exceeded their
// share (the limit less the contracted primary rate), as opposed to a burst
// of primaries, which a retry policy does not control. Not safe for
// concurrent use; vendor holds its lock around add.
type ledger struct {
	limit, retryShare int
	window            time.Duration
	all, retries      window
	inBan, inRetryBan bool
	// bans holds when each ban episode began: the window first held more
	// than limit arrivals, after it had last been within the limit.
	bans []time.Duration
	// retryBans holds when each ban episode the retries caused began.
	retryBans []time.Duration
	// peak is the most arrivals any window held; peakRetries the most retries.
	peak, peakRetries int
}

func newLedger(limit int, width time.Duration, retryShare int) *ledger {
	return &ledger{limit: limit, retryShare: retryShare, window: width}
}

// add records an arrival at t (since the drill's start, non-decreasing).
func (l *ledger) add(t time.Duration, retry bool) {
	n := l.all.add(t, l.window)
	r := l.retries.count(t, l.window)
	if retry {
		r = l.retries.add(t, l.window)
	}
	l.peak = max(l.peak, n)
	l.peakRetries = max(l.peakRetries, r)
	episode(&l.inBan, &l.bans, n > l.limit, t)
	episode(&l.inRetryBan, &l.retryBans, n > l.limit && r > l.retryShare, t)
}

// episode records t in starts when over begins.
func episode(in *bool, starts *[]time.Duration, over bool, t time.Duration) {
	if over && !*in {
		*starts = append(*starts, t)
	}
	*in = over
}

// window holds the arrivals of the last width, oldest first, from head.
type window struct {
	times []time.Duration
	head  int
}

// add appends t and returns how many arrivals lie in (t-width, t].
func (w *window) add(t, width time.Duration) int {
	w.times = append(w.times, t)
	return w.count(t, width)
}

// count drops arrivals at or before t-width and returns how many remain.
func (w *window) count(t, width time.Duration) int {
	for w.head < len(w.times) && w.times[w.head] <= t-width {
		w.head++
	}
	if w.head > 4096 && w.head > len(w.times)/2 { // reclaim the expired prefix
		w.times = append(w.times[:0], w.times[w.head:]...)
		w.head = 0
	}
	return len(w.times) - w.head
}
