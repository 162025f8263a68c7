package retry

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/clock"
)

// hedgingClient is a client whose RoundTripper runs p on the real clock,
// sending through srv's own transport.
func hedgingClient(srv *httptest.Server, p *policyconfig.Payload, opts ...Option) *http.Client {
	ex := New(staticSource{p.Policy.Name: p}, append([]Option{WithClock(clock.Real{})}, opts...)...)
	return &http.Client{Transport: &RoundTripper{Executor: ex, Policy: p.Policy.Name, Base: srv.Client().Transport}}
}

func hedgedPost(t *testing.T, c *http.Client, url, body string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(WithVars(t.Context(), smsVars), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return c.Do(req)
}

// slowServer answers 200 after delay, counting the requests it gets.
func slowServer(t *testing.T, delay time.Duration) (*httptest.Server, *atomic.Int32) {
	requests := new(atomic.Int32)
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		requests.Add(1)
		time.Sleep(delay)
	}))
	t.Cleanup(srv.Close)
	return srv, requests
}

// ambiguousServer answers 504 to every request, the first after 100 ms:
// a gateway cannot say whether the request was applied.
func ambiguousServer(t *testing.T) (*httptest.Server, *atomic.Int32) {
	requests := new(atomic.Int32)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if requests.Add(1) == 1 {
			time.Sleep(100 * time.Millisecond)
		}
		w.WriteHeader(http.StatusGatewayTimeout)
	}))
	t.Cleanup(srv.Close)
	return srv, requests
}

var leakOptions = []goleak.Option{goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"), goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	goleak.IgnoreCurrent()}

// A slow first answer is hedged through the RoundTripper: the hedge carries
// the same key and body, its answer is returned, the slow attempt is
// cancelled, and the winner's body stays readable to its end while (and
// after) the loser is cancelled. Nothing of the call runs on afterwards.
func TestRoundTripperHedgeWinsAndCancelsTheSlowAttempt(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions...)
	const tail = 256 << 10 // more than one read of the winning body
	var (
		requests  atomic.Int32
		cancelled = make(chan struct{})
		mu        sync.Mutex
		keys      []string
		bodies    []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		keys, bodies = append(keys, r.Header.Get("Idempotency-Key")), append(bodies, string(b))
		mu.Unlock()
		if requests.Add(1) == 1 {
			select { // the first answer would take 5 s
			case <-r.Context().Done():
				close(cancelled)
			case <-time.After(5 * time.Second):
				_, _ = io.WriteString(w, "slow")
			}
			return
		}
		_, _ = io.WriteString(w, "fast:")
		w.(http.Flusher).Flush()
		select { // the rest of the winning body only once the loser is cancelled
		case <-cancelled:
		case <-time.After(3 * time.Second):
		}
		_, _ = io.WriteString(w, strings.Repeat("x", tail))
	}))
	defer srv.Close()
	p := hedgePolicy(t, "20ms")
	c := hedgingClient(srv, p)
	start := time.Now()
	res, err := hedgedPost(t, c, srv.URL, `{"to":"+15550100"}`)
	if err != nil {
		t.Fatalf("the hedge should have won: %v", err)
	}
	got, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil || string(got) != "fast:"+strings.Repeat("x", tail) {
		t.Fatalf("read %d bytes (%v), want the hedge's whole answer of %d", len(got), err, len("fast:")+tail)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("took %s: the slow answer was waited for", took)
	}
	select {
	case <-cancelled:
	default:
		t.Fatal("the slow attempt was not cancelled")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
		t.Fatalf("the attempt and its hedge carry keys %q, want one key twice", keys)
	}
	if bodies[0] != `{"to":"+15550100"}` || bodies[1] != bodies[0] {
		t.Fatalf("the attempt and its hedge carry bodies %q, want the request's twice", bodies)
	}
	srv.Client().CloseIdleConnections()
}

// A hedge the budget refuses is not sent through the RoundTripper either.
func TestRoundTripperHedgeRefusedByTheBudgetIsNotSent(t *testing.T) {
	srv, requests := slowServer(t, 150*time.Millisecond)
	p := hedgePolicy(t, "20ms")
	zero := int32(0)
	p.Budget.MaxRetriesPerSecond = &zero // no retry, so no hedge
	res, err := hedgedPost(t, hedgingClient(srv, p), srv.URL, "{}")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	if n := requests.Load(); n != 1 {
		t.Fatalf("%d requests, want 1: a refused hedge must not be sent", n)
	}
}

// An ambiguous hedge keeps the outcome unknown: both attempts answer 504,
// maxAttempts is spent, and the dead letter records both.
func TestRoundTripperAmbiguousHedgeKeepsTheOutcomeUnknown(t *testing.T) {
	srv, requests := ambiguousServer(t)
	p := hedgePolicy(t, "20ms")
	letters := &memoryLetters{}
	res, err := hedgedPost(t, hedgingClient(srv, p, WithDeadLetters(letters)), srv.URL, "{}")
	if res != nil {
		_ = res.Body.Close()
	}
	var e *Error
	if !errors.As(err, &e) || e.State != UnknownOutcome || e.Attempts != 2 {
		t.Fatalf("got %v, want UNKNOWN_OUTCOME after 2 attempts", err)
	}
	if all := letters.all(); len(all) != 1 || len(all[0].Attempts) != 2 {
		t.Fatalf("dead letters %+v, want one with 2 attempts", all)
	}
	if n := requests.Load(); n != 2 {
		t.Fatalf("%d requests, want 2 (maxAttempts)", n)
	}
}

// A POST without the policy's key is not replay-safe: it is never hedged,
// whatever the policy says.
func TestRoundTripperDoesNotHedgeAKeylessPost(t *testing.T) {
	srv, requests := slowServer(t, 100*time.Millisecond)
	p := hedgePolicy(t, "20ms")
	p.Policy.KeyTemplate, p.Policy.Operation = "", "GET /v1/status" // a policy that hedges, without a key
	c := hedgingClient(srv, p)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, strings.NewReader("{}"))
	res, err := c.Do(req)
	if err == nil {
		_ = res.Body.Close()
	}
	if n := requests.Load(); n != 1 {
		t.Fatalf("%d requests, want 1: a keyless POST is sent once", n)
	}
}

// The deadline and its reserve bound every hedge: a hedge is not sent once
// the time left is below minRemaining, and a hedge that is sent ends with
// the deadline, as its attempt does.
func TestRoundTripperHedgesAreBoundByTheDeadline(t *testing.T) {
	defer goleak.VerifyNone(t, leakOptions...)
	var requests, ended atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // the server sees the client go only once the body is read
		requests.Add(1)
		select { // never answers in time
		case <-r.Context().Done():
			ended.Add(1)
		case <-time.After(5 * time.Second):
		}
	}))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	for _, tc := range []struct {
		name, deadline, reserve string
		requests                int32
	}{
		{"reserve refuses the hedge", "100ms", "90ms", 1},
		{"hedge sent, both cut at the deadline", "300ms", "10ms", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requests.Store(0)
			ended.Store(0)
			p := hedgePolicy(t, "20ms")
			p.Policy.Deadline, p.Policy.MinRemaining = d(tc.deadline), d(tc.reserve)
			start := time.Now()
			res, err := hedgedPost(t, hedgingClient(srv, p), srv.URL, "{}")
			if err == nil {
				_ = res.Body.Close()
				t.Fatal("an answer past the deadline was returned")
			}
			var e *Error
			if tc.requests == 2 && (!errors.As(err, &e) || e.State != UnknownOutcome) {
				t.Fatalf("got %v, want UNKNOWN_OUTCOME: both attempts may have been applied", err)
			}
			if took := time.Since(start); took > time.Second+d(tc.deadline).D() {
				t.Fatalf("took %s, past the %s deadline", took, tc.deadline)
			}
			if n := requests.Load(); n != tc.requests {
				t.Fatalf("%d requests, want %d", n, tc.requests)
			}
			deadline := time.Now().Add(3 * time.Second)
			for ended.Load() != tc.requests && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if n := ended.Load(); n != tc.requests {
				t.Fatalf("%d of %d requests were cancelled at the deadline", n, tc.requests)
			}
		})
	}
}

// A body without GetBody is hedged from the RoundTripper's buffer: every
// attempt sends the same bytes.
func TestRoundTripperHedgesABufferedBody(t *testing.T) {
	var (
		requests atomic.Int32
		mu       sync.Mutex
		bodies   []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		if requests.Add(1) == 1 {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	p := hedgePolicy(t, "20ms")
	req, _ := http.NewRequestWithContext(WithVars(t.Context(), smsVars), http.MethodPost, srv.URL, io.NopCloser(strings.NewReader(`{"to":"+15550100"}`)))
	if req.GetBody != nil {
		t.Fatal("the request has GetBody: the test would not use the buffer")
	}
	res, err := hedgingClient(srv, p).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if string(got) != "ok" || len(bodies) != 2 || bodies[0] != `{"to":"+15550100"}` || bodies[1] != bodies[0] {
		t.Fatalf("answer %q, bodies sent %q: want the hedge's answer and the same body twice", got, bodies)
	}
}
