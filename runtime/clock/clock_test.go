package clock

import (
	"context"
	"errors"
	"testing"
	"time"
)

var t0 = time.Date(2026, 9, 15, 12, 0, 0, 0, time.UTC)

func TestFakeWakesSleepersWhenTimeComes(t *testing.T) {
	f := NewFake(t0)
	done := make(chan error, 1)
	go func() { done <- f.Sleep(context.Background(), time.Second) }()
	for f.Sleepers() == 0 {
		time.Sleep(time.Millisecond) // wait for the goroutine to reach Sleep
	}
	f.Advance(999 * time.Millisecond)
	select {
	case <-done:
		t.Fatal("woke early")
	default:
	}
	f.Advance(time.Millisecond)
	if err := <-done; err != nil || !f.Now().Equal(t0.Add(time.Second)) {
		t.Fatalf("%v at %v", err, f.Now())
	}
}

func TestFakeSleepEndsWithItsContext(t *testing.T) {
	f := NewFake(t0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	f.Advance(-time.Hour)
	if !f.Now().Equal(t0.Add(-time.Hour)) {
		t.Fatal("a fake clock can step back")
	}
}

func TestVirtualSleepMovesTime(t *testing.T) {
	v := NewVirtual(t0)
	_ = v.Sleep(context.Background(), 3*time.Second)
	if !v.Now().Equal(t0.Add(3 * time.Second)) {
		t.Fatal(v.Now())
	}
	if err := (Real{}).Sleep(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
}
