package main

import (
	"testing"
	"time"
)

// The carrier bans a caller whose attempts exceed the contracted rate in any
// 1 s window, not only in windows aligned to whole seconds.
func TestLedgerBansOnAnySlidingWindow(t *testing.T) {
	l := newLedger(10, time.Second)
	// 6 arrivals late in second 0 and 5 early in second 1: no aligned second
	// holds more than 6, but (0.5 s, 1.5 s] holds 11.
	for i := range 6 {
		l.add(500*time.Millisecond + time.Duration(i)*10*time.Millisecond)
	}
	for i := range 5 {
		l.add(time.Second + time.Duration(i)*10*time.Millisecond)
	}
	if len(l.bans) != 1 || l.bans[0] != time.Second+40*time.Millisecond {
		t.Fatalf("bans %v, want one at 1.04s", l.bans)
	}
	if l.peak != 11 {
		t.Fatalf("peak window %d, want 11", l.peak)
	}
}

func TestLedgerCountsEpisodesNotArrivals(t *testing.T) {
	l := newLedger(3, time.Second)
	for i := range 10 { // 10 arrivals in 90 ms: one episode
		l.add(time.Duration(i) * 10 * time.Millisecond)
	}
	l.add(5 * time.Second) // the window has emptied: the episode is over
	for i := range 4 {
		l.add(6*time.Second + time.Duration(i)*time.Millisecond)
	}
	if len(l.bans) != 2 {
		t.Fatalf("bans %v, want two episodes", l.bans)
	}
}

func TestLedgerAtTheLimitIsNoBan(t *testing.T) {
	l := newLedger(1320, time.Second)
	for i := range 3 * 1320 { // exactly the contracted rate, evenly spaced
		l.add(time.Duration(i) * time.Second / 1320)
	}
	if len(l.bans) != 0 || l.peak != 1320 {
		t.Fatalf("bans %v, peak %d; want none at 1,320", l.bans, l.peak)
	}
}
