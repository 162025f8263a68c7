package retry

// Faults through real net/http servers on loopback that the RoundTripper
// must count and classify: HTTP/2's own retries (a hand-written h2 server),
// net/http's re-send after a caller's own key, the attempts metric, a cancel
// during the backoff, and no goroutine outliving an operation.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/retryguard/retryguard/contract/limits"
	"github.com/retryguard/retryguard/runtime/clock"
)

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
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() { // no server goroutine outlives the test
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	serve := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
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
func TestHTTP2sOwnRetriesAreCounted(t *testing.T) {
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
func TestNoGoroutineOutlivesTheOperation(t *testing.T) {
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

// A keyless POST under a keyless policy that
// retries only refused connects, whose caller set its own Idempotency-Key
// (which makes net/http treat it as replayable), is applied once after a
// keep-alive connection drops after the server read it.
func TestACallersOwnKeyDoesNotLetNetHTTPReSend(t *testing.T) {
	for _, body := range []string{"", `{"to":"+15550100"}`} {
		srv, got := keepAlive(t, false)
		p := smsPolicy()
		p.Policy.KeyTemplate, p.Policy.RetryOnStatus, p.Policy.RetryOnErrors = "", nil, []string{limits.ConnectionRefused, limits.DNSFailure}
		tr := &http.Transport{}
		l := newLoop(t, p, tr)
		idleConn(t, tr, srv.URL)
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, strings.NewReader(body))
		req.Header.Set("Idempotency-Key", "caller-own")
		_, err := l.client.Do(req)
		var re *Error
		if n := got.total() - 1; n != 1 || !errors.As(err, &re) || re.State != UnknownOutcome {
			t.Errorf("body %q: applied %d times, %v", body, n, err)
		}
		tr.CloseIdleConnections()
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

// "metrics of every attempt" (issue 18; RG-RETRY: "Derive ratios from
// scoped counters: attempts per logical call"): retryguard_attempts_total
// counts every request the dependency received, through net/http's refused
// re-send on a keep-alive connection and HTTP/2's refused stream.
func TestMetricsCountEveryAttemptTheDependencyReceived(t *testing.T) {
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
				idleConn(t, tr, srv.URL)
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

// A keyed POST read and dropped by the server, then the caller cancels
// during the backoff: UNKNOWN_OUTCOME, with the
// dropped attempt's evidence in the dead letter.
func TestACancelDuringBackoffAfterADropIsUnknown(t *testing.T) {
	srv, got := dropAfterRead(t)
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
