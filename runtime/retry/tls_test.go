package retry_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/limits"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
	"github.com/retryguard/retryguard/runtime/retry"
)

// tlsCase is a real TLS failure between a RoundTripper and a real server on
// loopback: the server and the client's transport.
type tlsCase struct {
	name      string
	transport string // the evidence's name for the failure
	serve     func(h http.Handler) *httptest.Server
	client    func(srv *httptest.Server) *http.Transport
	scheme    string // the URL's scheme, when it is not the server's
}

func trusting(srv *httptest.Server) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return &tls.Config{RootCAs: pool}
}

// quiet keeps a test server's expected TLS and abort reports out of the log.
var quiet = log.New(io.Discard, "", 0)

func quietTLS(h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = quiet
	srv.StartTLS()
	return srv
}

func requiringClientCertificates(h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = quiet
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: x509.NewCertPool()}
	srv.StartTLS()
	return srv
}

// tlsCases are docs/runtime.md's TLS rows of "Proven non-dispatch".
var tlsCases = []tlsCase{{
	name: "an untrusted CA", transport: limits.TLSCertificate,
	serve:  quietTLS,
	client: func(*httptest.Server) *http.Transport { return &http.Transport{} }, // the system's roots
}, {
	name: "a certificate for another name", transport: limits.TLSCertificate,
	serve: quietTLS,
	client: func(srv *httptest.Server) *http.Transport {
		c := trusting(srv)
		c.ServerName = "payments.other.test"
		return &http.Transport{TLSClientConfig: c}
	},
}, {
	name: "plain HTTP behind https", transport: limits.TLSHandshake, scheme: "https",
	serve:  httptest.NewServer,
	client: func(*httptest.Server) *http.Transport { return &http.Transport{} },
}, {
	name: "a client certificate required (TLS 1.3)", transport: limits.TLSCertificate,
	serve:  requiringClientCertificates,
	client: func(srv *httptest.Server) *http.Transport { return &http.Transport{TLSClientConfig: trusting(srv)} },
}, {
	// TLS 1.2's server refuses a missing certificate with handshake_failure.
	name: "a client certificate required (TLS 1.2)", transport: limits.TLSHandshake,
	serve: requiringClientCertificates,
	client: func(srv *httptest.Server) *http.Transport {
		c := trusting(srv)
		c.MaxVersion = tls.VersionTLS12
		return &http.Transport{TLSClientConfig: c}
	},
}}

// RETRY-SMS-001 and issue 28: a request whose TLS handshake failed never
// left, so it is never "maybe applied"; a retry cannot fix a certificate,
// so it ends at once, permanent, naming the failure. Against real servers on
// loopback, for a keyless POST (where "maybe applied" would end
// UNKNOWN_OUTCOME) and a keyed one (where it would be retried).
func TestATLSHandshakeFailureIsNeverMaybeApplied(t *testing.T) {
	for _, tc := range tlsCases {
		for _, keyed := range []bool{false, true} {
			name := tc.name + map[bool]string{false: ", keyless", true: ", keyed"}[keyed]
			t.Run(name, func(t *testing.T) {
				var served atomic.Int32
				srv := tc.serve(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }))
				defer srv.Close()
				p := fixtures.SMS()
				if !keyed {
					p.Policy.KeyTemplate, p.Policy.IdempotencyHeader = "", ""
				}
				var dl letters
				ex := retry.New(source{p.Policy.Name: p}, retry.WithDeadLetters(&dl))
				base := tc.client(srv)
				defer base.CloseIdleConnections()
				url := srv.URL
				if tc.scheme != "" {
					url = tc.scheme + strings.TrimPrefix(url, "http")
				}
				re := postThrough(t, ex, base, p, url)
				if re == nil {
					t.Fatal("the request succeeded")
				}
				if re.State != retry.TerminalExhausted || re.Code != codes.PermanentFailure || re.Attempts != 1 {
					t.Fatalf("state %s, code %s, %d attempts, want TERMINAL_EXHAUSTED, ERR_PERMANENT_FAILURE, 1: %v", re.State, re.Code, re.Attempts, re)
				}
				if re.Last.Dispatched || re.Last.Class != retry.Permanent || re.Last.Transport != tc.transport {
					t.Fatalf("evidence %+v, want not dispatched, permanent, %s", re.Last, tc.transport)
				}
				if !strings.Contains(re.Error(), "TLS handshake failed") || !strings.Contains(re.Error(), tc.transport) {
					t.Fatalf("the error does not name the failure: %v", re)
				}
				if got := re.Problem().Status; got < 500 {
					t.Fatalf("problem status %d, want a 5xx", got)
				}
				if n := served.Load(); n != 0 {
					t.Fatalf("the server's handler ran %d times", n)
				}
				for _, l := range dl.list() {
					if l.State == retry.UnknownOutcome {
						t.Fatalf("a dead letter says possibly applied: %+v", l)
					}
				}
			})
		}
	}
}

func postThrough(t *testing.T, ex *retry.Executor, base http.RoundTripper, p *policyconfig.Payload, url string) *retry.Error {
	t.Helper()
	rt := &retry.RoundTripper{Executor: ex, Policy: p.Policy.Name, Base: base}
	ctx := retry.WithVars(context.Background(), vars)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/messages", strings.NewReader(`{"to":"+15550100"}`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := rt.RoundTrip(req)
	if err == nil {
		res.Body.Close()
		return nil
	}
	var re *retry.Error
	if !errors.As(err, &re) {
		t.Fatalf("want a *retry.Error, got %v", err)
	}
	return re
}
