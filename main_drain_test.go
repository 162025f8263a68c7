package main

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/retryguard/retryguard/internal/options"
	"github.com/retryguard/retryguard/webhooks"
)

// drainThenStop's goroutine ends on every
// path: run returning before any signal, and run returning during the
// drain (mgr.Start failed, or a test cancelled); the drain never starts
// without a signal.
func TestDrainThenStopLeaksNoGoroutine(t *testing.T) {
	base := runtime.NumGoroutine()
	for range 50 {
		var d webhooks.Draining
		_, cancel := drainThenStop(context.Background(), &d, options.Manager{EnableWebhooks: true, ShutdownDrain: time.Hour})
		cancel() // run returned early (an error before the manager started)
		if d.On() {
			t.Fatal("drained without a signal")
		}
		sig, term := context.WithCancel(context.Background())
		stop, cancel := drainThenStop(sig, &d, options.Manager{EnableWebhooks: true, ShutdownDrain: time.Hour})
		term()
		waitUntil(t, d.On)
		cancel() // run returned during the drain
		<-stop.Done()
	}
	waitUntil(t, func() bool { return runtime.NumGoroutine() <= base+2 })
}
