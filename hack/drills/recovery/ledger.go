package main

import "time"

// ledger is the carrier's ban ledger: arrivals in any sliding window longer
// than the limit ban the caller. Not safe for concurrent use; Vendor holds
// its lock around add.
type ledger struct {
	limit  int
	window time.Duration
	times  []time.Duration // arrivals inside the window, oldest first, from head
	head   int
	inBan  bool
	// bans holds when each ban episode began: the window first held more
	// than limit arrivals, after it had last been within the limit.
	bans []time.Duration
	// peak is the most arrivals any window held.
	peak int
}

func newLedger(limit int, window time.Duration) *ledger {
	return &ledger{limit: limit, window: window}
}

// add records an arrival at t (since the drill's start, non-decreasing).
func (l *ledger) add(t time.Duration) {
	l.times = append(l.times, t)
	for l.times[l.head] <= t-l.window {
		l.head++
	}
	if l.head > 4096 && l.head > len(l.times)/2 { // reclaim the expired prefix
		l.times = append(l.times[:0], l.times[l.head:]...)
		l.head = 0
	}
	n := len(l.times) - l.head
	l.peak = max(l.peak, n)
	switch {
	case n > l.limit && !l.inBan:
		l.inBan = true
		l.bans = append(l.bans, t)
	case n <= l.limit:
		l.inBan = false
	}
}
