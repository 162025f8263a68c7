package retry

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/retryguard/retryguard/runtime/clock"
)

// The seed's recovery drill (MC-RT-01), simulated: 1,200 requests/s; for the
// first 45 s the vendor answers 429 to 60% of attempts, then errs on 1 in
// 2,000 (well under 1%). Every attempt takes 100 ms. The bubble's virtual
// clock runs the real Executor, budget and backoff, one goroutine per
// operation, in no wall time.
const (
	stormRate     = 1200
	stormFault    = 45 * time.Second
	stormRecovery = 5 * time.Second
	stormLatency  = 100 * time.Millisecond
)

// vendor answers an attempt: deterministic per (operation, attempt), so
// every strategy meets the same faults.
func vendor(since time.Duration, op, attempt int) error {
	if since < stormFault {
		if splitmix(uint64(op)*31+uint64(attempt))%100 < 60 {
			return Status(429, "")
		}
		return nil
	}
	if attempt == 1 && op%2000 == 0 {
		return Status(503, "")
	}
	return nil
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// traffic counts attempts and retries per virtual second.
type traffic struct {
	mu        sync.Mutex
	start     time.Time
	attempts  map[int]int
	retries   map[int]int
	primaries int
	total     int
	faultAll  int
	faultPrim int
}

func (tr *traffic) record(attempt int) time.Duration {
	since := time.Since(tr.start)
	sec := int(since / time.Second)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.attempts[sec]++
	tr.total++
	if attempt == 1 {
		tr.primaries++
	} else {
		tr.retries[sec]++
	}
	if since < stormFault {
		tr.faultAll++
		if attempt == 1 {
			tr.faultPrim++
		}
	}
	return since
}

type strategy func(ctx context.Context, op int, call func(attempt int) error) error

// storm drives 1,200 operations a second through run for the whole drill.
func storm(run strategy) *traffic {
	tr := &traffic{start: time.Now(), attempts: map[int]int{}, retries: map[int]int{}}
	var wg sync.WaitGroup
	total := int((stormFault + stormRecovery).Seconds() * stormRate)
	for op := range total {
		wg.Go(func() {
			_ = run(context.Background(), op, func(attempt int) error {
				since := tr.record(attempt)
				time.Sleep(stormLatency)
				return vendor(since, op, attempt)
			})
		})
		time.Sleep(time.Second / stormRate)
	}
	wg.Wait()
	return tr
}

// Option A, the developers' proposal: 5 attempts, a constant 500 ms sleep, no budget.
func optionA(ctx context.Context, _ int, call func(int) error) error {
	var err error
	for attempt := 1; attempt <= 5; attempt++ {
		if err = call(attempt); err == nil {
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	return err
}

// Option B: exponential backoff without jitter, 3 attempts, no budget.
func optionB(ctx context.Context, _ int, call func(int) error) error {
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		if err = call(attempt); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond << attempt)
	}
	return err
}

func TestStormRecoveryDrill(t *testing.T) {
	if testing.Short() {
		t.Skip("the drill simulates 150,000 operations")
	}
	type result struct {
		name          string
		tr            *traffic
		peak          int
		amplification float64
	}
	var results []result
	var optionC *traffic
	letters := &memoryLetters{}
	var incomplete int
	synctest.Test(t, func(t *testing.T) {
		p := smsPolicy()
		ex := New(staticSource{p.Policy.Name: p}, WithClock(clock.Real{}), WithDeadLetters(letters))
		var mu sync.Mutex
		optionC = storm(func(ctx context.Context, op int, call func(int) error) error {
			err := ex.Do(ctx, p.Policy.Name, Vars{"user_id": fmt.Sprint(op), "login_session_id": "s"},
				func(_ context.Context, a Attempt) error { return call(a.Number) })
			if err != nil {
				mu.Lock()
				incomplete++
				mu.Unlock()
			}
			return err
		})
		results = append(results, result{name: "C: full jitter + 10% budget (Retryguard)", tr: optionC})
		results = append(results, result{name: "A: 5 attempts, 500 ms constant, no budget", tr: storm(optionA)})
		results = append(results, result{name: "B: exponential without jitter, no budget", tr: storm(optionB)})
	})
	for i := range results {
		r := &results[i]
		for _, n := range r.tr.attempts {
			r.peak = max(r.peak, n)
		}
		r.amplification = float64(r.tr.faultAll) / float64(r.tr.faultPrim)
		t.Logf("%-44s amplification during the fault %.2fx, peak outbound %d req/s", r.name, r.amplification, r.peak)
	}

	for sec, n := range optionC.attempts {
		if n > 1320 {
			t.Errorf("second %d: %d attempts > 1,320 req/s", sec, n)
		}
	}
	recovered := int((stormFault + 2500*time.Millisecond) / time.Second)
	end := int((stormFault + stormRecovery) / time.Second)
	for sec := recovered + 1; sec < end; sec++ {
		if r := optionC.retries[sec]; r >= 2 {
			t.Errorf("second %d, %.1fs after recovery: %d retries/s, want < 2", sec, float64(sec)-stormFault.Seconds(), r)
		}
	}
	if got := len(letters.all()); got != incomplete || incomplete == 0 {
		t.Errorf("%d operations did not complete, %d dead letters", incomplete, got)
	}
	if results[0].amplification >= results[1].amplification || results[0].amplification >= results[2].amplification {
		t.Errorf("Retryguard's amplification %.2f is not below A (%.2f) and B (%.2f)",
			results[0].amplification, results[1].amplification, results[2].amplification)
	}
}
