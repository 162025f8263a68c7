package retry

// Review probes for issue 18 (the HTTP part): each test reads one sentence
// of the issue or the seeds and tries to break it through real net/http
// servers on loopback, or through Do.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/retryguard/retryguard/runtime/clock"
)

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
func TestReviewCallerCancelAfterHeadersWrittenIsUnknown(t *testing.T) {
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
// server read, and whose caller then cancelled.
func TestReviewDoCallerCancelAfterTheServerReadIsUnknown(t *testing.T) {
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

// Sanity (expected to hold): the caller's deadline during an attempt after
// the server read the request ends UNKNOWN_OUTCOME.
func TestReviewCallerDeadlineAfterHeadersWrittenIsUnknown(t *testing.T) {
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
func TestReviewNoTraceIsNoProofOfNonDispatch(t *testing.T) {
	var got arrivals
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		got.add(r)
		hangUp(w)
	}))
	defer srv.Close()
	p := smsPolicy()
	p.Policy.Operation, p.Policy.KeyTemplate = "GET /v1/status", ""
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	l := newLoop(t, p, detached{tr})
	l.ex = New(staticSource{p.Policy.Name: p}, WithClock(clock.Real{}), WithDeadLetters(l.letters), WithEventSink(l.events))
	warm(l.ex, p.Policy.Name, 30)
	l.rt.Executor = l.ex
	// A caller's deadline shorter than the policy's 4 s: the attempt then runs
	// on the caller's context, where a live context and no WroteHeaders
	// count as proof that nothing left.
	ctx, cancel := context.WithTimeout(WithVars(t.Context(), smsVars), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{"to":"+15550100"}`))
	_, err := l.client.Do(req)
	if got.total() != 1 {
		t.Fatalf("a keyless POST after a drop was applied %d times (%v)", got.total(), err)
	}
}

// Bad input gets a clear error, never a panic (GUIDE): a request without a
// Header map (http.Transport answers "http: nil Request.Header") and one
// without a URL ("http: nil Request.URL").
func TestReviewOddRequestsDoNotPanic(t *testing.T) {
	u, _ := url.Parse("http://127.0.0.1:1/")
	for name, req := range map[string]*http.Request{
		"nil Header, keyed policy": {Method: http.MethodPost, URL: u},
		"nil URL":                  {Method: http.MethodGet, Header: http.Header{}},
	} {
		t.Run(name, func(t *testing.T) {
			l := newLoop(t, smsPolicy(), nil)
			req = req.WithContext(WithVars(t.Context(), smsVars))
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("RoundTrip panicked: %v", r)
					}
				}()
				_, _ = l.rt.RoundTrip(req)
			}()
		})
	}
}

// h2 frames, written by hand: a server of HTTP/2 with prior knowledge that
// refuses (REFUSED_STREAM) or sends GOAWAY for the first stream it
// receives, after reading its HEADERS, and answers 200 to every other.
const (
	h2Data, h2Headers, h2RST, h2Settings, h2GoAway = 0x0, 0x1, 0x3, 0x4, 0x7
)

func h2Frame(w io.Writer, typ, flags byte, stream uint32, payload []byte) error {
	hdr := make([]byte, 9, 9+len(payload))
	hdr[0], hdr[1], hdr[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	hdr[3], hdr[4] = typ, flags
	binary.BigEndian.PutUint32(hdr[5:], stream)
	_, err := w.Write(append(hdr, payload...))
	return err
}

func h2Server(t *testing.T, first string) (string, *atomic.Int32) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var streams atomic.Int32
	serve := func(c net.Conn) {
		defer c.Close()
		preface := make([]byte, 24)
		if _, err := io.ReadFull(c, preface); err != nil {
			return
		}
		_ = h2Frame(c, h2Settings, 0, 0, nil)
		hdr := make([]byte, 9)
		for {
			if _, err := io.ReadFull(c, hdr); err != nil {
				return
			}
			n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
			payload := make([]byte, n)
			if _, err := io.ReadFull(c, payload); err != nil {
				return
			}
			typ, flags, stream := hdr[3], hdr[4], binary.BigEndian.Uint32(hdr[5:])&0x7fffffff
			switch {
			case typ == h2Settings && flags&1 == 0:
				_ = h2Frame(c, h2Settings, 1, 0, nil)
			case typ == h2Headers:
				if streams.Add(1) == 1 {
					switch first {
					case "REFUSED_STREAM":
						_ = h2Frame(c, h2RST, 0, stream, []byte{0, 0, 0, 7})
					case "GOAWAY":
						_ = h2Frame(c, h2GoAway, 0, 0, []byte{0, 0, 0, 0, 0, 0, 0, 0})
						time.Sleep(50 * time.Millisecond)
						return
					}
					continue
				}
				_ = h2Frame(c, h2Headers, 0x4|0x1, stream, []byte{0x88}) // :status 200, END_STREAM
			}
		}
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return "http://" + ln.Addr().String(), &streams
}

// Issue 18, item 4: "Every attempt the dependency receives is counted."
// HTTP/2 retries a refused stream and a stream beyond a GOAWAY by itself
// (h2_bundle.go, RoundTripOpt and shouldRetryRequest), without calling
// GetBody for a body-less request: each HEADERS the server read must be an
// attempt the executor counted.
func TestReviewHTTP2OwnRetriesAreCounted(t *testing.T) {
	for _, first := range []string{"REFUSED_STREAM", "GOAWAY"} {
		for _, tc := range []struct {
			method string
			body   string
		}{{http.MethodGet, ""}, {http.MethodPost, `{"to":"+15550100"}`}, {http.MethodPost, ""}} {
			t.Run(fmt.Sprintf("%s %s body %q", first, tc.method, tc.body), func(t *testing.T) {
				url, streams := h2Server(t, first)
				tr := &http.Transport{Protocols: new(http.Protocols)}
				tr.Protocols.SetUnencryptedHTTP2(true)
				defer tr.CloseIdleConnections()
				l := newLoop(t, smsPolicy(), tr)
				var body io.Reader
				if tc.body != "" {
					body = strings.NewReader(tc.body)
				}
				req, _ := http.NewRequestWithContext(WithVars(t.Context(), smsVars), tc.method, url, body)
				res, err := l.client.Do(req)
				if err == nil {
					_ = res.Body.Close()
				}
				if got, n := int(streams.Load()), l.attempts(); got != n || got < 2 {
					t.Fatalf("the server read %d requests; the executor counted %d attempts (%v)", got, n, err)
				}
			})
		}
	}
}

// Issue 18, item 1: "Its attempt's context and timer end then" (at EOF or
// Close), and discarded attempts end at once: no goroutine outlives a
// delivered response that was closed, an operation that failed after a
// keep-alive drop and net/http's refused re-send, or a caller's cancel.
func TestReviewNoGoroutineOutlivesTheOperation(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv, _ := keepAlive(t, false)
	tr := &http.Transport{}
	l := newLoop(t, smsPolicy(), tr)
	for range 3 {
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			req, _ := http.NewRequestWithContext(WithVars(t.Context(), smsVars), m, srv.URL, nil)
			res, err := l.client.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
				_ = res.Body.Close()
			}
		}
	}
	tr.CloseIdleConnections()
	srv.Close()
}

// Issue 18, item 2: "A body is buffered up to a documented, configurable
// bound", and the caller's body is sent whole. A bound of math.MaxInt64
// ("buffer anything") overflows limit+1 in keepBody: io.LimitReader with a
// negative limit reads nothing, and the POST is sent with an empty body.
func TestReviewALargestBufferingBoundStillSendsTheBody(t *testing.T) {
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

// Sanity (expected to hold): a keyless POST under a keyless policy that
// retries only refused connects, whose caller set its own Idempotency-Key
// (which makes net/http treat it as replayable), is applied once after a
// keep-alive connection drops after the server read it.
func TestReviewACallersOwnKeyDoesNotLetNetHTTPResend(t *testing.T) {
	for _, body := range []string{"", `{"to":"+15550100"}`} {
		srv, got := keepAlive(t, false)
		p := smsPolicy()
		p.Policy.KeyTemplate, p.Policy.RetryOnStatus, p.Policy.RetryOnErrors = "", nil, []string{ConnectionRefused, DNSFailure}
		tr := &http.Transport{}
		l := newLoop(t, p, tr)
		res, err := tr.RoundTrip(must(http.NewRequest(http.MethodGet, srv.URL, nil)))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, strings.NewReader(body))
		req.Header.Set("Idempotency-Key", "caller-own")
		_, err = l.client.Do(req)
		var re *Error
		if n := got.total() - 1; n != 1 || !errors.As(err, &re) || re.State != UnknownOutcome {
			t.Errorf("body %q: applied %d times, %v", body, n, err)
		}
		tr.CloseIdleConnections()
	}
}

// Bad input gets a clear error, never a panic: a RoundTripper without an
// Executor.
func TestReviewARoundTripperWithoutAnExecutorDoesNotPanic(t *testing.T) {
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("RoundTrip panicked: %v", r)
		}
	}()
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:1/", nil)
	_, err := (&RoundTripper{Policy: "p", Base: &http.Transport{}}).RoundTrip(req)
	if err == nil {
		t.Fatal("no error")
	}
}

// Issue 18, item 5, and docs/runtime.md's Decision row 4 ("unrecognized
// transport failure ... after dispatch: UNKNOWN_OUTCOME"): a failure after
// the server read (and may have applied) the request that is neither a
// reset nor a timeout. Over HTTP/1.1 the server answers garbage after
// reading; over h2c its handler aborts after reading, and the stream is
// reset (INTERNAL_ERROR). Either way the outcome is unknown.
func TestReviewAnUnnamedFailureAfterTheServerReadIsUnknown(t *testing.T) {
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

// attemptsCounted sums retryguard_attempts_total over its classes.
func attemptsCounted(t *testing.T, reg *prometheus.Registry) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "retryguard_attempts_total" {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return int(total)
}

// "metrics of every attempt" (issue 18; seed 002: "Derive ratios from
// scoped counters: attempts per logical call"): retryguard_attempts_total
// counts every request the dependency received, through net/http's refused
// re-send on a keep-alive connection and HTTP/2's refused stream.
func TestReviewMetricsCountEveryAttemptTheDependencyReceived(t *testing.T) {
	for _, name := range []string{"keep-alive drop", "h2 REFUSED_STREAM"} {
		t.Run(name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			p := smsPolicy()
			ex := New(staticSource{p.Policy.Name: p}, WithClock(clock.NewVirtual(epoch)), WithMetrics(NewMetrics(reg)))
			warm(ex, p.Policy.Name, 30)
			before := attemptsCounted(t, reg)
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			var url string
			var arrived func() int
			if name == "keep-alive drop" {
				srv, got := keepAlive(t, false)
				res, err := tr.RoundTrip(must(http.NewRequest(http.MethodGet, srv.URL, nil)))
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, res.Body)
				_ = res.Body.Close()
				url, arrived = srv.URL, func() int { return got.total() - 1 }
			} else {
				u, streams := h2Server(t, "REFUSED_STREAM")
				tr.Protocols = new(http.Protocols)
				tr.Protocols.SetUnencryptedHTTP2(true)
				url, arrived = u, func() int { return int(streams.Load()) }
			}
			c := &http.Client{Transport: &RoundTripper{Executor: ex, Policy: p.Policy.Name, Base: tr}}
			req, _ := http.NewRequestWithContext(WithVars(t.Context(), smsVars), http.MethodPost, url, nil)
			res, err := c.Do(req)
			if err == nil {
				_ = res.Body.Close()
			}
			if counted := attemptsCounted(t, reg) - before; counted != arrived() {
				t.Fatalf("the dependency received %d requests; retryguard_attempts_total counted %d (%v)", arrived(), counted, err)
			}
		})
	}
}

// net/http: "For a 101 Switching Protocols response, Body is an
// io.ReadWriteCloser" (RoundTripper contract, used by WebSocket and SPDY
// clients). The RoundTripper's releasing wrapper must keep it writable.
func TestReviewASwitchingProtocolsBodyStaysWritable(t *testing.T) {
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
	if _, ok := res.Body.(io.ReadWriteCloser); !ok {
		t.Fatalf("a 101 response's body is %T, not an io.ReadWriteCloser", res.Body)
	}
}

// Sanity (expected to hold): a keyed POST read and dropped by the server,
// then the caller cancels during the backoff: UNKNOWN_OUTCOME, with the
// dropped attempt's evidence in the dead letter.
func TestReviewCancelDuringBackoffAfterADropIsUnknown(t *testing.T) {
	var got arrivals
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		got.add(r)
		hangUp(w)
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(WithVars(t.Context(), smsVars))
	defer cancel()
	p := smsPolicy()
	letters := &memoryLetters{}
	ex := New(staticSource{p.Policy.Name: p}, WithDeadLetters(letters),
		WithClock(sleepHook{Virtual: clock.NewVirtual(epoch), before: cancel}))
	warm(ex, p.Policy.Name, 30)
	c := &http.Client{Transport: &RoundTripper{Executor: ex, Policy: p.Policy.Name, Base: &http.Transport{DisableKeepAlives: true}}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("{}"))
	_, err := c.Do(req)
	var re *Error
	if !errors.As(err, &re) || re.State != UnknownOutcome || got.total() != 1 {
		t.Fatalf("%v after %d arrivals", err, got.total())
	}
	if l := letters.all(); len(l) != 1 || len(l[0].Attempts) != 1 || !l[0].Attempts[0].Evidence.Dispatched {
		t.Fatalf("dead letters %+v", l)
	}
}

// Issue 18, item 2: "a body ... that cannot be re-read, gets one attempt".
// A GetBody that fails on the retry: nothing is sent, so no retry token
// should be spent for it, and the attempt that never left is not one the
// dependency received.
func TestReviewAGetBodyThatFailsSpendsNoToken(t *testing.T) {
	srv, s := server(t, 503, 201)
	l := newLoop(t, smsPolicy(), nil)
	b, _ := l.ex.Budget(smsPolicy().Policy.Name)
	req, _ := http.NewRequestWithContext(WithVars(t.Context(), smsVars), http.MethodPost, srv.URL, strings.NewReader("{}"))
	req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("the body is gone") }
	before := b.Tokens()
	_, err := l.client.Do(req)
	spent := before - b.Tokens()
	t.Logf("%v; %d sent, %.1f tokens spent, %d attempts", err, len(s.keys), spent, l.attempts())
	if len(s.keys) != 1 || spent > 0.5 {
		t.Fatalf("a body that cannot be re-read: %d sent, %.1f tokens spent for an attempt that never left", len(s.keys), spent)
	}
}

// Issue 18, finding 4, through Do (README: "Any operation: ex.Do(...,
// func(ctx, a) error { return send(ctx, a.Key) })"): an operation that
// sends with net/http and the attempt's key. A reused keep-alive connection
// drops after the server read the request; net/http re-sends it by itself
// (the key makes it replayable), that re-send is refused, and Do takes the
// refusal as proof that the request never left. "If that hidden re-send is
// refused, every attempt is recorded dispatched=false and the operation ends
// TERMINAL_EXHAUSTED, although the SMS was sent."
func TestReviewDoWithNetHTTPRefusedReSendIsNotProofOfNonDispatch(t *testing.T) {
	srv, got := keepAlive(t, true)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	res, err := tr.RoundTrip(must(http.NewRequest(http.MethodGet, srv.URL, nil)))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	p := smsPolicy()
	letters := &memoryLetters{}
	ex := New(staticSource{p.Policy.Name: p}, WithClock(clock.NewVirtual(epoch)), WithDeadLetters(letters))
	warm(ex, p.Policy.Name, 30)
	err = ex.Do(t.Context(), p.Policy.Name, smsVars, func(ctx context.Context, a Attempt) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader(`{"to":"+15550100"}`))
		req.Header.Set(a.Header, a.Key)
		res, err := tr.RoundTrip(req)
		if err != nil {
			return err
		}
		_ = res.Body.Close()
		return nil
	})
	var re *Error
	if !errors.As(err, &re) || re.State != UnknownOutcome {
		l := letters.all()
		t.Fatalf("the SMS reached the dependency (%d arrivals), then: %v; dead letter %+v; want UNKNOWN_OUTCOME", got.total()-1, err, l)
	}
}

// Issue 18, item 1: "Discarded attempts are cancelled at once"; seed 002:
// "Release failed transaction/connection scopes before external dependency
// backoff". A 503 that declares a short body (within discard's 4 KiB drain)
// but sends it slowly holds the operation in discard until the attempt's
// timer ends, which here is the whole deadline: the retry it earned never
// happens.
func TestReviewASlowSmallBodyDoesNotHoldTheRetry(t *testing.T) {
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

// Sanity (expected to hold), docs/runtime.md "504": a listed 504 retried
// to the end, and an unlisted one, end UNKNOWN_OUTCOME; a keyless POST is
// not replayed after a listed 504.
func TestReviewA504IsAmbiguousAsDocumented(t *testing.T) {
	for name, tc := range map[string]struct {
		listed, keyed bool
		sent          int
	}{"listed, keyed": {true, true, 3}, "unlisted, keyed": {false, true, 1}, "listed, keyless POST": {true, false, 1}} {
		t.Run(name, func(t *testing.T) {
			srv, s := server(t, 504)
			p := smsPolicy()
			if !tc.listed {
				p.Policy.RetryOnStatus = []int32{429, 503}
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
