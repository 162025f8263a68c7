package manager_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/retryguard/retryguard/internal/manager"
	"github.com/retryguard/retryguard/internal/options"
	"github.com/retryguard/retryguard/webhooks"
)

// DrainThenStop's goroutine ends on every
// path: Start returning before any signal, and Start returning during the
// drain (mgr.Start failed, or a test cancelled); the drain never starts
// without a signal.
func TestDrainThenStopLeaksNoGoroutine(t *testing.T) {
	base := runtime.NumGoroutine()
	for range 50 {
		var d webhooks.Draining
		_, cancel := manager.DrainThenStop(context.Background(), &d, options.Manager{EnableWebhooks: true, ShutdownDrain: time.Hour})
		cancel() // Start returned early (an error before the manager started)
		if d.On() {
			t.Fatal("drained without a signal")
		}
		sig, term := context.WithCancel(context.Background())
		stop, cancel := manager.DrainThenStop(sig, &d, options.Manager{EnableWebhooks: true, ShutdownDrain: time.Hour})
		term()
		waitUntil(t, d.On)
		cancel() // Start returned during the drain
		<-stop.Done()
	}
	waitUntil(t, func() bool { return runtime.NumGoroutine() <= base+2 })
}

// SIGTERM (the end of ctx) turns the drain on at once and stops the
// manager only when the drain has run its course; without webhooks there
// is nothing to drain.
func TestTheManagerDrainsBeforeItStops(t *testing.T) {
	signal, terminate := context.WithCancel(context.Background())
	var d webhooks.Draining
	stop, cancel := manager.DrainThenStop(signal, &d, options.Manager{EnableWebhooks: true, ShutdownDrain: time.Hour})
	defer cancel()
	if d.On() || stop.Err() != nil {
		t.Fatal("draining or stopped before the signal")
	}
	terminate()
	waitUntil(t, d.On)
	if stop.Err() != nil {
		t.Fatal("the manager stopped as the drain began; it must serve for the drain first")
	}

	signal, terminate = context.WithCancel(context.Background())
	stop, cancel = manager.DrainThenStop(signal, &webhooks.Draining{}, options.Manager{EnableWebhooks: true, ShutdownDrain: time.Millisecond})
	defer cancel()
	terminate()
	<-stop.Done() // the drain ended

	signal, terminate = context.WithCancel(context.Background())
	var none webhooks.Draining
	stop, cancel = manager.DrainThenStop(signal, &none, options.Manager{EnableWebhooks: false, ShutdownDrain: time.Hour})
	defer cancel()
	terminate()
	<-stop.Done()
	if none.On() {
		t.Error("a manager without webhooks drained")
	}
}
