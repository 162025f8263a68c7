package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/limits"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
)

// quiet keeps a test server's expected TLS and abort reports out of the log.
var quiet = log.New(io.Discard, "", 0)

// edgeProxy serves one route to upstream under p through base, the
// proxy's own transport, with no pool: the handshake is base's.
func edgeProxy(t *testing.T, p *policyconfig.Payload, upstream string, base http.RoundTripper) *httptest.Server {
	t.Helper()
	p.Policy.ConnectionPool = nil // every attempt through base
	table := &Table{Routes: []Route{{Port: 15001, PathPrefix: "/", Policy: p.Policy.Name, Upstream: upstream}}}
	px, err := NewRuntime(informerLike{watch.NewStatic(p)}, nil, base).New(table, 0)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(px)
	srv.Config.ErrorLog = quiet
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// Issue 28, item 1, through the sidecar: a request whose TLS handshake with
// the dependency failed never left, so the application hears a 502 problem
// naming the failure, never 202 ("maybe applied"), which curl -f and wget
// read as success; the dependency received nothing.
func TestATLSFailureUpstreamIsA5xxProblemNamingIt(t *testing.T) {
	cases := []struct {
		name      string
		transport string
		upstream  func(h http.Handler) *httptest.Server
		scheme    string
		base      func(srv *httptest.Server) http.RoundTripper
	}{
		{"an untrusted CA", limits.TLSCertificate, startTLS(nil), "", func(*httptest.Server) http.RoundTripper { return &http.Transport{} }},
		{"plain HTTP behind https", limits.TLSHandshake, startPlain, "https", func(*httptest.Server) http.RoundTripper { return &http.Transport{} }},
		{"a client certificate required", limits.TLSCertificate,
			startTLS(&tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: x509.NewCertPool()}), "",
			func(srv *httptest.Server) http.RoundTripper {
				pool := x509.NewCertPool()
				pool.AddCert(srv.Certificate())
				return &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
			}},
	}
	for _, tc := range cases {
		for _, keyed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, keyed %t", tc.name, keyed), func(t *testing.T) {
				var served atomic.Int32
				up := tc.upstream(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }))
				p := smsPayload(func(p *policyconfig.Payload) {
					if !keyed {
						p.Policy.KeyTemplate = ""
					}
				})
				url := up.URL
				if tc.scheme != "" {
					url = tc.scheme + strings.TrimPrefix(url, "http")
				}
				px := edgeProxy(t, p, url, tc.base(up))
				req, _ := http.NewRequest(http.MethodPost, px.URL+"/v1/messages", strings.NewReader(`{"to":"+15550100"}`))
				for k, v := range smsVars {
					req.Header.Set(k, v)
				}
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusBadGateway {
					t.Fatalf("status %d, want 502: %s", res.StatusCode, body)
				}
				prob := problemOf(t, res, string(body))
				if prob.Code != string(codes.PermanentFailure) || prob.State != retry.TerminalExhausted || prob.Attempts != 1 ||
					!strings.Contains(prob.Detail, tc.transport) {
					t.Fatalf("problem %+v, want ERR_PERMANENT_FAILURE, TERMINAL_EXHAUSTED, 1 attempt, naming %s", prob, tc.transport)
				}
				if n := served.Load(); n != 0 {
					t.Fatalf("the dependency received %d requests", n)
				}
			})
		}
	}
}

func startTLS(cfg *tls.Config) func(http.Handler) *httptest.Server {
	return func(h http.Handler) *httptest.Server {
		srv := httptest.NewUnstartedServer(h)
		srv.TLS = cfg
		srv.Config.ErrorLog = quiet
		srv.StartTLS()
		return srv
	}
}

func startPlain(h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	return srv
}

// cut answers 200 with a body of total bytes, announced by Content-Length
// or chunked, and stops after sent of them: over HTTP/1.1 by closing the
// connection, over HTTP/2 by resetting the stream.
func cut(total, sent int, chunked bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !chunked {
			w.Header().Set("Content-Length", strconv.Itoa(total))
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(strings.Repeat("x", sent)))
		_ = http.NewResponseController(w).Flush()
		if r.ProtoMajor == 2 {
			panic(http.ErrAbortHandler) // RST_STREAM
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}
}

// slow answers 200 with a chunked body that stalls after its first part
// and never ends: only the reader's deadline ends the read (an end of the
// body after the stall would be the dependency's own, complete answer).
func slow(stall time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(strings.Repeat("x", 4096)))
		_ = http.NewResponseController(w).Flush()
		time.Sleep(stall)
		panic(http.ErrAbortHandler)
	}
}

// Issue 28, item 2: a body the dependency cut part way reaches the
// application as a broken body, through a Go client, curl and wget, as it
// would calling the dependency directly: never a clean 200 that is short.
// The cut comes over HTTP/1.1 (Content-Length or chunked), over HTTP/2, and
// from the policy's deadline.
func TestACutBodyIsAnErrorForEveryClient(t *testing.T) {
	cases := []struct {
		name    string
		handler http.HandlerFunc
		http2   bool
		change  func(*policyconfig.Payload)
	}{
		{"HTTP/1.1 chunked", cut(65536, 24576, true), false, nil},
		{"HTTP/1.1 Content-Length", cut(65536, 24576, false), false, nil},
		{"HTTP/2", cut(65536, 24576, true), true, nil},
		{"at the deadline", slow(3 * time.Second), false, func(p *policyconfig.Payload) {
			p.Policy.Deadline, p.Policy.MinRemaining = policyconfig.Duration(time.Second), policyconfig.Duration(100*time.Millisecond)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewUnstartedServer(tc.handler)
			srv.EnableHTTP2 = tc.http2
			srv.Config.ErrorLog = quiet
			srv.StartTLS()
			t.Cleanup(srv.Close)
			changes := []func(*policyconfig.Payload){func(p *policyconfig.Payload) { p.Policy.KeyTemplate = "" }}
			if tc.change != nil {
				changes = append(changes, tc.change)
			}
			p := smsPayload(changes...)
			px := edgeProxy(t, p, srv.URL, srv.Client().Transport)
			url := px.URL + "/v1/messages"

			// The dependency itself, called directly, is the oracle; at the
			// deadline, the deadline is.
			if tc.change == nil {
				brokenDirectly(t, srv)
			}

			res, err := http.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			n, err := io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if err == nil {
				t.Fatalf("a Go client read a clean %d with %d bytes", res.StatusCode, n)
			}
			for _, client := range [][]string{
				{"curl", "-sS", "-f", "-o", "/dev/null", url},
				{"wget", "-q", "--tries=1", "-O", "/dev/null", url},
			} {
				path, err := exec.LookPath(client[0])
				if err != nil {
					t.Fatalf("%s is not installed: %v", client[0], err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				out, err := exec.CommandContext(ctx, path, client[1:]...).CombinedOutput()
				cancel()
				if err == nil {
					t.Fatalf("%s read the cut body as complete: %s", client[0], out)
				}
			}
		})
	}
}

// Issue 28, item 3: trailers travel both ways through the sidecar, whether
// the request body is buffered (64 KiB or less) or streamed.
func TestTrailersTravelThroughTheSidecar(t *testing.T) {
	for _, size := range []int{1024, 200 << 10} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			got := make(chan string, 1)
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				got <- r.Trailer.Get("X-Checksum")
				w.Header().Set("Trailer", "X-Served")
				w.WriteHeader(http.StatusCreated)
				_, _ = io.WriteString(w, "ok")
				w.Header().Set("X-Served", "yes")
			}))
			srv.Config.ErrorLog = quiet
			srv.StartTLS()
			t.Cleanup(srv.Close)
			p := smsPayload()
			px := edgeProxy(t, p, srv.URL, srv.Client().Transport)
			pr, pw := io.Pipe()
			req, _ := http.NewRequest(http.MethodPost, px.URL+"/v1/messages", pr)
			req.Trailer = http.Header{"X-Checksum": nil}
			for k, v := range smsVars {
				req.Header.Set(k, v)
			}
			go func() {
				w := bufio.NewWriter(pw)
				_, _ = w.WriteString(strings.Repeat("y", size))
				_ = w.Flush()
				req.Trailer.Set("X-Checksum", "sha256:abc")
				_ = pw.Close()
			}()
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusCreated {
				t.Fatalf("status %d: %s", res.StatusCode, body)
			}
			select {
			case v := <-got:
				if v != "sha256:abc" {
					t.Fatalf("the dependency received the request trailer %q", v)
				}
			default:
				t.Fatal("the dependency was not reached")
			}
			if v := res.Trailer.Get("X-Served"); v != "yes" {
				t.Fatalf("the application received the response trailer %q", v)
			}
		})
	}
}

// brokenDirectly checks the oracle: the dependency's own body, read
// directly, fails.
func brokenDirectly(t *testing.T, srv *httptest.Server) {
	t.Helper()
	direct, err := srv.Client().Get(srv.URL + "/v1/messages")
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(direct.Body)
	direct.Body.Close()
	if err == nil {
		t.Fatal("the dependency's own body did not fail: the test's server is wrong")
	}
}
