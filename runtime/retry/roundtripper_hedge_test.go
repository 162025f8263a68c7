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

	"github.com/retryguard/retryguard/runtime/clock"
	"github.com/retryguard/retryguard/runtime/policyconfig"
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
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		time.Sleep(150 * time.Millisecond)
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
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
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 1 {
			time.Sleep(100 * time.Millisecond)
		}
		w.WriteHeader(http.StatusGatewayTimeout)
	}))
	defer srv.Close()
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
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		time.Sleep(100 * time.Millisecond)
	}))
	defer srv.Close()
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
