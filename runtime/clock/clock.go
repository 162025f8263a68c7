// Package clock lets the runtime's time be injected: the real clock in
// production, a Fake in tests that moves only when told to.
package clock

import (
	"context"
	"sync"
	"time"
)

// Clock tells time and sleeps. Implementations are safe for concurrent use.
type Clock interface {
	Now() time.Time
	// Sleep waits for d or until ctx ends, returning ctx.Err() in that case.
	Sleep(ctx context.Context, d time.Duration) error
}

// Real is the wall clock (with its monotonic reading).
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Sleep waits on a timer.
func (Real) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Fake is a manual clock. Sleepers wake when Advance moves time past their
// deadline. It is safe for concurrent use.
type Fake struct {
	mu       sync.Mutex
	now      time.Time
	sleepers []sleeper
}

type sleeper struct {
	until time.Time
	wake  chan struct{}
}

// NewFake starts a fake clock at t.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Sleep blocks until Advance passes now+d, or ctx ends.
func (f *Fake) Sleep(ctx context.Context, d time.Duration) error {
	f.mu.Lock()
	if d <= 0 {
		f.mu.Unlock()
		return ctx.Err()
	}
	s := sleeper{until: f.now.Add(d), wake: make(chan struct{})}
	f.sleepers = append(f.sleepers, s)
	f.mu.Unlock()
	select {
	case <-s.wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Advance moves time forward by d (backward when d < 0, to test code that
// must survive a clock step) and wakes every sleeper whose time has come.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	kept := f.sleepers[:0]
	for _, s := range f.sleepers {
		if !f.now.Before(s.until) {
			close(s.wake)
		} else {
			kept = append(kept, s)
		}
	}
	f.sleepers = kept
}

// Set jumps to t, waking sleepers as Advance does.
func (f *Fake) Set(t time.Time) { f.Advance(t.Sub(f.Now())) }

// Sleepers reports how many goroutines are asleep, so a test can wait for
// its subject to reach a sleep before advancing.
func (f *Fake) Sleepers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sleepers)
}

// Virtual is a clock whose Sleep returns at once, moving time forward by
// the sleep: simulated runs take no wall time. Safe for concurrent use,
// though concurrent sleepers each push the one shared time forward.
type Virtual struct {
	mu  sync.Mutex
	now time.Time
}

// NewVirtual starts a virtual clock at t.
func NewVirtual(t time.Time) *Virtual { return &Virtual{now: t} }

// Now returns the virtual time.
func (v *Virtual) Now() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.now
}

// Sleep advances the virtual time by d.
func (v *Virtual) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	v.Advance(d)
	return nil
}

// Advance moves the virtual time by d.
func (v *Virtual) Advance(d time.Duration) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.now = v.now.Add(d)
}
