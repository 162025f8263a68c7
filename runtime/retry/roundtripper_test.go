package retry

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/limits"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/clock"
)

type seen struct {
	mu     sync.Mutex
	keys   []string
	bodies []string
}

func server(t *testing.T, statuses ...int) (*httptest.Server, *seen) {
	s := &seen{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		n := len(s.keys)
		s.keys = append(s.keys, r.Header.Get("Idempotency-Key"))
		s.bodies = append(s.bodies, string(body))
		s.mu.Unlock()
		code := statuses[min(n, len(statuses)-1)]
		if code == 429 {
			w.Header().Set("Retry-After", "10")
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, http.StatusText(code))
	}))
	t.Cleanup(srv.Close)
	return srv, s
}

func client(t *testing.T, p *policyconfig.Payload) *http.Client {
	ex := New(staticSource{p.Policy.Name: p}, WithClock(clock.NewVirtual(epoch)))
	warm(ex, p.Policy.Name, 30)
	return &http.Client{Transport: &RoundTripper{Executor: ex, Policy: p.Policy.Name}}
}

func post(t *testing.T, c *http.Client, url string) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(WithVars(t.Context(), smsVars), http.MethodPost, url, strings.NewReader(`{"to":"+15550100"}`))
	return c.Do(req)
}

func TestRoundTripperRetriesWithOneKeyAndTheSameBody(t *testing.T) {
	srv, s := server(t, 503, 503, 201)
	res, err := post(t, client(t, smsPolicy()), srv.URL)
	if err != nil || res.StatusCode != 201 {
		t.Fatalf("%v %v", res, err)
	}
	_ = res.Body.Close()
	if len(s.keys) != 3 {
		t.Fatalf("%d attempts", len(s.keys))
	}
	for i := range s.keys {
		if s.keys[i] != "SMS-2FA-42-s-9" || s.bodies[i] != `{"to":"+15550100"}` {
			t.Errorf("attempt %d: key %q body %q", i+1, s.keys[i], s.bodies[i])
		}
	}
}

func TestRoundTripperReturnsAPermanentStatusAsIs(t *testing.T) {
	srv, s := server(t, 400)
	res, err := post(t, client(t, smsPolicy()), srv.URL)
	if err != nil || res.StatusCode != 400 || len(s.keys) != 1 {
		t.Fatalf("%v %v after %d attempts", res, err, len(s.keys))
	}
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if string(body) != "Bad Request" {
		t.Errorf("the caller must read the dependency's answer, got %q", body)
	}
}

func TestRoundTripperFailsFastOnALongRetryAfter(t *testing.T) {
	srv, s := server(t, 429)
	_, err := post(t, client(t, smsPolicy()), srv.URL)
	if !errors.Is(err, Sentinel(codes.RetryAfterTooLong)) || len(s.keys) != 1 {
		t.Fatalf("%v after %d attempts", err, len(s.keys))
	}
}

func TestRoundTripperRetriesARefusedConnection(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // nothing listens: connect is refused
	_, err = post(t, client(t, smsPolicy()), "http://"+addr)
	var re *Error
	if !errors.As(err, &re) || re.Attempts != 3 || re.Last.Transport != limits.ConnectionRefused || re.Last.Dispatched {
		t.Fatalf("%+v", err)
	}
}

func TestPoolsAreNotShared(t *testing.T) {
	var pools Pools
	auth := smsPolicy().Policy
	auth.ConnectionPool = &policyconfig.ConnectionPool{Name: "pool-sms-auth", MaxConnections: 50}
	tr, err := pools.Transport(&auth)
	if err != nil || tr.MaxConnsPerHost != 50 {
		t.Fatalf("%v %v", tr, err)
	}
	again, err := pools.Transport(&auth)
	if err != nil || again != tr {
		t.Fatal("the same caller gets the same pool")
	}
	marketing := auth
	marketing.Name, marketing.Criticality = "marketing", "Standard"
	if _, err := pools.Transport(&marketing); !errors.Is(err, Sentinel(codes.SharedFailureDomainLeak)) {
		t.Fatalf("a Standard caller on a Critical pool: %v", err)
	}
	other := auth
	other.Service = "email-api"
	if _, err := pools.Transport(&other); !errors.Is(err, Sentinel(codes.SharedFailureDomainLeak)) {
		t.Fatalf("another service on the pool: %v", err)
	}
}

func TestFallbackRefusesUnsafeChannelsEvenWhenTampered(t *testing.T) {
	p := smsPolicy()
	p.Policy.Fallback = []policyconfig.FallbackChannel{
		{Name: "push", Endpoint: "https://push.internal/v1", Verified: true},
		{Name: "webhook", Endpoint: "http://collector.example/otp", Verified: true},
		{Name: "voip", Endpoint: "https://voip.example", Verified: false},
	}
	ex := New(staticSource{p.Policy.Name: p})
	if c, err := ex.Fallback(p.Policy.Name, "push"); err != nil || c.Name != "push" {
		t.Fatalf("%v %v", c, err)
	}
	for _, name := range []string{"webhook", "voip", "missing"} {
		if _, err := ex.Fallback(p.Policy.Name, name); !errors.Is(err, Sentinel(codes.UntestedCompensationBlocked)) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Bad input gets a clear error, never a panic: a request without a
// Header map (http.Transport answers "http: nil Request.Header") and one
// without a URL ("http: nil Request.URL").
func TestOddRequestsAreErrorsNotPanics(t *testing.T) {
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
				_, err := l.rt.RoundTrip(req)
				_, bare := (&http.Transport{}).RoundTrip(req)
				if err == nil || bare == nil || err.Error() != bare.Error() {
					t.Fatalf("RoundTrip: %v, want the bare transport's error %v", err, bare)
				}
			}()
		})
	}
}

// Bad input gets a clear error, never a panic: a RoundTripper without an
// Executor.
func TestARoundTripperWithoutAnExecutorIsAnError(t *testing.T) {
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
