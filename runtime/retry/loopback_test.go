package retry

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/limits"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/clock"
)

// These tests send real requests to real net/http servers on loopback
// (issue 18): each finding of an app team's first try has one here.

// loop is one executor, its dead letters and its lifecycle events, behind a
// RoundTripper whose Base is a transport of the test's own.
type loop struct {
	ex      *Executor
	letters *memoryLetters
	events  *ChannelSink
	rt      *RoundTripper
	client  *http.Client
}

func newLoop(t *testing.T, p *policyconfig.Payload, base http.RoundTripper) *loop {
	t.Helper()
	l := &loop{letters: &memoryLetters{}, events: NewChannelSink(4096)}
	l.ex = New(staticSource{p.Policy.Name: p}, WithClock(clock.NewVirtual(epoch)), WithDeadLetters(l.letters), WithEventSink(l.events))
	warm(l.ex, p.Policy.Name, 30)
	l.attempts() // drop the warm-up's events
	if base == nil {
		tr := &http.Transport{}
		t.Cleanup(tr.CloseIdleConnections)
		base = tr
	}
	l.rt = &RoundTripper{Executor: l.ex, Policy: p.Policy.Name, Base: base}
	l.client = &http.Client{Transport: l.rt}
	return l
}

// attempts counts the attempts started since the last call.
func (l *loop) attempts() int {
	n := 0
	for {
		select {
		case ev := <-l.events.C:
			if ev.To == Attempting {
				n++
			}
		default:
			return n
		}
	}
}

func (l *loop) post(t *testing.T, url string, body io.Reader) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(WithVars(t.Context(), smsVars), http.MethodPost, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return l.client.Do(req)
}

// arrivals counts the requests a server received, by idempotency key.
type arrivals struct {
	mu sync.Mutex
	n  map[string]int
}

func (a *arrivals) add(r *http.Request) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n == nil {
		a.n = map[string]int{}
	}
	a.n[r.Header.Get("Idempotency-Key")]++
	total := 0
	for _, v := range a.n {
		total += v
	}
	return total
}

func (a *arrivals) total() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	total := 0
	for _, v := range a.n {
		total += v
	}
	return total
}

func hangUp(w http.ResponseWriter) {
	if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
		_ = conn.Close()
	}
}

// dropAfterRead is a server that reads each request whole and hangs up
// without an answer: every request may have been applied.
func dropAfterRead(t *testing.T) (*httptest.Server, *arrivals) {
	var got arrivals
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		got.add(r)
		hangUp(w)
	}))
	t.Cleanup(srv.Close)
	return srv, &got
}

// idleConn leaves an idle keep-alive connection to url in tr's pool.
func idleConn(t *testing.T, tr *http.Transport, url string) {
	t.Helper()
	res, err := tr.RoundTrip(must(http.NewRequest(http.MethodGet, url, nil)))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
}

func payload(size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}

// Finding 1: a success must be readable to its end. The attempt's context
// used to be cancelled when the attempt returned, while the caller read.
func TestARoundTripperResponseIsReadableToTheEnd(t *testing.T) {
	for _, tc := range []struct {
		size, reads int
		streamed    bool
	}{{4 << 20, 20, false}, {256 << 10, 50, false}, {16 << 10, 50, false}, {1 << 20, 10, true}} {
		t.Run(fmt.Sprintf("%d bytes, streamed %v", tc.size, tc.streamed), func(t *testing.T) {
			body := payload(tc.size)
			want := sha256.Sum256(body)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
				if !tc.streamed {
					_, _ = w.Write(body)
					return
				}
				for chunk := range slices.Chunk(body, 32<<10) { // chunked, flushed as it goes
					_, _ = w.Write(chunk)
					w.(http.Flusher).Flush()
				}
			}))
			defer srv.Close()
			l := newLoop(t, smsPolicy(), nil)
			for i := range tc.reads {
				res, err := l.post(t, srv.URL, strings.NewReader(`{"to":"+15550100"}`))
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(res.Body)
				_ = res.Body.Close()
				if err != nil || sha256.Sum256(got) != want {
					t.Fatalf("read %d: %d of %d bytes, %v", i+1, len(got), tc.size, err)
				}
			}
		})
	}
}

// Finding 1, the other half: a discarded attempt ends at once, before the
// backoff, and the attempt whose body the caller holds ends when it closes.
func TestADiscardedAttemptEndsAtOnce(t *testing.T) {
	ended := make(chan string, 4)
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader([]int{503, 201}[min(n.Add(1)-1, 1)])
		_, _ = w.Write(payload(1 << 20)) // a long body, still coming
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		ended <- "request ended"
	}))
	defer srv.Close()
	var slept atomic.Bool
	clk := sleepHook{Virtual: clock.NewVirtual(epoch), before: func() {
		select {
		case <-ended: // the 503's request ended before the backoff
			slept.Store(true)
		case <-time.After(5 * time.Second):
		}
	}}
	p := smsPolicy()
	ex := New(staticSource{p.Policy.Name: p}, WithClock(clk))
	warm(ex, p.Policy.Name, 30)
	c := &http.Client{Transport: &RoundTripper{Executor: ex, Policy: p.Policy.Name}}
	req, _ := http.NewRequestWithContext(WithVars(t.Context(), smsVars), http.MethodPost, srv.URL, strings.NewReader("{}"))
	res, err := c.Do(req)
	if err != nil || res.StatusCode != 201 {
		t.Fatalf("%v %v", res, err)
	}
	if !slept.Load() {
		t.Fatal("the discarded 503 was still open when the backoff began")
	}
	_, _ = io.CopyN(io.Discard, res.Body, 1024)
	select {
	case <-ended:
		t.Fatal("the delivered response ended before the caller closed it")
	case <-time.After(50 * time.Millisecond):
	}
	_ = res.Body.Close()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("closing the body did not end the attempt")
	}
}

// Issue 18, item 1: "Discarded attempts are cancelled at once"; RG-RETRY:
// "Release failed transaction/connection scopes before external dependency
// backoff". A 503 that declares a short body (within discard's 4 KiB drain)
// but sends it slowly holds the operation in discard until the attempt's
// timer ends, which here is the whole deadline: the retry it earned never
// happens.
func TestASlowSmallBodyDoesNotHoldTheRetry(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if n.Add(1) == 1 {
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("Service Unavailable"))
			w.(http.Flusher).Flush()
			select { // the rest of the body comes late
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	p := smsPolicy()
	p.Policy.Deadline = d("2s")
	ex := New(staticSource{p.Policy.Name: p}, WithClock(clock.Real{}))
	warm(ex, p.Policy.Name, 30)
	c := &http.Client{Transport: &RoundTripper{Executor: ex, Policy: p.Policy.Name}}
	req, _ := http.NewRequestWithContext(WithVars(t.Context(), smsVars), http.MethodPost, srv.URL, strings.NewReader("{}"))
	res, err := c.Do(req)
	if err != nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("a 503 with a slow 100-byte body, then 201: %v %v (%d requests)", res, err, n.Load())
	}
	_ = res.Body.Close()
}

// Finding 2: the caller's request is the caller's. RoundTrip sets neither
// its Body nor its GetBody, nor a header, even when it retries.
func TestTheCallersRequestIsNeverModified(t *testing.T) {
	srv, s := server(t, 503, 201, 503, 201)
	l := newLoop(t, smsPolicy(), nil)
	for name, body := range map[string]io.Reader{
		"a reader net/http cannot rewind": io.MultiReader(strings.NewReader(`{"to":"+15550100"}`)),
		"a strings.Reader, with GetBody":  strings.NewReader(`{"to":"+15550100"}`),
	} {
		req, _ := http.NewRequestWithContext(WithVars(t.Context(), smsVars), http.MethodPost, srv.URL, body)
		origBody, origGetBody, origHeader := req.Body, req.GetBody != nil, req.Header.Clone()
		res, err := l.rt.RoundTrip(req)
		if err != nil || res.StatusCode != 201 {
			t.Fatalf("%s: %v %v", name, res, err)
		}
		_ = res.Body.Close()
		if req.Body != origBody || (req.GetBody != nil) != origGetBody || len(req.Header) != len(origHeader) || req.Header.Get("Idempotency-Key") != "" {
			t.Errorf("%s: the request was modified: body %v→%v, GetBody %v→%v, header %v→%v",
				name, origBody, req.Body, origGetBody, req.GetBody != nil, origHeader, req.Header)
		}
		if res.Request != req {
			t.Errorf("%s: the response's Request is not the caller's", name)
		}
	}
	for i, b := range s.bodies {
		if b != `{"to":"+15550100"}` {
			t.Errorf("attempt %d sent body %q", i+1, b)
		}
	}
}

// Finding 3: replay safety belongs to the request sent. Under a policy whose
// operation is a GET and which has no key, a POST whose connection dropped
// after the server read it is applied once, and the operation's outcome is
// unknown; a GET under the same policy is retried.
func TestReplaySafetyIsTheRequestsOwn(t *testing.T) {
	var got arrivals
	var gets atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		got.add(r)
		if r.Method != http.MethodGet || gets.Add(1) == 1 {
			hangUp(w) // read, then dropped: the request may have been applied
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	p := smsPolicy()
	p.Policy.Operation, p.Policy.KeyTemplate = "GET /v1/status", ""
	l := newLoop(t, p, &http.Transport{DisableKeepAlives: true})
	_, err := l.post(t, srv.URL, strings.NewReader(`{"to":"+15550100"}`))
	var re *Error
	if !errors.As(err, &re) || re.State != UnknownOutcome || got.total() != 1 || l.attempts() != 1 {
		t.Fatalf("a keyless POST after a drop: %v, applied %d times", err, got.total())
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
	res, err := l.client.Do(req)
	if err != nil || res.StatusCode != 200 || got.total() != 3 {
		t.Fatalf("a GET after a drop: %v %v, %d requests", res, err, got.total())
	}
	_ = res.Body.Close()
}

// keepAlive returns a server that answers the first request on each
// connection and hangs up on the second after reading it, as a keep-alive
// connection that drops after the server read the request; arrivals counts
// what it received. With refuseAfterDrop it also stops listening at the
// drop, so that every later connection is refused.
func keepAlive(t *testing.T, refuseAfterDrop bool) (*httptest.Server, *arrivals) {
	var got arrivals
	perConn := sync.Map{}
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		got.add(r)
		n, _ := perConn.LoadOrStore(r.RemoteAddr, new(atomic.Int32))
		if n.(*atomic.Int32).Add(1) == 2 {
			if refuseAfterDrop {
				_ = srv.Listener.Close()
			}
			hangUp(w)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	return srv, &got
}

// Finding 4: every attempt the dependency receives is counted. net/http
// re-sends a request by itself when a reused keep-alive connection drops
// after the request was written, if the request looks replayable (a GET, or
// any method with an Idempotency-Key header); the executor used to count one
// attempt for two arrivals, and the budget was never asked.
func TestNetHTTPsOwnReSendsAreRefused(t *testing.T) {
	for name, tc := range map[string]struct {
		method string
		body   func() io.Reader
		policy func(*policyconfig.Payload)
	}{
		"a keyed POST with a body": {http.MethodPost, func() io.Reader { return strings.NewReader(`{"to":"+15550100"}`) }, nil},
		"a keyed POST, a body net/http cannot rewind": {http.MethodPost,
			func() io.Reader { return io.MultiReader(strings.NewReader(`{"to":"+15550100"}`)) }, nil},
		"a body-less GET": {http.MethodGet, func() io.Reader { return nil }, func(p *policyconfig.Payload) {
			p.Policy.Operation, p.Policy.KeyTemplate = "GET /v1/status", ""
		}},
		"a body-less keyed POST": {http.MethodPost, func() io.Reader { return nil }, nil},
	} {
		t.Run(name, func(t *testing.T) {
			srv, got := keepAlive(t, false)
			p := smsPolicy()
			if tc.policy != nil {
				tc.policy(p)
			}
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			l := newLoop(t, p, tr)
			tokens := func() float64 { b, _ := l.ex.Budget(p.Policy.Name); return b.Tokens() }
			// The first request leaves an idle keep-alive connection behind.
			res, err := tr.RoundTrip(must(http.NewRequest(http.MethodGet, srv.URL, nil)))
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
			before := tokens()
			req, _ := http.NewRequestWithContext(WithVars(t.Context(), smsVars), tc.method, srv.URL, tc.body())
			res, err = l.client.Do(req)
			if err != nil || res.StatusCode != 201 {
				t.Fatalf("%v %v", res, err)
			}
			_ = res.Body.Close()
			arrived, attempts := got.total()-1, l.attempts()
			if arrived != attempts || attempts != 2 {
				t.Fatalf("the dependency received %d requests; the executor counted %d attempts", arrived, attempts)
			}
			if spent := before - tokens(); spent < 0.5 {
				t.Errorf("the retry spent %.2f tokens; it must ask the budget", spent)
			}
		})
	}
}

// Finding 4, the refused re-send: when the dependency stops listening after
// it read the request, the attempt that reached it is still dispatched, and
// the operation ends UNKNOWN_OUTCOME, not TERMINAL_EXHAUSTED, with every
// attempt's evidence in the dead letter.
func TestAnAttemptWhoseHeadersWereWrittenIsDispatched(t *testing.T) {
	srv, got := keepAlive(t, true)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	l := newLoop(t, smsPolicy(), tr)
	res, err := tr.RoundTrip(must(http.NewRequest(http.MethodGet, srv.URL, nil)))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	_, err = l.post(t, srv.URL, strings.NewReader(`{"to":"+15550100"}`))
	var re *Error
	if !errors.As(err, &re) || re.State != UnknownOutcome {
		t.Fatalf("got %v, want UNKNOWN_OUTCOME", err)
	}
	if got.total() != 2 {
		t.Errorf("the dependency received %d requests, want 2 (the warm-up and one attempt)", got.total())
	}
	letters := l.letters.all()
	if len(letters) != 1 || letters[0].State != UnknownOutcome || len(letters[0].Attempts) != 3 {
		t.Fatalf("dead letters %+v", letters)
	}
	first := letters[0].Attempts[0].Evidence
	if !first.Dispatched || first.Class != Ambiguous {
		t.Errorf("the attempt the dependency received: %+v", first)
	}
	for _, a := range letters[0].Attempts[1:] {
		if a.Evidence.Dispatched || a.Evidence.Transport != limits.ConnectionRefused {
			t.Errorf("attempt %d: %+v, want a refused, undispatched connect", a.Attempt, a.Evidence)
		}
	}
}

// Issue 18, finding 4, through Do (README: "Any operation: ex.Do(...,
// func(ctx, a) error { return send(ctx, a.Key) })"): an operation that
// sends with http.Client and the attempt's key. A reused keep-alive
// connection drops after the server read the request; net/http re-sends it
// by itself (the key makes it replayable), and that re-send is refused: "If
// that hidden re-send is refused, every attempt is recorded dispatched=false
// and the operation ends TERMINAL_EXHAUSTED, although the SMS was sent." Do
// cannot see the first send, so a refusal that http.Client returns for a
// request net/http may replay is no proof that nothing left
// (docs/runtime.md, "Do and net/http"): every attempt is dispatched, and the
// operation ends UNKNOWN_OUTCOME.
func TestDoWithNetHTTPARefusedReSendIsNoProofOfNonDispatch(t *testing.T) {
	srv, got := keepAlive(t, true)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	idleConn(t, tr, srv.URL)
	p := smsPolicy()
	letters := &memoryLetters{}
	ex := New(staticSource{p.Policy.Name: p}, WithClock(clock.NewVirtual(epoch)), WithDeadLetters(letters))
	warm(ex, p.Policy.Name, 30)
	client := &http.Client{Transport: tr}
	err := ex.Do(t.Context(), p.Policy.Name, smsVars, func(ctx context.Context, a Attempt) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{"to":"+15550100"}`))
		req.Header.Set(a.Header, a.Key)
		res, err := client.Do(req)
		if err != nil {
			return err
		}
		_ = res.Body.Close()
		return nil
	})
	var re *Error
	l := letters.all()
	if !errors.As(err, &re) || re.State != UnknownOutcome || len(l) != 1 {
		t.Fatalf("the SMS reached the dependency (%d arrivals), then: %v; dead letter %+v; want UNKNOWN_OUTCOME", got.total()-1, err, l)
	}
	for _, a := range l[0].Attempts {
		if !a.Evidence.Dispatched {
			t.Errorf("attempt %d recorded %+v: a refusal after a send is not proof that nothing left", a.Attempt, a.Evidence)
		}
	}
}

// detached is a Base that sends each request on a context of its own (as a
// wrapper that detaches cancellation does): the RoundTripper's httptrace
// hooks never run. The request still reaches the dependency.
type detached struct{ tr *http.Transport }

func (d detached) RoundTrip(req *http.Request) (*http.Response, error) {
	return d.tr.RoundTrip(req.WithContext(context.Background()))
}

// Issue 18, item 3: "A request whose method is not idempotent and that does
// not carry the rendered key is never replayed after it may have been
// applied, whatever the policy's operation says." Under a GET policy without
// a key, a keyless POST whose connection dropped after the server read it,
// sent by a Base that does not report httptrace, must be applied once: the
// absence of a WroteHeaders callback is no proof that nothing left.
func TestNoTraceIsNoProofOfNonDispatch(t *testing.T) {
	srv, got := dropAfterRead(t)
	p := smsPolicy()
	p.Policy.Operation, p.Policy.KeyTemplate = "GET /v1/status", ""
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	l := newLoop(t, p, detached{tr})
	l.ex = New(staticSource{p.Policy.Name: p}, WithClock(clock.Real{}), WithDeadLetters(l.letters), WithEventSink(l.events))
	warm(l.ex, p.Policy.Name, 30)
	l.rt.Executor = l.ex
	// A caller's deadline shorter than the policy's 4 s: the attempt then runs
	// on the caller's context, still live when the drop is seen. Only
	// net/http's trace could prove that nothing left, and it never runs.
	ctx, cancel := context.WithTimeout(WithVars(t.Context(), smsVars), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{"to":"+15550100"}`))
	_, err := l.client.Do(req)
	if got.total() != 1 {
		t.Fatalf("a keyless POST after a drop was applied %d times (%v)", got.total(), err)
	}
	if re := (*Error)(nil); !errors.As(err, &re) || re.State != UnknownOutcome {
		t.Fatalf("a keyless POST read and dropped by the server: %v, want UNKNOWN_OUTCOME", err)
	}
}

// Finding 5: an unknown outcome stays unknown. A slow answer (a timeout:
// the write may have happened), then 503, 503, ends UNKNOWN_OUTCOME, dead-
// lettered with all three attempts, through a real server with slow headers.
func TestAnUnknownOutcomeIsNotForgotten(t *testing.T) {
	for name, later := range map[string]int{"timeout → 503 → 503": 503, "timeout → 400": 400} {
		t.Run(name, func(t *testing.T) {
			var n atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				if n.Add(1) == 1 {
					select { // headers later than perAttemptTimeout
					case <-r.Context().Done():
					case <-time.After(5 * time.Second):
					}
					return
				}
				w.WriteHeader(later)
			}))
			defer srv.Close()
			p := smsPolicy()
			p.Policy.PerAttemptTimeout = d("200ms")
			l := newLoop(t, p, nil)
			res, err := l.post(t, srv.URL, strings.NewReader(`{"to":"+15550100"}`))
			var re *Error
			if res != nil || !errors.As(err, &re) || re.State != UnknownOutcome {
				t.Fatalf("%v %v, want UNKNOWN_OUTCOME", res, err)
			}
			letters := l.letters.all()
			if len(letters) != 1 || letters[0].State != UnknownOutcome || len(letters[0].Attempts) != int(n.Load()) {
				t.Fatalf("dead letters %+v after %d requests", letters, n.Load())
			}
			if ev := letters[0].Attempts[0].Evidence; ev.Transport != limits.Timeout || !ev.Dispatched {
				t.Errorf("first attempt %+v", ev)
			}
			if pr := re.Problem(); pr.Status != http.StatusAccepted {
				t.Errorf("an unknown outcome is rendered %d, want 202 Accepted (pending reconciliation)", pr.Status)
			}
		})
	}
}

// stallAfterRead is a server that reads the whole request, says so on read,
// and then answers nothing until the client goes away: the request may have
// been applied.
func stallAfterRead(t *testing.T) (*httptest.Server, chan struct{}, *atomic.Int32) {
	read := make(chan struct{}, 8)
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		n.Add(1)
		read <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	t.Cleanup(srv.Close)
	return srv, read, &n
}

// Issue 18, item 5: "Once an attempt may have been applied, the operation
// ends UNKNOWN_OUTCOME unless a later attempt succeeds ... whatever stops
// it." The caller cancels after the server read the request (its headers and
// body were written): the outcome is unknown, not a definite failure.
func TestTheCallersCancelAfterTheServerReadIsUnknown(t *testing.T) {
	srv, read, _ := stallAfterRead(t)
	l := newLoop(t, smsPolicy(), nil)
	ctx, cancel := context.WithCancel(WithVars(t.Context(), smsVars))
	defer cancel()
	go func() { <-read; cancel() }()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{"to":"+15550100"}`))
	_, err := l.rt.RoundTrip(req)
	var re *Error
	if !errors.As(err, &re) || re.State != UnknownOutcome {
		t.Fatalf("cancelled after the server read the request: %v; want UNKNOWN_OUTCOME", err)
	}
	letters := l.letters.all()
	if len(letters) != 1 || letters[0].State != UnknownOutcome || !letters[0].Attempts[0].Evidence.Dispatched {
		t.Fatalf("dead letters %+v", letters)
	}
}

// The same through Do: an operation that issued a real POST, which the
// server read, and whose caller then cancelled. The error is the caller's
// own context.Canceled, which no transport name covers.
func TestDoTheCallersCancelAfterTheServerReadIsUnknown(t *testing.T) {
	srv, read, _ := stallAfterRead(t)
	p := smsPolicy()
	letters := &memoryLetters{}
	ex := New(staticSource{p.Policy.Name: p}, WithClock(clock.NewVirtual(epoch)), WithDeadLetters(letters))
	warm(ex, p.Policy.Name, 30)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { <-read; cancel() }()
	err := ex.Do(ctx, p.Policy.Name, smsVars, func(ctx context.Context, a Attempt) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("{}"))
		req.Header.Set(a.Header, a.Key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_ = res.Body.Close()
		return nil
	})
	var re *Error
	if !errors.As(err, &re) || re.State != UnknownOutcome {
		t.Fatalf("Do, cancelled after the server read the request: %v; want UNKNOWN_OUTCOME", err)
	}
}

// The caller's deadline during an attempt after the server read the request
// ends UNKNOWN_OUTCOME too.
func TestTheCallersDeadlineAfterTheServerReadIsUnknown(t *testing.T) {
	srv, _, _ := stallAfterRead(t)
	l := newLoop(t, smsPolicy(), nil)
	ctx, cancel := context.WithTimeout(WithVars(t.Context(), smsVars), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{"to":"+15550100"}`))
	_, err := l.rt.RoundTrip(req)
	var re *Error
	if !errors.As(err, &re) || re.State != UnknownOutcome {
		t.Fatalf("caller's deadline after the server read the request: %v; want UNKNOWN_OUTCOME", err)
	}
}

// A caller that gave up before the request left is not an unknown outcome:
// the RoundTripper never handed the attempt to the transport, which is proof
// that nothing was sent.
func TestACancelBeforeTheRequestLeftIsNotUnknown(t *testing.T) {
	srv, _, n := stallAfterRead(t)
	l := newLoop(t, smsPolicy(), nil)
	ctx, cancel := context.WithCancel(WithVars(t.Context(), smsVars))
	cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{"to":"+15550100"}`))
	_, err := l.rt.RoundTrip(req)
	var re *Error
	if !errors.As(err, &re) || re.State != TerminalExhausted || n.Load() != 0 {
		t.Fatalf("cancelled before the first attempt: %v after %d requests; want TERMINAL_EXHAUSTED and none sent", err, n.Load())
	}
	if letters := l.letters.all(); len(letters) != 1 || letters[0].Attempts[0].Evidence.Dispatched {
		t.Fatalf("dead letters %+v", letters)
	}
}

// Issue 18, item 5, and docs/runtime.md's Decision row 4 ("unrecognized
// transport failure ... after dispatch: UNKNOWN_OUTCOME"): a failure after
// the server read (and may have applied) the request that is neither a
// reset nor a timeout. Over HTTP/1.1 the server answers garbage after
// reading; over h2c its handler aborts after reading, and the stream is
// reset (INTERNAL_ERROR). Either way the outcome is unknown.
func TestAnUnnamedFailureAfterTheServerReadIsUnknown(t *testing.T) {
	for name, h2 := range map[string]bool{"HTTP/1.1 malformed response": false, "h2c stream reset after read": true} {
		t.Run(name, func(t *testing.T) {
			var n atomic.Int32
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				n.Add(1) // applied
				if h2 {
					panic(http.ErrAbortHandler)
				}
				conn, bufw, err := w.(http.Hijacker).Hijack()
				if err == nil {
					_, _ = bufw.WriteString("HTTP/1.1 2O1 Created\r\n\r\n")
					_ = bufw.Flush()
					_ = conn.Close()
				}
			}))
			tr := &http.Transport{}
			if h2 {
				srv.Config.Protocols = new(http.Protocols)
				srv.Config.Protocols.SetUnencryptedHTTP2(true)
				tr.Protocols = new(http.Protocols)
				tr.Protocols.SetUnencryptedHTTP2(true)
			}
			srv.Start()
			defer srv.Close()
			defer tr.CloseIdleConnections()
			l := newLoop(t, smsPolicy(), tr)
			_, err := l.post(t, srv.URL, strings.NewReader(`{"to":"+15550100"}`))
			var re *Error
			if !errors.As(err, &re) || re.State != UnknownOutcome {
				t.Fatalf("applied %d time(s), then: %v; want UNKNOWN_OUTCOME", n.Load(), err)
			}
		})
	}
}

// docs/runtime.md, "504" and "502", through the RoundTripper: a listed 504
// or 502 retried to the end, and an unlisted one, end UNKNOWN_OUTCOME; a
// keyless POST is not replayed after a listed one.
func TestA502IsAmbiguousLikeA504(t *testing.T) {
	for name, tc := range map[string]struct {
		code          int
		listed, keyed bool
		sent          int
	}{
		"504 listed, keyed": {504, true, true, 3}, "504 unlisted, keyed": {504, false, true, 1}, "504 listed, keyless POST": {504, true, false, 1},
		"502 listed, keyed": {502, true, true, 3}, "502 unlisted, keyed": {502, false, true, 1}, "502 listed, keyless POST": {502, true, false, 1},
	} {
		t.Run(name, func(t *testing.T) {
			srv, s := server(t, tc.code)
			p := smsPolicy()
			p.Policy.RetryOnStatus = []int32{429, 503}
			if tc.listed {
				p.Policy.RetryOnStatus = append(p.Policy.RetryOnStatus, int32(tc.code))
			}
			if !tc.keyed {
				p.Policy.Operation, p.Policy.KeyTemplate = "GET /v1/status", ""
			}
			l := newLoop(t, p, nil)
			_, err := l.post(t, srv.URL, strings.NewReader("{}"))
			var re *Error
			if !errors.As(err, &re) || re.State != UnknownOutcome || len(s.keys) != tc.sent {
				t.Fatalf("%v after %d requests", err, len(s.keys))
			}
		})
	}
}

// Finding 6: proven non-dispatch retries a keyless POST. A dependency in a
// rolling restart refuses the first connection; the policy retries only
// refused and DNS failures, and the second attempt is applied once.
func TestARefusedConnectionRetriesAKeylessPOST(t *testing.T) {
	srv, s := server(t, 201)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := closed.Addr().String()
	_ = closed.Close()
	var dials atomic.Int32
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dials.Add(1) == 1 {
			addr = refusedAddr // the pod that is restarting
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	defer tr.CloseIdleConnections()
	p := smsPolicy()
	p.Policy.KeyTemplate, p.Policy.RetryOnStatus, p.Policy.RetryOnErrors = "", nil, []string{limits.ConnectionRefused, limits.DNSFailure}
	l := newLoop(t, p, tr)
	res, err := l.post(t, srv.URL, strings.NewReader(`{"to":"+15550100"}`))
	if err != nil || res.StatusCode != 201 {
		t.Fatalf("%v %v", res, err)
	}
	_ = res.Body.Close()
	if len(s.keys) != 1 || l.attempts() != 2 {
		t.Fatalf("applied %d times in %d attempts", len(s.keys), l.attempts())
	}
}

// Item 2: a body over the buffering bound, which net/http cannot rewind,
// gets one attempt and arrives whole; one with GetBody is re-read through it.
func TestABodyOverTheBufferingBoundIsSentOnce(t *testing.T) {
	body := payload(4096)
	var got [][]byte
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, b)
		mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	for name, tc := range map[string]struct {
		body     func() io.Reader
		attempts int
	}{
		"streamed, over the bound": {func() io.Reader {
			pr, pw := io.Pipe()
			go func() { _, _ = pw.Write(body); _ = pw.Close() }()
			return pr
		}, 1},
		"with GetBody, over the bound": {func() io.Reader { return bytes.NewReader(body) }, 3},
	} {
		mu.Lock()
		got = nil
		mu.Unlock()
		l := newLoop(t, smsPolicy(), nil)
		l.rt.MaxBufferedBody = 1024
		_, err := l.post(t, srv.URL, tc.body())
		var re *Error
		if !errors.As(err, &re) || re.Code != codes.RetryLimitExceeded || re.Attempts != tc.attempts {
			t.Fatalf("%s: %v, want ERR_RETRY_LIMIT_EXCEEDED after %d attempts", name, err, tc.attempts)
		}
		if tc.attempts == 1 && !strings.Contains(re.Detail, "buffering bound") {
			t.Errorf("%s: the error does not say why: %s", name, re.Detail)
		}
		mu.Lock()
		for i, b := range got {
			if !bytes.Equal(b, body) {
				t.Errorf("%s: attempt %d sent %d bytes, want %d", name, i+1, len(b), len(body))
			}
		}
		mu.Unlock()
	}
}

// Issue 18, item 2: "A body is buffered up to a documented, configurable
// bound", and the caller's body is sent whole. A bound of math.MaxInt64
// ("buffer anything") overflows limit+1 in keepBody: io.LimitReader with a
// negative limit reads nothing, and the POST is sent with an empty body.
func TestTheLargestBufferingBoundStillSendsTheBody(t *testing.T) {
	srv, s := server(t, 201)
	l := newLoop(t, smsPolicy(), nil)
	l.rt.MaxBufferedBody = math.MaxInt64
	res, err := l.post(t, srv.URL, io.MultiReader(strings.NewReader(`{"to":"+15550100"}`)))
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if len(s.bodies) != 1 || s.bodies[0] != `{"to":"+15550100"}` {
		t.Fatalf("MaxBufferedBody = math.MaxInt64: the server received bodies %q", s.bodies)
	}
}

// Issue 18, item 2: "a body ... that cannot be re-read, gets one attempt".
// A GetBody that fails on the retry: nothing is sent, so no retry token is
// spent for it, no second attempt is counted, and the operation ends saying
// the body could not be re-read (ERR_RETRY_LIMIT_EXCEEDED, reason
// unrepeatable), not with ERR_PERMANENT_FAILURE.
func TestAGetBodyThatFailsSpendsNoToken(t *testing.T) {
	srv, s := server(t, 503, 201)
	l := newLoop(t, smsPolicy(), nil)
	b, _ := l.ex.Budget(smsPolicy().Policy.Name)
	req, _ := http.NewRequestWithContext(WithVars(t.Context(), smsVars), http.MethodPost, srv.URL, strings.NewReader("{}"))
	req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("the body is gone") }
	before := b.Tokens()
	_, err := l.client.Do(req)
	spent := before - b.Tokens()
	if n := l.attempts(); n != 1 {
		t.Errorf("%d attempts counted for 1 sent", n)
	}
	if len(s.keys) != 1 || spent > 0.5 {
		t.Fatalf("a body that cannot be re-read: %d sent, %.1f tokens spent for an attempt that never left", len(s.keys), spent)
	}
	var re *Error
	if !errors.As(err, &re) || re.Code != codes.RetryLimitExceeded || re.Attempts != 1 || !strings.Contains(re.Detail, "could not be re-read") {
		t.Fatalf("a body that cannot be re-read: %v, want ERR_RETRY_LIMIT_EXCEEDED after 1 attempt, saying so", err)
	}
}

// Item 9: a 3xx is a success for the RoundTripper, and http.Client follows
// it with a new logical operation that carries the same key.
func TestARedirectIsFollowedByTheClient(t *testing.T) {
	var keys []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.URL.Path+" "+r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		if r.URL.Path == "/old" {
			http.Redirect(w, r, "/new", http.StatusFound)
			return
		}
		_, _ = io.WriteString(w, "moved here")
	}))
	defer srv.Close()
	l := newLoop(t, smsPolicy(), nil)
	req, _ := http.NewRequestWithContext(WithVars(t.Context(), smsVars), http.MethodGet, srv.URL+"/old", nil)
	res, err := l.client.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("%v %v", res, err)
	}
	b, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if string(b) != "moved here" || len(keys) != 2 || keys[0] != "/old SMS-2FA-42-s-9" || keys[1] != "/new SMS-2FA-42-s-9" {
		t.Fatalf("body %q, requests %q", b, keys)
	}
}

// net/http: "For a 101 Switching Protocols response, Body is an
// io.ReadWriteCloser" (RoundTripper contract, used by WebSocket and SPDY
// clients). The RoundTripper hands it over unwrapped, and its attempt's
// context ends without touching the upgraded connection.
func TestASwitchingProtocolsBodyIsTheConnection(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, bufw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = bufw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		_ = bufw.Flush()
		buf := make([]byte, 4)
		if _, err := io.ReadFull(bufw, buf); err == nil {
			_, _ = conn.Write(buf)
		}
	}))
	defer srv.Close()
	p := smsPolicy()
	p.Policy.Operation, p.Policy.KeyTemplate = "GET /v1/stream", ""
	l := newLoop(t, p, nil)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	res, err := l.client.Do(req)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("%v %v", res, err)
	}
	defer res.Body.Close()
	rw, ok := res.Body.(io.ReadWriteCloser)
	if !ok {
		t.Fatalf("a 101 response's body is %T, not an io.ReadWriteCloser", res.Body)
	}
	// The attempt has ended (its timer with it), and the connection the
	// caller now owns still carries bytes both ways.
	echo := make([]byte, 4)
	if _, err := rw.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(rw, echo); err != nil || string(echo) != "ping" {
		t.Fatalf("echo %q, %v", echo, err)
	}
}

// Item 9: the same over h2c (HTTP/2 without TLS), where the transport keeps
// one connection for every attempt.
func TestARoundTripperOverH2C(t *testing.T) {
	var n atomic.Int32
	body := payload(1 << 20)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if r.ProtoMajor != 2 {
			w.WriteHeader(http.StatusHTTPVersionNotSupported)
			return
		}
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	})
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	defer srv.Close()
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	l := newLoop(t, smsPolicy(), tr)
	res, err := l.post(t, srv.URL, strings.NewReader(`{"to":"+15550100"}`))
	if err != nil || res.StatusCode != 201 || res.ProtoMajor != 2 {
		t.Fatalf("%v %v", res, err)
	}
	got, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil || !bytes.Equal(got, body) || n.Load() != 2 {
		t.Fatalf("read %d bytes (%v) after %d requests", len(got), err, n.Load())
	}
}

// Item 9: connections dropped before the server read the request: the
// client wrote the headers, so the attempt is dispatched (it may have been
// read), and each arrival is an attempt the executor counted.
func TestADropBeforeTheRequestIsReadIsCounted(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			_ = conn.(*net.TCPConn).SetLinger(0) // a reset, not a clean close
			_ = conn.Close()
		}
	}()
	l := newLoop(t, smsPolicy(), &http.Transport{})
	_, err = l.post(t, "http://"+ln.Addr().String(), strings.NewReader(`{"to":"+15550100"}`))
	var re *Error
	if !errors.As(err, &re) || re.Attempts != 3 || int(accepted.Load()) != re.Attempts || l.attempts() != 3 {
		t.Fatalf("%v: %d connections for %d attempts", err, accepted.Load(), l.attempts())
	}
}

// A caller's own httptrace hooks still run: the RoundTripper's are composed
// with them (and, since composing rewrites them, never pooled).
func TestACallersTraceStillRuns(t *testing.T) {
	srv, _ := server(t, 503, 201)
	l := newLoop(t, smsPolicy(), nil)
	var wrote atomic.Int32
	ctx := httptrace.WithClientTrace(WithVars(t.Context(), smsVars), &httptrace.ClientTrace{WroteHeaders: func() { wrote.Add(1) }})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("{}"))
	res, err := l.client.Do(req)
	if err != nil || res.StatusCode != 201 {
		t.Fatalf("%v %v", res, err)
	}
	_ = res.Body.Close()
	if wrote.Load() != 2 || l.attempts() != 2 {
		t.Fatalf("the caller's hook saw %d sends of %d attempts", wrote.Load(), l.attempts())
	}
}

// The RoundTripper is safe for concurrent use: many callers, one executor,
// retries and pooled hooks, under -race.
func TestARoundTripperIsSafeForConcurrentUse(t *testing.T) {
	var seenKeys sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		key := r.Header.Get("Idempotency-Key")
		if _, again := seenKeys.LoadOrStore(key, true); !again && len(key)%2 == 0 {
			w.WriteHeader(http.StatusServiceUnavailable) // half the operations retry once
			return
		}
		_, _ = io.WriteString(w, key)
	}))
	defer srv.Close()
	p := smsPolicy()
	p.Policy.KeyTemplate = "K-{id}"
	l := newLoop(t, p, nil)
	warm(l.ex, p.Policy.Name, 300)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 10 {
				key := fmt.Sprintf("%d-%d", g, i)
				req, _ := http.NewRequestWithContext(WithVars(t.Context(), Vars{"id": key}), http.MethodPost, srv.URL, strings.NewReader(key))
				res, err := l.client.Do(req)
				if err != nil {
					var re *Error
					if errors.As(err, &re) && re.Code == codes.RetryBudgetExhausted {
						continue
					}
					t.Error(err)
					return
				}
				body, _ := io.ReadAll(res.Body)
				_ = res.Body.Close()
				if string(body) != "K-"+key {
					t.Errorf("request %s got %q", key, body)
				}
			}
		})
	}
	wg.Wait()
}

// sleepHook calls before at the start of every backoff sleep.
type sleepHook struct {
	*clock.Virtual
	before func()
}

func (s sleepHook) Sleep(ctx context.Context, d time.Duration) error {
	s.before()
	return s.Virtual.Sleep(ctx, d)
}

func must(req *http.Request, err error) *http.Request {
	if err != nil {
		panic(err)
	}
	return req
}
