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

// The spec's recovery drill (MC-RT-01), simulated: 1,200 requests/s; for the
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

// traffic counts attempts, primaries and retries per virtual second.
type traffic struct {
	mu        sync.Mutex
	start     time.Time
	length    time.Duration // of the primary traffic; later seconds hold only its retries
	attempts  map[int]int
	firsts    map[int]int
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
		tr.firsts[sec]++
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

// amplificationBound is the acceptance bound on outbound traffic: at most
// 1.05× the primaries in every one-second bucket after the first.
const amplificationBound = 1.05

// overBound lists the seconds after the first, while primaries arrive,
// whose outbound attempts pass amplificationBound× their primaries.
func (tr *traffic) overBound() []string {
	var over []string
	for sec, n := range tr.attempts {
		if sec > 0 && sec < int(tr.length/time.Second) && float64(n) > amplificationBound*float64(tr.firsts[sec]) {
			over = append(over, fmt.Sprintf("second %d: %d attempts for %d primaries", sec, n, tr.firsts[sec]))
		}
	}
	return over
}

// maxRatio is the largest attempts/primaries ratio of any second after the
// first while primaries arrive.
func (tr *traffic) maxRatio() float64 {
	worst := 0.0
	for sec, n := range tr.attempts {
		if sec > 0 && sec < int(tr.length/time.Second) && tr.firsts[sec] > 0 {
			worst = max(worst, float64(n)/float64(tr.firsts[sec]))
		}
	}
	return worst
}

// storm drives 1,200 operations a second through run for the whole drill.
func storm(run strategy) *traffic { return stormFor(stormFault+stormRecovery, run) }

func stormFor(length time.Duration, run strategy) *traffic {
	tr := &traffic{start: time.Now(), length: length, attempts: map[int]int{}, firsts: map[int]int{}, retries: map[int]int{}}
	var wg sync.WaitGroup
	total := int(length.Seconds() * stormRate)
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
	t.Logf("Retryguard: outbound/primary at most %.3f in any second after the first; %d operations did not complete, %d dead letters",
		optionC.maxRatio(), incomplete, len(letters.all()))
	for _, o := range optionC.overBound() {
		t.Errorf("%s: above %.2f×", o, amplificationBound)
	}
	recovered := int((stormFault + 2500*time.Millisecond) / time.Second)
	end := int((stormFault + stormRecovery) / time.Second)
	worst := 0
	for sec := recovered + 1; sec < end; sec++ {
		worst = max(worst, optionC.retries[sec])
		if r := optionC.retries[sec]; r >= 2 {
			t.Errorf("second %d, %.1fs after recovery: %d retries/s, want < 2", sec, float64(sec)-stormFault.Seconds(), r)
		}
	}
	t.Logf("Retryguard: at most %d retries/s from 2.5 s after recovery", worst)
	if got := len(letters.all()); got != incomplete || incomplete == 0 {
		t.Errorf("%d operations did not complete, %d dead letters", incomplete, got)
	}
	if results[0].amplification >= results[1].amplification || results[0].amplification >= results[2].amplification {
		t.Errorf("Retryguard's amplification %.2f is not below A (%.2f) and B (%.2f)",
			results[0].amplification, results[1].amplification, results[2].amplification)
	}
}

// A storm that starts with the process: the executor, and so its budget, is
// new when the vendor starts answering 429 to 60% of attempts. The start
// credit lets the first failures retry, and outbound still stays within
// amplificationBound× primary in every second, the first included.
func TestColdStartStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("the storm simulates 12,000 operations")
	}
	var tr *traffic
	synctest.Test(t, func(t *testing.T) {
		p := smsPolicy()
		ex := New(staticSource{p.Policy.Name: p}, WithClock(clock.Real{}))
		tr = stormFor(10*time.Second, func(ctx context.Context, op int, call func(int) error) error {
			return ex.Do(ctx, p.Policy.Name, Vars{"user_id": fmt.Sprint(op), "login_session_id": "s"},
				func(_ context.Context, a Attempt) error { return call(a.Number) })
		})
	})
	if tr.retries[0] == 0 {
		t.Fatal("no retry in the first second of a new process")
	}
	first := float64(tr.attempts[0]) / float64(tr.firsts[0])
	t.Logf("first second: %d primaries, %d retries (%.3f×); later seconds at most %.3f×", tr.firsts[0], tr.retries[0], first, tr.maxRatio())
	if first > amplificationBound {
		t.Errorf("first second: %d attempts for %d primaries", tr.attempts[0], tr.firsts[0])
	}
	for _, o := range tr.overBound() {
		t.Errorf("%s: above %.2f×", o, amplificationBound)
	}
}
