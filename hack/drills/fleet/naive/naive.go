// Package naive is the fleet drill's retries without Retryguard: three
// layers (workflow, job, connector) of three attempts each, every one
// retrying any failure after a fixed delay, without jitter and without a
// budget: INC-2901's shape, 27 attempts at the bottom for one operation.
package naive

import (
	"context"
	"time"
)

// Layer is one layer's attempts and the fixed delay before its next one.
type Layer struct {
	Name     string
	Attempts int
	Delay    time.Duration
}

// Layers are the chain from the innermost (the connector) out.
var Layers = []Layer{
	{Name: "connector", Attempts: 3, Delay: 100 * time.Millisecond},
	{Name: "job", Attempts: 3, Delay: 500 * time.Millisecond},
	{Name: "workflow", Attempts: 3, Delay: time.Second},
}

// MaxAttempts is the product of the layers' attempts.
func MaxAttempts() int {
	n := 1
	for _, l := range Layers {
		n *= l.Attempts
	}
	return n
}

// DelayAfter is the wait after attempt n (0-based) failed, and false when
// no layer has an attempt left: the innermost layer with one left retries,
// after its delay.
func DelayAfter(n int) (time.Duration, bool) {
	for _, l := range Layers {
		if n%l.Attempts < l.Attempts-1 {
			return l.Delay, true
		}
		n /= l.Attempts
	}
	return 0, false
}

// Do runs attempt until it succeeds, no layer has an attempt left, or ctx
// ends; it returns how many attempts it made and whether the last one
// succeeded.
func Do(ctx context.Context, attempt func(context.Context) bool) (int, bool) {
	for n := 0; ; n++ {
		if attempt(ctx) {
			return n + 1, true
		}
		d, ok := DelayAfter(n)
		if !ok {
			return n + 1, false
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return n + 1, false
		case <-t.C:
		}
	}
}
