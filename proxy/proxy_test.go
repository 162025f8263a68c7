package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/limits"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
	"github.com/retryguard/retryguard/runtime/deadletter"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
)

// seen is one request the upstream received.
type seen struct {
	Method, Path, Query, Host, Key, Body string
	TLS                                  bool
	VarHeaders                           int
}

// upstream is a real TLS server on loopback answering from a script of
// handlers (then 201), recording every request.
type upstream struct {
	*httptest.Server
	mu     sync.Mutex
	script []http.HandlerFunc
	seen   []seen
}

func newUpstream(t *testing.T, script ...http.HandlerFunc) *upstream {
	t.Helper()
	u := &upstream{script: script}
	u.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s := seen{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Host: r.Host, Key: r.Header.Get("Idempotency-Key"),
			Body: string(body), TLS: r.TLS != nil}
		for name := range r.Header {
			if strings.HasPrefix(name, VarHeaderPrefix) {
				s.VarHeaders++
			}
		}
		u.mu.Lock()
		u.seen = append(u.seen, s)
		var h http.HandlerFunc
		if len(u.script) > 0 {
			h, u.script = u.script[0], u.script[1:]
		}
		u.mu.Unlock()
		if h == nil {
			w.Header().Set("X-Vendor", "ok")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id":"m-1"}`)
			return
		}
		h(w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) requests() []seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seen(nil), u.seen...)
}

func status(code int, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, `{"error":"`+http.StatusText(code)+`"}`)
	}
}

// drop closes the connection after reading the request: the textbook
// ambiguous outcome.
func drop(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

var namespaces atomic.Int64

// smsPayload is RETRY-SMS-001's policy in a namespace of its own, so that no
// other test spends its budget (registries share a budget by namespace and
// name within the process).
func smsPayload(change ...func(*policyconfig.Payload)) *policyconfig.Payload {
	p := fixtures.SMS()
	p.Policy.Namespace = "proxy-" + strconv.FormatInt(namespaces.Add(1), 10)
	for _, c := range change {
		c(p)
	}
	return p
}

// harness is a proxy for one route to u under p, served on loopback, with
// its dead letters in a real journal.
type harness struct {
	proxy   *httptest.Server
	journal string
	events  *retry.ChannelSink
}

// informerLike is a Static source that states the informer's delivery
// bound, so that a fleet budget's share is decided by its count alone.
type informerLike struct{ *watch.Static }

func (informerLike) DeliveryBound() time.Duration { return policyconfig.ConsumerCountDelivery }

func newHarness(t *testing.T, u *upstream, p *policyconfig.Payload, routes ...Route) *harness {
	t.Helper()
	if len(routes) == 0 {
		routes = []Route{{Port: 15001, PathPrefix: "/", Policy: p.Policy.Name, Upstream: u.URL}}
	}
	h := &harness{journal: t.TempDir() + "/deadletters.journal", events: retry.NewChannelSink(1024)}
	j, err := deadletter.Open(h.journal)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.Close() })
	// The pool's transport trusts the test server's certificate: the proxy
	// originates TLS with the pool's own configuration.
	pools := &retry.Pools{New: func(n int) *http.Transport {
		tr := u.Client().Transport.(*http.Transport).Clone()
		tr.MaxConnsPerHost = n
		return tr
	}}
	rt := NewRuntime(informerLike{watch.NewStatic(p)}, pools, u.Client().Transport, retry.WithDeadLetters(j), retry.WithEventSink(h.events))
	px, err := rt.New(&Table{Routes: routes}, 0)
	if err != nil {
		t.Fatal(err)
	}
	h.proxy = httptest.NewServer(px)
	t.Cleanup(h.proxy.Close)
	return h
}

// send is the application's plain HTTP request to the proxy.
func (h *harness) send(t *testing.T, method, path string, header map[string]string, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, h.proxy.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(data)
}

func (h *harness) letters(t *testing.T) []retry.DeadLetter {
	t.Helper()
	l, err := deadletter.ReadAll(h.journal)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

var smsVars = map[string]string{"Retryguard-Var-User-Id": "42", "Retryguard-Var-Login-Session-Id": "s-9"}

func problemOf(t *testing.T, res *http.Response, body string) Problem {
	t.Helper()
	if ct := res.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json; body %s", ct, body)
	}
	var p Problem
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if p.Status != res.StatusCode || res.Header.Get(CodeHeader) != p.Code || res.Header.Get(AttemptsHeader) != strconv.Itoa(p.Attempts) {
		t.Fatalf("the problem's status, code and attempts %d %s %d differ from the response's %d %s %s",
			p.Status, p.Code, p.Attempts, res.StatusCode, res.Header.Get(CodeHeader), res.Header.Get(AttemptsHeader))
	}
	return p
}

// MC-FM-01 and INV-RTY-01/05 through the proxy: a 503 storm gets the
// policy's three attempts over TLS, each with the key rendered from the
// request's Retryguard-Var-* headers (removed before they leave), and the
// caller a 503 problem carrying the code; the operation is dead-lettered.
func TestAStormGetsThreeAttemptsWithOneKey(t *testing.T) {
	u := newUpstream(t, status(503), status(503), status(503), status(503))
	h := newHarness(t, u, smsPayload())
	res, body := h.send(t, http.MethodPost, "/v1/messages", smsVars, `{"to":"+15550100"}`)
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503: %s", res.StatusCode, body)
	}
	p := problemOf(t, res, body)
	if p.Code != string(codes.RetryLimitExceeded) || p.Attempts != 3 || p.State != retry.TerminalExhausted {
		t.Fatalf("problem %+v, want ERR_RETRY_LIMIT_EXCEEDED after 3 attempts, TERMINAL_EXHAUSTED", p)
	}
	got := u.requests()
	if len(got) != 3 {
		t.Fatalf("the upstream saw %d attempts, want 3: %+v", len(got), got)
	}
	for i, s := range got {
		if s.Key != "SMS-2FA-42-s-9" || !s.TLS || s.VarHeaders != 0 || s.Body != `{"to":"+15550100"}` || s.Path != "/v1/messages" {
			t.Fatalf("attempt %d: %+v; want the rendered key, over TLS, no Retryguard-Var-* header, the whole body", i+1, s)
		}
	}
	letters := h.letters(t)
	if len(letters) != 1 || letters[0].Key != "SMS-2FA-42-s-9" || len(letters[0].Attempts) != 3 || letters[0].Code != codes.RetryLimitExceeded {
		t.Fatalf("dead letters %+v, want one with the key and 3 attempts", letters)
	}
}

// INV-RTY-03: a 400 is never retried, and the caller gets the dependency's
// own answer.
func TestA400IsAnsweredAfterOneAttempt(t *testing.T) {
	u := newUpstream(t, status(400, "X-Vendor", "bad-number"))
	h := newHarness(t, u, smsPayload())
	res, body := h.send(t, http.MethodPost, "/v1/messages", smsVars, `{"to":"x"}`)
	if res.StatusCode != 400 || body != `{"error":"Bad Request"}` || res.Header.Get("X-Vendor") != "bad-number" {
		t.Fatalf("got %d %q %v, want the vendor's own 400", res.StatusCode, body, res.Header)
	}
	if n := len(u.requests()); n != 1 {
		t.Fatalf("the upstream saw %d attempts, want 1", n)
	}
	if l := h.letters(t); len(l) != 1 || l[0].Code != codes.PermanentFailure {
		t.Fatalf("dead letters %+v, want one ERR_PERMANENT_FAILURE", l)
	}
}

// A success passes through: status, headers, body, the path appended to the
// upstream's base path, the query, and the upstream's Host.
func TestASuccessIsTheDependencysAnswer(t *testing.T) {
	u := newUpstream(t)
	h := newHarness(t, u, smsPayload(), Route{Port: 15001, PathPrefix: "/v1", Policy: "sms-2fa-dispatch", Upstream: u.URL + "/base/"})
	res, body := h.send(t, http.MethodPost, "/v1/messages?dry=1", smsVars, `{}`)
	if res.StatusCode != 201 || body != `{"id":"m-1"}` || res.Header.Get("X-Vendor") != "ok" {
		t.Fatalf("got %d %q %v", res.StatusCode, body, res.Header)
	}
	got := u.requests()
	if len(got) != 1 || got[0].Path != "/base/v1/messages" || got[0].Query != "dry=1" || got[0].Host != strings.TrimPrefix(u.URL, "https://") {
		t.Fatalf("the upstream saw %+v", got)
	}
	if l := h.letters(t); len(l) != 0 {
		t.Fatalf("a success left dead letters: %+v", l)
	}
}

// The caller's own Idempotency-Key is the operation's key, on every attempt,
// and needs no variable.
func TestTheCallersOwnKeyIsKeptOnEveryAttempt(t *testing.T) {
	u := newUpstream(t, status(503), status(503))
	h := newHarness(t, u, smsPayload())
	res, body := h.send(t, http.MethodPost, "/v1/messages", map[string]string{"Idempotency-Key": "order-77"}, `{}`)
	if res.StatusCode != 201 {
		t.Fatalf("status %d: %s", res.StatusCode, body)
	}
	got := u.requests()
	if len(got) != 3 {
		t.Fatalf("attempts %+v, want 3", got)
	}
	for _, s := range got {
		if s.Key != "order-77" {
			t.Fatalf("attempt key %q, want the caller's order-77: %+v", s.Key, got)
		}
	}
}

// A key the template cannot be rendered from stops the request before any
// attempt: 400, ERR_MISSING_KEY_VARIABLE; a caller's key that is not
// printable ASCII is refused likewise (ERR_INVALID_KEY_TEMPLATE).
func TestAMissingVariableSendsNothing(t *testing.T) {
	u := newUpstream(t)
	h := newHarness(t, u, smsPayload())
	for _, tc := range []struct {
		header map[string]string
		code   codes.Code
	}{
		{map[string]string{"Retryguard-Var-User-Id": "42"}, codes.MissingKeyVariable},
		{map[string]string{"Idempotency-Key": strings.Repeat("k", limits.MaxIdempotencyKeyLength+1)}, codes.InvalidKeyTemplate},
	} {
		res, body := h.send(t, http.MethodPost, "/v1/messages", tc.header, `{}`)
		if p := problemOf(t, res, body); res.StatusCode != 400 || p.Code != string(tc.code) || p.Attempts != 0 {
			t.Fatalf("%v: %d %+v, want 400 %s", tc.header, res.StatusCode, p, tc.code)
		}
	}
	if n := len(u.requests()); n != 0 {
		t.Fatalf("the upstream saw %d requests", n)
	}
}

// MC-PO-01: a Retry-After above retryAfter.maxDelay (3 s) fails fast, never
// truncated; one within it is waited for.
func TestRetryAfterIsHonoured(t *testing.T) {
	u := newUpstream(t, status(503, "Retry-After", "4"))
	h := newHarness(t, u, smsPayload())
	res, body := h.send(t, http.MethodPost, "/v1/messages", smsVars, `{}`)
	if p := problemOf(t, res, body); res.StatusCode != 503 || p.Code != string(codes.RetryAfterTooLong) || p.Attempts != 1 {
		t.Fatalf("%d %+v, want 503 ERR_RETRY_AFTER_TOO_LONG after 1 attempt", res.StatusCode, p)
	}

	u = newUpstream(t, status(429, "Retry-After", "1"))
	h = newHarness(t, u, smsPayload())
	start := time.Now()
	res, body = h.send(t, http.MethodPost, "/v1/messages", smsVars, `{}`)
	if res.StatusCode != 201 || time.Since(start) < time.Second {
		t.Fatalf("%d %s after %v, want 201 after the 1 s the dependency asked for", res.StatusCode, body, time.Since(start))
	}
}

// Ambiguity is sticky: a connection dropped after the request was read, then
// 503s, ends UNKNOWN_OUTCOME, answered as the runtime renders it (202, for
// reconciliation from the dead letter), never as a plain failure.
func TestAnUnknownOutcomeStaysUnknown(t *testing.T) {
	u := newUpstream(t, drop, status(503), status(503))
	h := newHarness(t, u, smsPayload())
	res, body := h.send(t, http.MethodPost, "/v1/messages", smsVars, `{}`)
	p := problemOf(t, res, body)
	if res.StatusCode != http.StatusAccepted || p.State != retry.UnknownOutcome || p.Attempts != 3 || res.Header.Get(StateHeader) != string(retry.UnknownOutcome) {
		t.Fatalf("%d %+v, want 202 UNKNOWN_OUTCOME after 3 attempts", res.StatusCode, p)
	}
	if l := h.letters(t); len(l) != 1 || l[0].State != retry.UnknownOutcome {
		t.Fatalf("dead letters %+v, want one UNKNOWN_OUTCOME", l)
	}
}

// MC-PO-01's deadline and ADV-IR-01's reserve: with 1 s and a 500 ms
// reserve, an attempt that took 600 ms leaves no room for another: 504.
func TestTheDeadlineEndsIn504(t *testing.T) {
	slow := func(w http.ResponseWriter, r *http.Request) { time.Sleep(600 * time.Millisecond); status(503)(w, r) }
	u := newUpstream(t, slow, slow, slow)
	h := newHarness(t, u, smsPayload(func(p *policyconfig.Payload) {
		p.Policy.Deadline, p.Policy.RetryAfterMaxDelay = fixtures.D("1s"), fixtures.D("400ms")
	}))
	res, body := h.send(t, http.MethodPost, "/v1/messages", smsVars, `{}`)
	if p := problemOf(t, res, body); res.StatusCode != http.StatusGatewayTimeout || p.Code != string(codes.DeadlineExceeded) || p.Attempts != 1 {
		t.Fatalf("%d %+v, want 504 ERR_DEADLINE_EXCEEDED after 1 attempt", res.StatusCode, p)
	}
}

// A fleet budget whose count does not name this pod gives it no share: one
// attempt, ERR_RETRY_BUDGET_EXHAUSTED (docs/runtime.md, fleet budgets).
func TestAFleetBudgetWithoutAShareRetriesNothing(t *testing.T) {
	u := newUpstream(t, status(503), status(503))
	p := fixtures.Fleet()
	p.Policy.Namespace = "proxy-fleet"
	p.Budget.Consumers.ObservedAt = time.Now().UTC()
	h := newHarness(t, u, p)
	res, body := h.send(t, http.MethodPost, "/v1/messages", smsVars, `{}`)
	if pr := problemOf(t, res, body); res.StatusCode != 503 || pr.Code != string(codes.RetryBudgetExhausted) || pr.State != retry.BudgetExhausted {
		t.Fatalf("%d %+v, want 503 ERR_RETRY_BUDGET_EXHAUSTED", res.StatusCode, pr)
	}
	if n := len(u.requests()); n != 1 {
		t.Fatalf("the upstream saw %d attempts, want 1", n)
	}
	if l := h.letters(t); len(l) != 1 || l[0].Attempts[0].BudgetDenied != "share" {
		t.Fatalf("dead letters %+v, want the budget's denial share", l)
	}
}

// A policy the pod has not seen gets one attempt, never zero and never
// more (fail closed).
func TestAnUnknownPolicyGetsOneAttempt(t *testing.T) {
	u := newUpstream(t, status(503), status(503))
	h := newHarness(t, u, smsPayload(), Route{Port: 15001, PathPrefix: "/", Policy: "not-published", Upstream: u.URL})
	res, body := h.send(t, http.MethodPost, "/v1/messages", smsVars, `{}`)
	if p := problemOf(t, res, body); res.StatusCode != 503 || p.Code != string(codes.PolicyNotEnforced) {
		t.Fatalf("%d %+v, want 503 ERR_POLICY_NOT_ENFORCED", res.StatusCode, p)
	}
	if n := len(u.requests()); n != 1 {
		t.Fatalf("the upstream saw %d attempts, want 1", n)
	}
}

// The longest prefix of the port wins, segment by segment; a path no route
// covers is 404 ERR_NO_ROUTE and goes nowhere.
func TestRoutesMatchTheLongestPrefix(t *testing.T) {
	a, b := newUpstream(t), newUpstream(t)
	pa := smsPayload()
	h := newHarness(t, a, pa,
		Route{Port: 15001, PathPrefix: "/v1", Policy: pa.Policy.Name, Upstream: a.URL},
		Route{Port: 15001, PathPrefix: "/v1/status/", Policy: "not-published", Upstream: b.URL})
	for path, want := range map[string]*upstream{"/v1": a, "/v1/messages": a, "/v1/status/x": b, "/v1/status": a} {
		before := len(want.requests())
		res, body := h.send(t, http.MethodGet, path, smsVars, "")
		if res.StatusCode != 201 || len(want.requests()) != before+1 {
			t.Fatalf("%s: %d %s, or not sent to the route's upstream", path, res.StatusCode, body)
		}
	}
	for _, path := range []string{"/v10", "/", "/other"} {
		res, body := h.send(t, http.MethodGet, path, nil, "")
		if p := problemOf(t, res, body); res.StatusCode != 404 || p.Code != string(codes.NoRoute) {
			t.Fatalf("%s: %d %+v, want 404 ERR_NO_ROUTE", path, res.StatusCode, p)
		}
	}
}

// Hop-by-hop headers never cross the proxy, in either direction.
func TestHopByHopHeadersStop(t *testing.T) {
	var got http.Header
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.Header().Set("Connection", "X-Secret")
		w.Header().Set("X-Secret", "s")
		w.WriteHeader(200)
	})
	h := newHarness(t, u, smsPayload())
	res, _ := h.send(t, http.MethodGet, "/v1/status", map[string]string{"Connection": "X-Drop", "X-Drop": "1", "Proxy-Authorization": "p"}, "")
	if got.Get("X-Drop") != "" || got.Get("Proxy-Authorization") != "" {
		t.Fatalf("the upstream received hop-by-hop headers: %v", got)
	}
	if res.Header.Get("X-Secret") != "" {
		t.Fatalf("the application received a hop-by-hop header: %v", res.Header)
	}
}

// Concurrent callers through one proxy each get their own operation and key.
func TestConcurrentCallersKeepTheirKeys(t *testing.T) {
	u := newUpstream(t)
	h := newHarness(t, u, smsPayload())
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, h.proxy.URL+"/v1/messages", strings.NewReader("{}"))
			req.Header.Set("Retryguard-Var-User-Id", fmt.Sprint(i))
			req.Header.Set("Retryguard-Var-Login-Session-Id", "s")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			_ = res.Body.Close()
		}()
	}
	wg.Wait()
	keys := map[string]bool{}
	for _, s := range u.requests() {
		keys[s.Key] = true
	}
	if len(keys) != 16 {
		t.Fatalf("%d distinct keys, want 16: %v", len(keys), keys)
	}
}

// The proxy's policy is the layer that owns retries: when the application
// above it retries too (spec.layer.hiddenAttempts) and the product passes the
// platform's limit, the controller publishes the policy NoRetry, and the
// proxy makes one attempt per call (docs/hidden-layers.md).
func TestAPolicyNoRetryForItsHiddenLayerGetsOneAttempt(t *testing.T) {
	u := newUpstream(t, status(503), status(503))
	h := newHarness(t, u, smsPayload(func(p *policyconfig.Payload) {
		p.Enforcement = policyconfig.Enforcement{Mode: policyconfig.NoRetry, Reason: "AmplificationExceeded",
			Message: "connector(3×2 hidden) = 6 > 3"}
	}))
	res, body := h.send(t, http.MethodPost, "/v1/messages", smsVars, `{}`)
	if p := problemOf(t, res, body); res.StatusCode != 503 || p.Code != string(codes.PolicyNotEnforced) || p.Attempts != 1 {
		t.Fatalf("%d %+v, want 503 ERR_POLICY_NOT_ENFORCED after 1 attempt", res.StatusCode, p)
	}
	if got := u.requests(); len(got) != 1 || got[0].Key != "SMS-2FA-42-s-9" {
		t.Fatalf("the upstream saw %+v, want one attempt, still keyed", got)
	}
}
