package retry

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// recorder is an Observer that writes down what it is told, each attempt
// by the context StartAttempt gave it, and puts the attempt's number in
// each request it is asked to inject into.
type recorder struct {
	mu     sync.Mutex
	events []string
	open   map[int]bool // attempts started and not ended
}

type attemptCtxKey struct{}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	r.events = append(r.events, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

func (r *recorder) StartOperation(ctx context.Context, policy string, req *http.Request) context.Context {
	r.add("start %s request=%t", policy, req != nil)
	return ctx
}

func (r *recorder) StartAttempt(ctx context.Context, a Attempt) context.Context {
	r.mu.Lock()
	if r.open == nil {
		r.open = map[int]bool{}
	}
	r.open[a.Number] = true
	r.mu.Unlock()
	return context.WithValue(ctx, attemptCtxKey{}, a.Number)
}

func (r *recorder) EndAttempt(ctx context.Context, rec AttemptRecord, d Decision) {
	n := ctx.Value(attemptCtxKey{}).(int)
	r.mu.Lock()
	if !r.open[n] {
		r.events = append(r.events, fmt.Sprintf("attempt %d ended twice or never started", n))
	}
	delete(r.open, n)
	if rec.Attempt != n {
		r.events = append(r.events, fmt.Sprintf("attempt %d ended with the record of attempt %d", n, rec.Attempt))
	}
	r.mu.Unlock()
	r.add("attempt %d %s status=%d sleep=%t code=%s", n, d.Next, rec.Evidence.Status, d.Sleep > 0, d.Code)
}

func (r *recorder) EndOperation(_ context.Context, attempts int, err error) {
	r.add("end attempts=%d err=%t", attempts, err != nil)
}

func (r *recorder) Inject(ctx context.Context, h http.Header) {
	h.Set("Attempt", fmt.Sprint(ctx.Value(attemptCtxKey{})))
}

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// The Observer of a RoundTripper request that is retried once is told the
// operation's start with its request, each attempt's end with the decision
// (a retry after a backoff, then the success with its status) and the
// operation's end; each attempt's request carries what Inject put in it.
func TestObserverSeesEachAttemptAndItsDecision(t *testing.T) {
	var n atomic.Int32
	var seen []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Attempt"))
		mu.Unlock()
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	p := smsPolicy()
	p.Budget.Name, p.Policy.Budget = "observe-"+t.Name(), "observe-"+t.Name()
	rec := &recorder{}
	c := hedgingClient(srv, p, WithObserver(rec))
	res, err := hedgedPost(t, c, srv.URL, "{}")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	want := []string{"start sms-2fa-dispatch request=true", "attempt 1 BACKOFF_WAIT status=503 sleep=true code=",
		"attempt 2 DISPATCHED status=200 sleep=false code=", "end attempts=2 err=false"}
	if got := rec.all(); !slices.Equal(got, want) {
		t.Fatalf("the observer saw\n%q\nwant\n%q", got, want)
	}
	if !slices.Equal(seen, []string{"1", "2"}) {
		t.Fatalf("the requests carried %q, want each its attempt's injection", seen)
	}
}

// Under hedging, every attempt started is ended once: the winner as the
// success, the slow attempt as cancelled (ATTEMPTING, no evidence).
func TestObserverEndsEveryHedgedAttemptOnce(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}
	}))
	defer srv.Close()
	rec := &recorder{}
	c := hedgingClient(srv, hedgePolicy(t, "20ms"), WithObserver(rec))
	res, err := hedgedPost(t, c, srv.URL, "{}")
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	got := rec.all()
	want := []string{"start sms-2fa-dispatch request=true", "attempt 1 ATTEMPTING status=0 sleep=false code=",
		"attempt 2 DISPATCHED status=200 sleep=false code=", "end attempts=2 err=false"}
	if !slices.Equal(got, want) {
		t.Fatalf("the observer saw\n%q\nwant\n%q", got, want)
	}
	srv.Client().CloseIdleConnections()
}

// Do's attempts run under the context StartAttempt returned, and a stop
// is told with its code.
func TestObserverGivesDoTheAttemptsContext(t *testing.T) {
	rec := &recorder{}
	p := smsPolicy()
	p.Policy.MaxAttempts = 1
	ex := New(staticSource{p.Policy.Name: p}, WithObserver(rec))
	var got []any
	err := ex.Do(t.Context(), p.Policy.Name, smsVars, func(ctx context.Context, a Attempt) error {
		got = append(got, ctx.Value(attemptCtxKey{}))
		return &StatusError{Code: http.StatusServiceUnavailable}
	})
	if err == nil {
		t.Fatal("one attempt of 503 should fail")
	}
	if !slices.Equal(got, []any{1}) {
		t.Fatalf("the operation ran under %v, want attempt 1's context", got)
	}
	want := []string{"start sms-2fa-dispatch request=false", "attempt 1 TERMINAL_EXHAUSTED status=503 sleep=false code=ERR_RETRY_LIMIT_EXCEEDED",
		"end attempts=1 err=true"}
	if events := rec.all(); !slices.Equal(events, want) {
		t.Fatalf("the observer saw\n%q\nwant\n%q", events, want)
	}
}

// A hedge that fails while the attempt it hedges is still in flight, which
// then wins, is ended with its own evidence (its 503, its class): it did
// fail, and was not cancelled; retryguard_attempts_total counts it
// transient, not unrecognized.
func TestAHedgeThatFailedBesideTheWinnerKeepsItsEvidence(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if n.Add(1) == 1 {
			time.Sleep(300 * time.Millisecond) // the hedge is sent, and answers, meanwhile
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	rec, reg := &recorder{}, prometheus.NewRegistry()
	c := hedgingClient(srv, hedgePolicy(t, "20ms"), WithObserver(rec), WithMetrics(NewMetrics(reg)))
	res, err := hedgedPost(t, c, srv.URL, "{}")
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	want := []string{"start sms-2fa-dispatch request=true", "attempt 2 ATTEMPTING status=503 sleep=false code=",
		"attempt 1 DISPATCHED status=200 sleep=false code=", "end attempts=2 err=false"}
	if got := rec.all(); !slices.Equal(got, want) {
		t.Fatalf("the observer saw\n%q\nwant\n%q", got, want)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counted := map[string]float64{}
	for _, mf := range families {
		if mf.GetName() == "retryguard_attempts_total" {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "class" {
						counted[l.GetValue()] = m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	if counted["transient"] != 1 || counted["success"] != 1 || counted["unrecognized"] != 0 {
		t.Fatalf("retryguard_attempts_total by class: %v, want the hedge's 503 transient and the winner a success", counted)
	}
	srv.Client().CloseIdleConnections()
}

// An operation refused for its key before any attempt (a variable the
// template names is missing) is still one operation to the Observer, of no
// attempt and with the refusal: a trace shows why nothing was sent.
func TestObserverSeesAnOperationRefusedForItsKey(t *testing.T) {
	p := smsPolicy()
	rec := &recorder{}
	ex := New(staticSource{p.Policy.Name: p}, WithObserver(rec))
	err := ex.Do(context.Background(), p.Policy.Name, Vars{"user_id": "42"}, func(context.Context, Attempt) error { return nil })
	if err == nil {
		t.Fatal("a missing key variable was not refused")
	}
	want := []string{"start sms-2fa-dispatch request=false", "end attempts=0 err=true"}
	if got := rec.all(); !slices.Equal(got, want) {
		t.Fatalf("the observer saw\n%q\nwant\n%q", got, want)
	}
}
