package retry

import (
	"context"
	"errors"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/retryguard/retryguard/runtime/clock"
)

// lifecycleChecker is an EventSink that checks each operation's
// transitions as they arrive.
type lifecycleChecker struct {
	mu       sync.Mutex
	state    map[uint64]State
	terminal map[uint64]int
	illegal  []string
}

func (c *lifecycleChecker) Emit(ev Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	from, seen := c.state[ev.OperationID]
	switch {
	case !seen && ev.To != Submitted:
		c.illegal = append(c.illegal, "started in "+string(ev.To))
	case seen && from == Attempting && ev.From == Attempting && ev.To == Attempting:
		// a hedge: no transition (Event)
	case seen && !canTransition(from, ev.To):
		c.illegal = append(c.illegal, string(from)+" → "+string(ev.To))
	case seen && ev.From != from:
		c.illegal = append(c.illegal, "event says from "+string(ev.From)+", was "+string(from))
	}
	c.state[ev.OperationID] = ev.To
	if ev.To.Terminal() {
		c.terminal[ev.OperationID]++
	}
}

// 5,000 concurrent flows under the race detector: every flow ends in
// exactly one terminal state, no transition is illegal, every flow that did
// not complete is dead-lettered, and no goroutine outlives the test.
func TestConcurrentFlows(t *testing.T) {
	defer goleak.VerifyNone(t)
	p := smsPolicy()
	p.Policy.Backoff.Base, p.Policy.Backoff.Cap = d("1ms"), d("5ms")
	p.Policy.MinRemaining = d("1ms")
	p.Budget.MaxTokens = 1000
	p.Budget.RetryPercent = 50
	checker := &lifecycleChecker{state: map[uint64]State{}, terminal: map[uint64]int{}}
	letters := &memoryLetters{}
	ex := New(staticSource{p.Policy.Name: p}, WithClock(clock.Real{}), WithEventSink(checker), WithDeadLetters(letters))

	const flows = 5000
	failures := []error{Status(503, ""), Status(429, ""), Status(400, ""), readReset(), readTimeout(), dialRefused(), nil, nil, nil}
	var wg sync.WaitGroup
	var mu sync.Mutex
	incomplete := 0
	for i := range flows {
		wg.Go(func() {
			calls := 0
			err := ex.Do(context.Background(), p.Policy.Name, smsVars, func(context.Context, Attempt) error {
				calls++
				return failures[(i+calls)%len(failures)]
			})
			if err != nil {
				if !errors.Is(err, ErrNotCompleted) {
					t.Errorf("flow %d: %v is not an *Error", i, err)
				}
				mu.Lock()
				incomplete++
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	checker.mu.Lock()
	defer checker.mu.Unlock()
	if len(checker.illegal) > 0 {
		t.Fatalf("%d illegal transitions, first: %s", len(checker.illegal), checker.illegal[0])
	}
	if len(checker.state) != flows {
		t.Fatalf("%d operations seen, want %d", len(checker.state), flows)
	}
	for op, n := range checker.terminal {
		if n != 1 {
			t.Fatalf("operation %d reached %d terminal states", op, n)
		}
	}
	for op, s := range checker.state {
		if !s.Terminal() {
			t.Fatalf("operation %d ended in %s", op, s)
		}
	}
	if got := len(letters.all()); got != incomplete || incomplete == 0 {
		t.Fatalf("%d dead letters for %d incomplete flows", got, incomplete)
	}
}
