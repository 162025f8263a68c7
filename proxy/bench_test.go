package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
)

// The proxy's cost, against its peer in the same run: the application's
// request sent straight to the upstream (direct), through
// httputil.ReverseProxy with no policy (bare), and through the proxy under
// RETRY-SMS-001's policy, its key rendered from Retryguard-Var-* headers
// (governed). All on loopback, the upstream answering 201 with a small
// body. Latency: each request alone, p50 and p99 in µs. Throughput: two
// callers at once, in requests per second. b.N counts one request to each
// peer (latency) or a round of 200 requests to each (throughput):
//
//	go test -run '^$' -bench BenchmarkProxy -benchtime 20x -cpu 2 ./proxy/
//	go test -run '^$' -bench BenchmarkProxy/latency -benchtime 5000x -cpu 2 ./proxy/
func BenchmarkProxy(b *testing.B) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"m-1","status":"queued"}`)
	}))
	defer upstream.Close()
	target, _ := url.Parse(upstream.URL)
	bare := httputil.NewSingleHostReverseProxy(target)
	bare.Transport = &http.Transport{MaxIdleConnsPerHost: 64}
	bare.BufferPool = &bufferPool{} // as the proxy pools its copy buffers: the peer is not handicapped
	p := smsPayload()
	rt := NewRuntime(watch.NewStatic(p), &retry.Pools{}, nil)
	governed, err := rt.New(&Table{Routes: []Route{{Port: 15001, PathPrefix: "/v1/", Policy: p.Policy.Name, Upstream: upstream.URL}}}, 0)
	if err != nil {
		b.Fatal(err)
	}
	servers := map[string]string{"direct": upstream.URL}
	for name, h := range map[string]http.Handler{"bare": bare, "governed": governed} {
		s := httptest.NewServer(h)
		defer s.Close()
		servers[name] = s.URL
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	send := func(b *testing.B, base string, i int) {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(`{"to":"+15550100"}`))
		req.Header.Set("Retryguard-Var-User-Id", "u")
		req.Header.Set("Retryguard-Var-Login-Session-Id", "s")
		res, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		if res.StatusCode != http.StatusCreated {
			b.Fatalf("request %d: %s", i, res.Status)
		}
	}
	// Latency: one request at a time to direct, bare and governed in turn,
	// so that a load that changes on the shared machine weighs on all three
	// alike. Added latency is a peer's percentile minus direct's.
	b.Run("latency", func(b *testing.B) {
		names := []string{"direct", "bare", "governed"}
		took := make([][]time.Duration, len(names))
		for i := 0; b.Loop(); i++ {
			for k, name := range names {
				start := time.Now()
				send(b, servers[name], i)
				took[k] = append(took[k], time.Since(start))
			}
		}
		pct := func(k, p int) float64 {
			slices.Sort(took[k])
			return float64(took[k][len(took[k])*p/100].Nanoseconds()) / 1e3
		}
		for k, name := range names {
			b.ReportMetric(pct(k, 50), name+"-p50-µs")
			b.ReportMetric(pct(k, 99), name+"-p99-µs")
		}
	})
	// Throughput: 2 callers at once, through bare and governed in turn, in
	// rounds of 200 requests each, so that a load that changes on the shared
	// machine weighs on both alike; the ratio is governed over bare.
	b.Run("throughput", func(b *testing.B) {
		const callers, round = 2, 200
		var took [2]time.Duration
		var sent [2]int
		for i := 0; b.Loop(); i++ {
			for k, name := range []string{"bare", "governed"} {
				start := time.Now()
				var wg sync.WaitGroup
				for range callers {
					wg.Go(func() {
						for j := range round / callers {
							send(b, servers[name], j)
						}
					})
				}
				wg.Wait()
				took[k] += time.Since(start)
				sent[k] += round
			}
		}
		bare, gov := float64(sent[0])/took[0].Seconds(), float64(sent[1])/took[1].Seconds()
		b.ReportMetric(bare, "bare-req/s")
		b.ReportMetric(gov, "governed-req/s")
		b.ReportMetric(gov/bare, "governed/bare")
	})
}

// bufferPool is httputil.BufferPool over sync.Pool.
type bufferPool struct{ p sync.Pool }

func (bp *bufferPool) Get() []byte {
	if b, ok := bp.p.Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, 32<<10)
}

func (bp *bufferPool) Put(b []byte) { bp.p.Put(&b) }
