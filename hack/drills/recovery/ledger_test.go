package main

import (
	"testing"
	"time"
)

// The carrier bans a caller whose attempts exceed the contracted rate in any
// 1 s window, not only in windows aligned to whole seconds.
func TestLedgerBansOnAnySlidingWindow(t *testing.T) {
	l := newLedger(10, time.Second, 10)
	// 6 arrivals late in second 0 and 5 early in second 1: no aligned second
	// holds more than 6, but (0.5 s, 1.5 s] holds 11.
	for i := range 6 {
		l.add(500*time.Millisecond+time.Duration(i)*10*time.Millisecond, false)
	}
	for i := range 5 {
		l.add(time.Second+time.Duration(i)*10*time.Millisecond, false)
	}
	if len(l.bans) != 1 || l.bans[0] != time.Second+40*time.Millisecond {
		t.Fatalf("bans %v, want one at 1.04s", l.bans)
	}
	if l.peak != 11 {
		t.Fatalf("peak window %d, want 11", l.peak)
	}
}

func TestLedgerCountsEpisodesNotArrivals(t *testing.T) {
	l := newLedger(3, time.Second, 3)
	for i := range 10 { // 10 arrivals in 90 ms: one episode
		l.add(time.Duration(i)*10*time.Millisecond, false)
	}
	l.add(5*time.Second, false) // the window has emptied: the episode is over
	for i := range 4 {
		l.add(6*time.Second+time.Duration(i)*time.Millisecond, false)
	}
	if len(l.bans) != 2 {
		t.Fatalf("bans %v, want two episodes", l.bans)
	}
}

func TestLedgerAtTheLimitIsNoBan(t *testing.T) {
	l := newLedger(1320, time.Second, 1320)
	for i := range 3 * 1320 { // exactly the contracted rate, evenly spaced
		l.add(time.Duration(i)*time.Second/1320, false)
	}
	if len(l.bans) != 0 || l.peak != 1320 {
		t.Fatalf("bans %v, peak %d; want none at 1,320", l.bans, l.peak)
	}
}

// A burst of primaries (the load generator catching up after a stall) can
// fill a window with no retry at all: the carrier bans, but the retry
// policy did not cause it. A window that is over the limit while its retries
// alone exceed their 10% share is the policy's doing.
func TestLedgerTellsRetryBansFromPrimaryBursts(t *testing.T) {
	l := newLedger(11, time.Second, 1) // 10 primaries a second, 1 retry of headroom
	for i := range 12 {
		l.add(time.Duration(i)*time.Millisecond, false)
	}
	if len(l.bans) != 1 || len(l.retryBans) != 0 {
		t.Fatalf("a burst of primaries: bans %v, retry bans %v", l.bans, l.retryBans)
	}
	for i := range 10 {
		l.add(5*time.Second+time.Duration(i)*time.Millisecond, false)
	}
	l.add(5*time.Second+20*time.Millisecond, true)
	if len(l.retryBans) != 0 {
		t.Fatalf("one retry within its share: retry bans %v", l.retryBans)
	}
	l.add(5*time.Second+30*time.Millisecond, true)
	if len(l.retryBans) != 1 || l.retryBans[0] != 5*time.Second+30*time.Millisecond || l.peakRetries != 2 {
		t.Fatalf("two retries over a share of one: retry bans %v, peak retries %d", l.retryBans, l.peakRetries)
	}
}
