package benchmarks_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/hedgepolicy"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
)

// hedgeDelay is both libraries' hedge delay: one hedge after 20 ms, against
// answers that take 10 ms.
const hedgeDelay = 20 * time.Millisecond

// tailServer answers in 10 ms, except one request in every slowEvery, which
// takes 1 s (or until the client gives up on it). It counts every request.
type tailServer struct {
	*httptest.Server
	requests atomic.Int64
}

func newTailServer(slowEvery int64) *tailServer {
	s := &tailServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		wait := 10 * time.Millisecond
		if s.requests.Add(1)%slowEvery == 0 {
			wait = time.Second
		}
		select {
		case <-time.After(wait):
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, `{"balance":42}`)
	}))
	return s
}

// fetch GETs url with ctx and reads the answer to its end.
func fetch(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	if res.StatusCode != http.StatusOK {
		return retry.Status(res.StatusCode, "")
	}
	return nil
}

// hedgedRead is the benchmark's Retryguard policy: an idempotent GET, two
// attempts, one hedge after hedgeDelay, and a budget of 10% of primaries
// with a bucket of 10 and a floor of 1 retry a second.
func hedgedRead(name string) (*retry.Executor, *policyconfig.Payload) {
	p := fixtures.SMS()
	p.Policy.Name, p.Policy.Operation, p.Policy.KeyTemplate = name, "GET /v1/balance", ""
	p.Policy.MaxAttempts, p.Policy.MinRemaining = 2, fixtures.D("10ms")
	p.Policy.Hedging = &policyconfig.Hedging{Delay: policyconfig.Duration(hedgeDelay), MaxHedges: 1}
	p.Policy.Budget, p.Budget.Name = name, name // each run its own budget
	p.Budget.RetryPercent, p.Budget.MaxTokens, p.Budget.MinRetriesPerSecond = 10, 10, 1
	return retry.New(watch.NewStatic(p)), p
}

// tail runs ops operations on workers goroutines through do and reports
// their latency percentiles and the extra requests the server received.
func tail(b *testing.B, srv *tailServer, ops, workers int, do func(ctx context.Context) error) {
	var (
		mu    sync.Mutex
		took  = make([]time.Duration, 0, ops)
		next  atomic.Int64
		start = srv.requests.Load()
	)
	for b.Loop() {
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for next.Add(1) <= int64(ops) {
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
					t0 := time.Now()
					err := do(ctx)
					d := time.Since(t0)
					cancel()
					if err != nil {
						b.Error(err)
					}
					mu.Lock()
					took = append(took, d)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	slices.Sort(took)
	q := func(p float64) float64 { return float64(took[min(len(took)-1, int(float64(len(took))*p))]) / 1e6 }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(q(0.999), "p99.9-ms")
	extra := float64(srv.requests.Load()-start-int64(len(took))) / float64(len(took))
	b.ReportMetric(100*extra, "extra-%")
}

// BenchmarkHedgeTail is the tail a hedge cuts, and what it costs the
// server, against failsafe-go's hedge policy with the same delay: answers
// in 10 ms, 1% in 1 s; then an overloaded server, half its answers in 1 s,
// where Retryguard's hedges stay within the budget (10% of primaries plus
// its floor) and failsafe-go's do not. Run it with -benchtime=1x:
//
//	cd runtime/benchmarks && go test -run '^$' -bench HedgeTail -benchtime=1x
func BenchmarkHedgeTail(b *testing.B) {
	for _, load := range []struct {
		name           string
		slowEvery      int64
		ops, workers   int
		withoutHedging bool
	}{
		{"1%-slow", 100, 3000, 8, true},
		{"50%-slow", 2, 600, 60, false},
	} {
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 200}}
		run := func(name string, do func(srv *tailServer) func(context.Context) error) {
			b.Run(fmt.Sprintf("%s/%s", load.name, name), func(b *testing.B) {
				srv := newTailServer(load.slowEvery)
				defer srv.Close()
				tail(b, srv, load.ops, load.workers, do(srv))
			})
		}
		if load.withoutHedging {
			run("no-hedging", func(srv *tailServer) func(context.Context) error {
				return func(ctx context.Context) error { return fetch(ctx, client, srv.URL) }
			})
		}
		run("retryguard", func(srv *tailServer) func(context.Context) error {
			ex, p := hedgedRead("hedged-read-" + load.name)
			return func(ctx context.Context) error {
				return ex.DoHedged(ctx, p.Policy.Name, nil, func(ctx context.Context, _ retry.Attempt) error { return fetch(ctx, client, srv.URL) })
			}
		})
		run("failsafe-go", func(srv *tailServer) func(context.Context) error {
			hp := hedgepolicy.NewBuilderWithDelay[any](hedgeDelay).WithMaxHedges(1).Build()
			return func(ctx context.Context) error {
				return failsafe.With[any](hp).WithContext(ctx).RunWithExecution(func(exec failsafe.Execution[any]) error {
					return fetch(exec.Context(), client, srv.URL)
				})
			}
		})
		client.CloseIdleConnections()
	}
}
