package conformance_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/retryguard/retryguard/conformance"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
)

// fault is a real failure on loopback: the URL to send to, the transport
// to send with, and how many requests the dependency's handler ran.
type fault struct {
	url    string
	base   *http.Transport
	served *atomic.Int32
	srv    *httptest.Server // the dependency, when there is one
}

var quiet = log.New(io.Discard, "", 0)

// faults produce each failure dispatch.json names.
var faults = map[string]func(t *testing.T) fault{
	"dns": func(t *testing.T) fault {
		// A real resolver whose name server is not there: the lookup fails.
		dead := closedPort(t, "udp")
		dialer := &net.Dialer{Resolver: &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "udp", dead)
		}}}
		return fault{url: "http://payments.vendor.test", base: &http.Transport{DialContext: dialer.DialContext}, served: new(atomic.Int32)}
	},
	"refused": func(t *testing.T) fault {
		return fault{url: "http://" + closedPort(t, "tcp"), base: &http.Transport{}, served: new(atomic.Int32)}
	},
	"proxy-connect-refused": func(t *testing.T) fault {
		f := serve(t, nil, true) // https: the proxy is asked to CONNECT
		proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusForbidden) }))
		t.Cleanup(proxy.Close)
		pu, _ := url.Parse(proxy.URL)
		f.base = &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: trusting(f)}
		return f
	},
	"tls-untrusted-ca": func(t *testing.T) fault {
		f := serve(t, nil, true)
		f.base = &http.Transport{}
		return f
	},
	"tls-wrong-name": func(t *testing.T) fault {
		f := serve(t, nil, true)
		c := trusting(f)
		c.ServerName = "payments.other.test"
		f.base = &http.Transport{TLSClientConfig: c}
		return f
	},
	"tls-plain-http": func(t *testing.T) fault {
		f := serve(t, nil, false)
		f.url = "https" + strings.TrimPrefix(f.url, "http")
		f.base = &http.Transport{}
		return f
	},
	"tls-client-certificate-required": func(t *testing.T) fault {
		f := serve(t, &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: x509.NewCertPool()}, true)
		f.base = &http.Transport{TLSClientConfig: trusting(f)}
		return f
	},
	"tls12-client-certificate-required": func(t *testing.T) fault {
		f := serve(t, &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: x509.NewCertPool()}, true)
		c := trusting(f)
		c.MaxVersion = tls.VersionTLS12
		f.base = &http.Transport{TLSClientConfig: c}
		return f
	},
	"closed-after-request": func(t *testing.T) fault {
		var served atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			served.Add(1)
			_, _ = io.Copy(io.Discard, r.Body)
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = conn.Close()
			}
		}))
		t.Cleanup(srv.Close)
		return fault{url: srv.URL, base: &http.Transport{}, served: &served}
	},
}

func serve(t *testing.T, cfg *tls.Config, useTLS bool) fault {
	t.Helper()
	var served atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }))
	srv.Config.ErrorLog = quiet
	if useTLS {
		srv.TLS = cfg
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return fault{url: srv.URL, served: &served, srv: srv}
}

// trusting trusts f's server's certificate.
func trusting(f fault) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(f.srv.Certificate())
	return &tls.Config{RootCAs: pool}
}

func closedPort(t *testing.T, network string) string {
	t.Helper()
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := c.LocalAddr().String()
		_ = c.Close()
		return addr
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

func TestDispatchVectors(t *testing.T) {
	file := read[conformance.DispatchFileSchema](t, conformance.DispatchFile)
	if len(file.Vectors) != len(faults) {
		t.Fatalf("%d vectors, %d faults: every vector names a fault the runner produces", len(file.Vectors), len(faults))
	}
	for _, v := range file.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			produce, ok := faults[v.Failure]
			if !ok {
				t.Fatalf("no fault %q", v.Failure)
			}
			f := produce(t)
			defer f.base.CloseIdleConnections()
			p := fixtures.SMS()
			p.Policy.KeyTemplate, p.Policy.ConnectionPool = "", nil
			ex := retry.New(watch.NewStatic(p))
			rt := &retry.RoundTripper{Executor: ex, Policy: p.Policy.Name, Base: f.base}
			req, err := http.NewRequest(http.MethodPost, f.url+"/v1/messages", strings.NewReader(`{"to":"+15550100"}`))
			if err != nil {
				t.Fatal(err)
			}
			res, err := rt.RoundTrip(req)
			if err == nil {
				res.Body.Close()
				t.Fatalf("the request succeeded (%d)", res.StatusCode)
			}
			var re *retry.Error
			if !errors.As(err, &re) {
				t.Fatalf("want a *retry.Error, got %v", err)
			}
			got := conformance.DispatchWant{Dispatched: re.Last.Dispatched, Transport: re.Last.Transport, Class: string(re.Last.Class),
				State: string(re.State), Attempts: re.Attempts}
			if got != v.Want {
				t.Fatalf("got %+v, want %+v: %v", got, v.Want, err)
			}
			if n := f.served.Load(); !v.Want.Dispatched && n != 0 {
				t.Fatalf("not dispatched, yet the dependency's handler ran %d times", n)
			}
		})
	}
}
