package proxy

import (
	"fmt"
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

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
)

// The sidecar's cost under concurrent load, against its peer in the same
// run. The same POST /v1/messages (a 19-byte JSON body; a 201 with a 30-byte
// body back) goes to one loopback upstream five ways: straight to it
// (direct); through httputil.ReverseProxy as NewSingleHostReverseProxy
// builds it (bare, the peer: http.DefaultTransport, no BufferPool); through
// a ReverseProxy given a transport that keeps an idle connection for every
// caller and a BufferPool (tuned, for reference); through the sidecar's
// handler under RETRY-SMS-001's policy, its key rendered from
// Retryguard-Var-* headers (governed, built as cmd/retryguard-proxy builds
// it: the policy's connection pool of 50); and the same without the pool
// (unpooled: the sidecar's Transport). One b.N is a round of each path in a
// rotating order, so that a load that changes on the shared machine weighs
// on all five alike; a round is proxyClients callers sending proxyRequests
// requests each, every request timed alone. Added latency is a path's
// percentile minus direct's: each round's percentile, median over the
// rounds, and the pooled p99 of every request of the run beside it;
// throughput is a path's requests over the wall time of its rounds
// (docs/benchmarks.md):
//
//	go test -run '^$' -bench BenchmarkProxyPaired -benchtime 100x -cpu 1 -count 6 ./proxy/
func BenchmarkProxyPaired(b *testing.B) {
	const proxyClients, proxyRequests = 32, 8
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"m-1","status":"queued"}`)
	}))
	defer upstream.Close()
	target, _ := url.Parse(upstream.URL)
	bare := httputil.NewSingleHostReverseProxy(target)
	tuned := httputil.NewSingleHostReverseProxy(target)
	tuned.Transport = &http.Transport{MaxIdleConnsPerHost: proxyClients}
	tuned.BufferPool = &bufferPool{}
	sidecar := func(p *policyconfig.Payload) http.Handler {
		rt := NewRuntime(watch.NewStatic(p), &retry.Pools{}, nil)
		h, err := rt.New(&Table{Routes: []Route{{Port: 15001, PathPrefix: "/v1/", Policy: p.Policy.Name, Upstream: upstream.URL}}}, 0)
		if err != nil {
			b.Fatal(err)
		}
		return h
	}
	governed := sidecar(smsPayload())
	unpooled := sidecar(smsPayload(func(p *policyconfig.Payload) { p.Policy.ConnectionPool = nil }))
	paths := []string{"direct", "bare", "tuned", "governed", "unpooled"}
	base := map[string]string{"direct": upstream.URL}
	for name, h := range map[string]http.Handler{"bare": bare, "tuned": tuned, "governed": governed, "unpooled": unpooled} {
		s := httptest.NewServer(h)
		defer s.Close()
		base[name] = s.URL
	}
	// The callers keep a connection each to every path: only the path's own
	// connections to the upstream differ.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: proxyClients}}
	defer client.CloseIdleConnections()
	send := func(to string) error {
		req, _ := http.NewRequest(http.MethodPost, to, strings.NewReader(`{"to":"+15550100"}`))
		req.Header.Set("Retryguard-Var-User-Id", "u")
		req.Header.Set("Retryguard-Var-Login-Session-Id", "s")
		res, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		if res.StatusCode != http.StatusCreated {
			return fmt.Errorf("POST %s: %s", to, res.Status)
		}
		return nil
	}
	took := make([][]time.Duration, len(paths)) // every request of the run, by path
	rounds := make([][][2]float64, len(paths))  // each round's p50 and p99, by path
	wall := make([]time.Duration, len(paths))
	lat := make([][]time.Duration, proxyClients)
	round := make([]time.Duration, 0, proxyClients*proxyRequests)
	pct := func(d []time.Duration, p int) float64 { return float64(d[(len(d)-1)*p/100].Nanoseconds()) / 1e3 }
	for i := 0; b.Loop(); i++ {
		for j := range paths {
			k := (i + j) % len(paths)
			to := base[paths[k]] + "/v1/messages"
			var wg sync.WaitGroup
			errs := make(chan error, proxyClients)
			start := time.Now()
			for c := range proxyClients {
				wg.Go(func() {
					lat[c] = lat[c][:0]
					for range proxyRequests {
						t0 := time.Now()
						if err := send(to); err != nil {
							errs <- err
							return
						}
						lat[c] = append(lat[c], time.Since(t0))
					}
				})
			}
			wg.Wait()
			wall[k] += time.Since(start)
			close(errs)
			if err := <-errs; err != nil {
				b.Fatalf("%s: %v", paths[k], err)
			}
			round = round[:0]
			for _, l := range lat {
				round = append(round, l...)
			}
			took[k] = append(took[k], round...)
			slices.Sort(round)
			rounds[k] = append(rounds[k], [2]float64{pct(round, 50), pct(round, 99)})
		}
	}
	// A round's percentile, median over the rounds: a stall of the shared
	// machine (another process holding the core for tens of milliseconds)
	// lands in one round of one path and moves no median, where it would
	// make the pooled p99 of whichever path it hit.
	median := func(k, q int) float64 {
		v := make([]float64, len(rounds[k]))
		for i, r := range rounds[k] {
			v[i] = r[q]
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	pooled := func(k int) float64 { slices.Sort(took[k]); return pct(took[k], 99) }
	rate := func(k int) float64 { return float64(len(took[k])) / wall[k].Seconds() }
	added := map[string][3]float64{} // p50, p99 (medians over the rounds), pooled p99
	for k, name := range paths {
		if k > 0 {
			added[name] = [3]float64{median(k, 0) - median(0, 0), median(k, 1) - median(0, 1), pooled(k) - pooled(0)}
			b.ReportMetric(added[name][0], name+"-added-p50-µs")
			b.ReportMetric(added[name][1], name+"-added-p99-µs")
			b.ReportMetric(added[name][2], name+"-added-p99-pooled-µs")
		}
		b.ReportMetric(rate(k), name+"-req/s")
	}
	for k, name := range paths[2:] {
		b.ReportMetric(added[name][1]/added["bare"][1], name+"/bare-added-p99")
		b.ReportMetric(added[name][2]/added["bare"][2], name+"/bare-added-p99-pooled")
		b.ReportMetric(rate(2+k)/rate(1), name+"/bare-req/s")
	}
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
