package retry_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
	"github.com/retryguard/retryguard/runtime/retry"
)

// Issue 28, item 2: a body the dependency cut part way (over HTTP/1.1 or
// HTTP/2), or that the policy's deadline cut, is a read error for the
// caller of the RoundTripper, as it is calling the dependency directly:
// never a short body that ends cleanly.
func TestACutBodyIsAReadError(t *testing.T) {
	for _, tc := range []struct {
		name     string
		http2    bool
		deadline bool
	}{{"HTTP/1.1", false, false}, {"HTTP/2", true, false}, {"at the deadline", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			// At the deadline the dependency never ends its body (it stalls
			// until the test ends), so only the deadline can end the read.
			stall := make(chan struct{})
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write([]byte(strings.Repeat("x", 24576)))
				_ = http.NewResponseController(w).Flush()
				if tc.deadline {
					<-stall
					panic(http.ErrAbortHandler)
				}
				if r.ProtoMajor == 2 {
					panic(http.ErrAbortHandler)
				}
				if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
					_ = conn.Close()
				}
			}))
			srv.EnableHTTP2 = tc.http2
			srv.Config.ErrorLog = quiet
			srv.StartTLS()
			defer srv.Close()
			defer close(stall)
			p := fixtures.SMS()
			p.Policy.ConnectionPool = nil
			if tc.deadline {
				p.Policy.Deadline, p.Policy.MinRemaining = policyconfig.Duration(500*time.Millisecond), policyconfig.Duration(100*time.Millisecond)
			}
			rt := &retry.RoundTripper{Executor: retry.New(source{p.Policy.Name: p}), Policy: p.Policy.Name, Base: srv.Client().Transport}
			req, _ := http.NewRequestWithContext(retry.WithVars(t.Context(), vars), http.MethodGet, srv.URL+"/v1/messages", nil)
			res, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			if n, err := io.Copy(io.Discard, res.Body); err == nil {
				t.Fatalf("a clean %d with %d bytes", res.StatusCode, n)
			}
		})
	}
}
