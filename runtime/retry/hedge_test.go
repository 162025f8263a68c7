package retry

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/clock"
)

// hedgePolicy is the SMS policy hedging once after delay, with a budget of
// its own (budgets are shared in a process, by name).
func hedgePolicy(t *testing.T, delay string) *policyconfig.Payload {
	p := smsPolicy()
	p.Budget.Name, p.Policy.Budget = "hedge-"+t.Name(), "hedge-"+t.Name()
	p.Policy.MaxAttempts = 2
	p.Policy.Hedging = &policyconfig.Hedging{Delay: d(delay), MaxHedges: 1}
	p.Policy.MinRemaining = d("10ms")
	return p
}

// get is an Operation that GETs url, reads the answer to its end and
// closes it, as an Operation must when its context is cancelled.
func get(client *http.Client, url string) Operation {
	return func(ctx context.Context, a Attempt) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		req.Header.Set(a.Header, a.Key)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return Status(resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		return nil
	}
}

// A slow first answer is hedged after the delay: the hedge carries the
// operation's key, its answer wins, and the slow attempt is cancelled.
func TestHedgeWinsAndCancelsTheSlowAttempt(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"), goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
	var (
		requests  atomic.Int32
		cancelled = make(chan struct{}, 1)
		mu        sync.Mutex
		keys      []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		if requests.Add(1) == 1 {
			select { // the first answer would take 5 s
			case <-r.Context().Done():
				cancelled <- struct{}{}
			case <-time.After(5 * time.Second):
			}
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	client := srv.Client()
	defer client.CloseIdleConnections()
	p := hedgePolicy(t, "20ms")
	letters := &memoryLetters{}
	ex := New(staticSource{p.Policy.Name: p}, WithClock(clock.Real{}), WithDeadLetters(letters))
	start := time.Now()
	var running atomic.Int32
	op := func(ctx context.Context, a Attempt) error {
		running.Add(1)
		defer running.Add(-1)
		return get(client, srv.URL)(ctx, a)
	}
	if err := ex.DoHedged(context.Background(), p.Policy.Name, smsVars, op); err != nil {
		t.Fatalf("the hedge should have won: %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("took %s: the slow answer was waited for", took)
	}
	if n := running.Load(); n != 0 {
		t.Fatalf("%d attempts still run after Do returned: Do waits for the attempts it cancels", n)
	}
	select {
	case <-cancelled:
	case <-time.After(3 * time.Second):
		t.Fatal("the slow attempt was not cancelled")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
		t.Fatalf("the attempt and its hedge carry keys %q, want one key twice", keys)
	}
}

// A hedge the budget refuses is not sent: the operation waits for its one
// attempt.
func TestHedgeRefusedByTheBudgetIsNotSent(t *testing.T) {
	srv, requests := slowServer(t, 150*time.Millisecond)
	p := hedgePolicy(t, "20ms")
	zero := int32(0)
	p.Budget.MaxRetriesPerSecond = &zero // no retry, so no hedge
	ex := New(staticSource{p.Policy.Name: p}, WithClock(clock.Real{}))
	if err := ex.DoHedged(context.Background(), p.Policy.Name, smsVars, get(srv.Client(), srv.URL)); err != nil {
		t.Fatal(err)
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("%d requests, want 1: a refused hedge must not be sent", n)
	}
}

// A hedge is an attempt: when the attempt and its hedge both fail with an
// answer that may have been applied and maxAttempts is spent, the outcome is
// unknown, and the dead letter records both attempts.
func TestFailedHedgesAreRecordedAsAttempts(t *testing.T) {
	srv, requests := ambiguousServer(t)
	p := hedgePolicy(t, "20ms")
	letters := &memoryLetters{}
	ex := New(staticSource{p.Policy.Name: p}, WithClock(clock.Real{}), WithDeadLetters(letters))
	err := ex.DoHedged(context.Background(), p.Policy.Name, smsVars, get(srv.Client(), srv.URL))
	e, ok := err.(*Error)
	if !ok || e.State != UnknownOutcome || e.Attempts != 2 {
		t.Fatalf("got %v, want UNKNOWN_OUTCOME after 2 attempts", err)
	}
	all := letters.all()
	if len(all) != 1 || len(all[0].Attempts) != 2 {
		t.Fatalf("dead letters %+v, want one with 2 attempts", all)
	}
	if n := requests.Load(); n != 2 {
		t.Fatalf("%d requests, want 2 (maxAttempts): a hedge counts against it", n)
	}
}

// The overload: when half the answers are slow, hedges stay within
// the budget's allowance (retryPercent of the primaries, plus the bucket a
// pod starts with), where unbudgeted hedging would add one request in two.
func TestHedgesStayWithinTheBudgetUnderHalfSlowAnswers(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 400 operations to a loopback server")
	}
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1)%2 == 0 {
			time.Sleep(60 * time.Millisecond)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	p := hedgePolicy(t, "5ms")
	p.Budget.MaxTokens, p.Budget.RetryPercent, p.Budget.MinRetriesPerSecond = 10, 10, 0
	ex := New(staticSource{p.Policy.Name: p}, WithClock(clock.Real{}))
	client := srv.Client()
	const ops, workers = 400, 16
	var wg sync.WaitGroup
	var next atomic.Int64
	for range workers {
		wg.Go(func() {
			for next.Add(1) <= ops {
				if err := ex.DoHedged(context.Background(), p.Policy.Name, smsVars, get(client, srv.URL)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	hedges := requests.Load() - ops
	allowance := int64(ops*p.Budget.RetryPercent/100) + int64(p.Budget.MaxTokens)
	t.Logf("%d operations, %d hedges sent (allowance %d)", ops, hedges, allowance)
	if hedges > allowance {
		t.Fatalf("%d hedges for %d primaries, above the budget's allowance of %d", hedges, ops, allowance)
	}
	if hedges == 0 {
		t.Fatal("no hedge was sent: the test no longer hedges")
	}
}

// Do never runs two attempts of one operation at once, even under a policy
// that hedges: an Operation not declared safe for concurrent use (DoHedged)
// is never hedged, so a slow first answer is waited for, alone.
func TestDoNeverOverlapsAttempts(t *testing.T) {
	srv, requests := slowServer(t, 150*time.Millisecond)
	p := hedgePolicy(t, "20ms")
	ex := New(staticSource{p.Policy.Name: p}, WithClock(clock.Real{}))
	var running, most atomic.Int32
	op := func(ctx context.Context, a Attempt) error {
		if n := running.Add(1); n > most.Load() {
			most.Store(n)
		}
		defer running.Add(-1)
		return get(srv.Client(), srv.URL)(ctx, a)
	}
	if err := ex.Do(context.Background(), p.Policy.Name, smsVars, op); err != nil {
		t.Fatal(err)
	}
	if n, m := requests.Load(), most.Load(); n != 1 || m != 1 {
		t.Fatalf("%d requests, at most %d at once: Do must not hedge an Operation", n, m)
	}
}

// A hedged round decides on its most restrictive answer: when the first
// attempt is answered 400 (permanent, INV-RTY-03) while its hedge is in
// flight, and the hedge then fails with a 503, no third attempt is sent,
// and the caller hears the 400. The dead letter records each attempt under
// its own number: attempt 1 with the 400 that decided, attempt 2 with the 503.
func TestAHedgedRoundNeverRetriesPastAPermanentAnswer(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := requests.Add(1)
		time.Sleep(60 * time.Millisecond) // the hedge (at 20 ms) is sent before the first answer
		if n == 1 {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	p := hedgePolicy(t, "20ms")
	p.Policy.MaxAttempts = 3
	letters := &memoryLetters{}
	ex := New(staticSource{p.Policy.Name: p}, WithClock(clock.Real{}), WithDeadLetters(letters))
	err := ex.DoHedged(context.Background(), p.Policy.Name, smsVars, get(srv.Client(), srv.URL))
	var se *StatusError
	if !errors.As(err, &se) || se.Code != http.StatusBadRequest {
		t.Fatalf("got %v, want the first attempt's 400", err)
	}
	if n := requests.Load(); n != 2 {
		t.Fatalf("%d requests, want 2: a 400 in the round forbids a retry", n)
	}
	all := letters.all()
	if len(all) != 1 {
		t.Fatalf("dead letters %+v, want one", all)
	}
	got := map[int]int{}
	for _, a := range all[0].Attempts {
		got[a.Attempt] = a.Evidence.Status
	}
	if len(all[0].Attempts) != 2 || got[1] != http.StatusBadRequest || got[2] != http.StatusServiceUnavailable {
		t.Fatalf("the letter's attempts %+v, want attempt 1 answered 400 and attempt 2 answered 503", all[0].Attempts)
	}
}

// An operation whose first attempt wins while its hedge is in flight made
// two attempts: its attempts per operation say 2, not a first-try success.
func TestAHedgeSentIsCountedWhoeverWins(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 1 {
			time.Sleep(80 * time.Millisecond) // the first answer comes after the hedge is sent, and wins
			return
		}
		<-r.Context().Done() // the hedge never answers: it is cancelled
	}))
	defer srv.Close()
	p := hedgePolicy(t, "20ms")
	reg := prometheus.NewRegistry()
	ex := New(staticSource{p.Policy.Name: p}, WithClock(clock.Real{}), WithMetrics(NewMetrics(reg)))
	client := srv.Client()
	defer client.CloseIdleConnections()
	if err := ex.DoHedged(context.Background(), p.Policy.Name, smsVars, get(client, srv.URL)); err != nil {
		t.Fatal(err)
	}
	if n := requests.Load(); n != 2 {
		t.Fatalf("%d requests, want the attempt and its hedge", n)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range families {
		if mf.GetName() == "retryguard_attempts_per_operation" {
			sum = mf.GetMetric()[0].GetHistogram().GetSampleSum()
		}
	}
	if sum != 2 {
		t.Fatalf("attempts per operation sum %v, want 2", sum)
	}
}

// The latency a policy hedges by outlives a recompile (a new payload for the
// same policy, as every count renewal brings): the window is not started
// again, so the hedge does not fall back to cap.
func TestObservedLatencyOutlivesARecompile(t *testing.T) {
	p := hedgePolicy(t, "20ms")
	p.Policy.Hedging = &policyconfig.Hedging{Percentile: 95, Floor: d("1ms"), Cap: d("500ms"), MaxHedges: 1}
	src := staticSource{p.Policy.Name: p}
	ex := New(src, WithClock(clock.Real{}))
	first := ex.policy(p.Policy.Name)
	if first.hedge == nil || first.hedge.observed == nil {
		t.Fatal("the policy does not hedge by observed latency")
	}
	for range 64 {
		first.hedge.observed.observe(5 * time.Millisecond)
	}
	next := *p // a new payload, as a renewal publishes
	src[p.Policy.Name] = &next
	again := ex.policy(p.Policy.Name)
	if again == first {
		t.Fatal("the policy was not recompiled")
	}
	if w := again.hedge.wait(); w != 5*time.Millisecond {
		t.Fatalf("after a recompile the hedge waits %s, want the observed 5ms", w)
	}
}
