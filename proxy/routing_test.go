package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
)

// rawRequest writes one request to addr exactly as given (no client
// cleans its path) and reads the answer.
func rawRequest(t *testing.T, addr, request string) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, request); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res, string(body)
}

// Issue 29, item 5: the route is chosen by the path as sent, so a path a
// dependency may read otherwise (dot-segments, encoded separators) never
// reaches an upstream under another route's policy; CONNECT and upgrades
// are no requests to route. Each is a problem answer, and nothing is sent.
func TestRoutingIsExact(t *testing.T) {
	u := newUpstream(t)
	p := smsPayload()
	admin := smsPayload()
	h := newHarness(t, u, p,
		Route{Port: 15001, PathPrefix: "/", Policy: p.Policy.Name, Upstream: u.URL},
		Route{Port: 15001, PathPrefix: "/v1", Policy: admin.Policy.Name, Upstream: u.URL})
	addr := strings.TrimPrefix(h.proxy.URL, "http://")
	for _, tc := range []struct {
		request string
		status  int
	}{
		{"POST /x/../v1/messages HTTP/1.1\r\nHost: p\r\nContent-Length: 0\r\n\r\n", http.StatusBadRequest},
		{"GET /v1/../admin HTTP/1.1\r\nHost: p\r\n\r\n", http.StatusBadRequest},
		{"GET /v1/%2e%2e/admin HTTP/1.1\r\nHost: p\r\n\r\n", http.StatusBadRequest},
		{"GET /%2E%2E/v1/messages HTTP/1.1\r\nHost: p\r\n\r\n", http.StatusBadRequest},
		{"GET /./v1/messages HTTP/1.1\r\nHost: p\r\n\r\n", http.StatusBadRequest},
		{"GET /x%2Fv1/messages HTTP/1.1\r\nHost: p\r\n\r\n", http.StatusBadRequest},
		{"GET /x%5c..%5cv1 HTTP/1.1\r\nHost: p\r\n\r\n", http.StatusBadRequest},
		{"CONNECT /v1/messages HTTP/1.1\r\nHost: p\r\n\r\n", http.StatusMethodNotAllowed},
		{"CONNECT vendor.example:443 HTTP/1.1\r\nHost: vendor.example:443\r\n\r\n", http.StatusMethodNotAllowed},
		{"GET /v1/stream HTTP/1.1\r\nHost: p\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", http.StatusBadRequest},
	} {
		res, body := rawRequest(t, addr, tc.request)
		line := strings.SplitN(tc.request, "\r\n", 2)[0]
		if res.StatusCode != tc.status || res.Header.Get(CodeHeader) != string(codes.UnroutableRequest) {
			t.Errorf("%s: %d %s, want %d %s: %s", line, res.StatusCode, res.Header.Get(CodeHeader), tc.status, codes.UnroutableRequest, body)
		}
	}
	if n := len(u.requests()); n != 0 {
		t.Fatalf("the upstream received %d requests: %+v", n, u.requests())
	}
	// The plain path still goes through.
	res, body := h.send(t, http.MethodPost, "/v1/messages", smsVars, `{}`)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("a plain path: %d %s", res.StatusCode, body)
	}
}

// Issue 29, item 5: the proxy's own headers are its own: a dependency that
// sets Retryguard-Code (or any Retryguard-* header) on its answer does not
// speak for the proxy.
func TestTheUpstreamCannotSpeakForTheProxy(t *testing.T) {
	u := newUpstream(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set(CodeHeader, string(codes.UnknownOutcome))
		w.Header().Set(StateHeader, string(retry.UnknownOutcome))
		w.Header().Set("retryguard-attempts", "1")
		w.WriteHeader(http.StatusOK)
	})
	h := newHarness(t, u, smsPayload())
	res, _ := h.send(t, http.MethodPost, "/v1/messages", smsVars, `{}`)
	for name := range res.Header {
		if reserved(name) {
			t.Errorf("the application received the upstream's %s: %q", name, res.Header.Get(name))
		}
	}
}

// Issue 29, item 4: a route serves at most its bound of requests at once;
// one beyond it is answered 503 ERR_PROXY_BUSY at once, and nothing of it
// is sent.
func TestARouteHoldsItsBoundOfRequests(t *testing.T) {
	release := make(chan struct{})
	var arrived atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		arrived.Add(1)
		<-release
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	defer close(release)
	p := smsPayload()
	p.Policy.ConnectionPool = nil
	rt := NewRuntime(informerLike{watch.NewStatic(p)}, nil, srv.Client().Transport)
	rt.MaxInFlight = 2
	px, err := rt.New(&Table{Routes: []Route{{Port: 15001, PathPrefix: "/", Policy: p.Policy.Name, Upstream: srv.URL}}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(px)
	defer front.Close()
	post := func() *http.Response {
		req, _ := http.NewRequest(http.MethodPost, front.URL+"/v1/messages", strings.NewReader("{}"))
		for k, v := range smsVars {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return nil
		}
		return res
	}
	for range 2 {
		go func() {
			if res := post(); res != nil {
				res.Body.Close()
			}
		}()
	}
	for deadline := time.Now().Add(10 * time.Second); arrived.Load() < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first two requests did not arrive")
		}
	}
	res := post()
	if res == nil {
		t.FailNow()
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get(CodeHeader) != string(codes.ProxyBusy) {
		t.Fatalf("the third request: %d %s: %s", res.StatusCode, res.Header.Get(CodeHeader), body)
	}
	if n := arrived.Load(); n != 2 {
		t.Fatalf("the upstream received %d requests, want 2", n)
	}
}
