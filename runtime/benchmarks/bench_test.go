// Package benchmarks compares the runtime's hot paths with peer libraries
// in one run. It is a module of its own so that the peers (failsafe-go,
// cenkalti/backoff, x/time/rate) never enter the module graph of an
// application that imports the runtime.
//
//	cd runtime/benchmarks && go test -run '^$' -bench . -benchmem -cpu 1,2
package benchmarks_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	backoffv5 "github.com/cenkalti/backoff/v5"
	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
	"github.com/retryguard/retryguard/runtime/budget"
	"github.com/retryguard/retryguard/runtime/clock"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
)

var smsVars = retry.Vars{"user_id": "42", "login_session_id": "s-9"}

// readPolicy is the benchmark's policy: three attempts of an idempotent GET
// with a budget, and no key template (a template costs one allocation per
// operation: the rendered key).
func readPolicy() (*retry.Executor, string) {
	p := fixtures.SMS()
	p.Policy.Name, p.Policy.Operation, p.Policy.KeyTemplate = "ledger-read", "GET /v1/balance", ""
	return retry.New(watch.NewStatic(p)), p.Policy.Name
}

// The caller's request context already carries a deadline sooner than the
// policy's, as a server's does: Do then needs no timer of its own.
func requestContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Second)
}

func ok(context.Context, retry.Attempt) error { return nil }

// processStart and sinceStart are clock-read-paired's reading, kept where
// the compiler cannot drop it.
var (
	processStart = time.Now()
	sinceStart   time.Duration
)

// paired runs peer and ours alternately, block ops at a time, timing each
// block, so that a load that comes and goes on a shared machine weighs on
// both alike. It reports medians over the pairs of blocks, which a block
// preempted by another process does not move: each side's ns/op, ours minus
// the peer's, and ours over the peer's.
func paired(b *testing.B, block int, peer, ours func()) {
	var tp, to, delta, ratio []float64
	for b.Loop() {
		start := time.Now()
		for range block {
			peer()
		}
		mid := time.Now()
		for range block {
			ours()
		}
		p, o := float64(mid.Sub(start))/float64(block), float64(time.Since(mid))/float64(block)
		tp, to, delta, ratio = append(tp, p), append(to, o), append(delta, o-p), append(ratio, o/p)
	}
	median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	b.ReportMetric(median(tp), "peer-ns/op")
	b.ReportMetric(median(to), "ours-ns/op")
	b.ReportMetric(median(delta), "delta-ns/op")
	b.ReportMetric(median(ratio), "ratio")
}

// BenchmarkDoSuccess compares the success path of one logical operation with
// two peer libraries configured for the same three attempts.
func BenchmarkDoSuccess(b *testing.B) {
	ctx, cancel := requestContext()
	defer cancel()
	b.Run("retryguard", func(b *testing.B) {
		ex, name := readPolicy()
		b.ReportAllocs()
		for b.Loop() {
			_ = ex.Do(ctx, name, nil, ok)
		}
	})
	b.Run("retryguard-metrics", func(b *testing.B) {
		p := fixtures.SMS()
		p.Policy.Name, p.Policy.Operation, p.Policy.KeyTemplate = "ledger-read", "GET /v1/balance", ""
		ex := retry.New(watch.NewStatic(p), retry.WithMetrics(retry.NewMetrics(prometheus.NewRegistry())))
		b.ReportAllocs()
		for b.Loop() {
			_ = ex.Do(ctx, p.Policy.Name, nil, ok)
		}
	})
	// Do with metrics (ours) against Do without (the peer), interleaved.
	b.Run("metrics-paired", func(b *testing.B) {
		plain, name := readPolicy()
		p := fixtures.SMS()
		p.Policy.Name, p.Policy.Operation, p.Policy.KeyTemplate = "ledger-read", "GET /v1/balance", ""
		metered := retry.New(watch.NewStatic(p), retry.WithMetrics(retry.NewMetrics(prometheus.NewRegistry())))
		paired(b, 256, func() { _ = plain.Do(ctx, name, nil, ok) }, func() { _ = metered.Do(ctx, name, nil, ok) })
	})
	// Do followed by one monotonic clock reading (ours) against Do alone
	// (the peer): what the reading an operation's duration ends with costs
	// on this machine, the floor of metrics-paired's delta.
	b.Run("clock-read-paired", func(b *testing.B) {
		plain, name := readPolicy()
		paired(b, 256, func() { _ = plain.Do(ctx, name, nil, ok) }, func() { _ = plain.Do(ctx, name, nil, ok); sinceStart = time.Since(processStart) })
	})
	b.Run("retryguard-keyed", func(b *testing.B) {
		p := fixtures.SMS()
		ex := retry.New(watch.NewStatic(p))
		b.ReportAllocs()
		for b.Loop() {
			_ = ex.Do(ctx, p.Policy.Name, smsVars, ok)
		}
	})
	b.Run("failsafe-go", func(b *testing.B) {
		exec := failsafe.With[any](retrypolicy.NewBuilder[any]().WithMaxAttempts(3).WithBackoff(100*time.Millisecond, 3*time.Second).Build()).WithContext(ctx)
		b.ReportAllocs()
		for b.Loop() {
			_ = exec.Run(func() error { return nil })
		}
	})
	// Do (ours) against failsafe-go's success path (the peer), interleaved.
	b.Run("failsafe-paired", func(b *testing.B) {
		ex, name := readPolicy()
		exec := failsafe.With[any](retrypolicy.NewBuilder[any]().WithMaxAttempts(3).WithBackoff(100*time.Millisecond, 3*time.Second).Build()).WithContext(ctx)
		paired(b, 256, func() { _ = exec.Run(func() error { return nil }) }, func() { _ = ex.Do(ctx, name, nil, ok) })
	})
	b.Run("cenkalti-backoff", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = backoffv5.Retry(ctx, func() (struct{}, error) { return struct{}{}, nil },
				backoffv5.WithBackOff(backoffv5.NewExponentialBackOff()), backoffv5.WithMaxTries(3))
		}
	})
}

// BenchmarkRoundTripper compares a loopback GET through the RoundTripper
// with the same GET through a bare http.Transport, in one run against one
// real server: the cost of running each request as a governed operation
// (the executor, the request copy, the attempt's context, the trace that
// proves dispatch and refuses net/http's hidden re-sends).
func BenchmarkRoundTripper(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"balance":42}`)
	}))
	defer srv.Close()
	// Each request has its own context with a deadline, as a server's
	// request context does: the peers pay the same for it.
	get := func(b *testing.B, rt http.RoundTripper) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, cancel := requestContext()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/balance", nil)
			res, err := rt.RoundTrip(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
			cancel()
		}
	}
	b.Run("bare-transport", func(b *testing.B) {
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		get(b, tr)
	})
	b.Run("retryguard", func(b *testing.B) {
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		ex, name := readPolicy()
		get(b, &retry.RoundTripper{Executor: ex, Policy: name, Base: tr})
	})
	// The two, interleaved request by request.
	b.Run("paired", func(b *testing.B) {
		bare, tr := &http.Transport{}, &http.Transport{}
		defer bare.CloseIdleConnections()
		defer tr.CloseIdleConnections()
		ex, name := readPolicy()
		rt := &retry.RoundTripper{Executor: ex, Policy: name, Base: tr}
		one := func(rt http.RoundTripper) func() {
			return func() {
				ctx, cancel := requestContext()
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/balance", nil)
				res, err := rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, res.Body)
				_ = res.Body.Close()
			}
		}
		paired(b, 1, one(bare), one(rt))
	})
}

// canned answers every request at once with the same small response, in
// memory: BenchmarkRoundTripperOverhead's Base, so that the pair measures
// the RoundTripper's own cost with no network noise.
type canned struct{}

func (canned) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}, Request: req}, nil
}

// BenchmarkRoundTripperOverhead is BenchmarkRoundTripper without the
// network: the same GET, through the RoundTripper or straight to its Base.
func BenchmarkRoundTripperOverhead(b *testing.B) {
	get := func(b *testing.B, rt http.RoundTripper) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, cancel := requestContext()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://ledger.internal/v1/balance", nil)
			res, err := rt.RoundTrip(req)
			if err != nil {
				b.Fatal(err)
			}
			_ = res.Body.Close()
			cancel()
		}
	}
	b.Run("base", func(b *testing.B) { get(b, canned{}) })
	b.Run("retryguard", func(b *testing.B) {
		ex, name := readPolicy()
		get(b, &retry.RoundTripper{Executor: ex, Policy: name, Base: canned{}})
	})
}

// BenchmarkBudget measures the budget's operations against x/time/rate's
// Allow, one limiter decision (the peer). The -paired benchmarks run on one
// goroutine, interleaved with the peer (see paired); the others run
// RunParallel, for contention under -cpu 2.
func BenchmarkBudget(b *testing.B) {
	cfg := budget.Config{RetryPercent: 10, Window: time.Minute, MaxTokens: 10, Partitions: 1}
	// warm is a budget whose window holds a million primaries: the ratio
	// allows 100,000 retries, and the tokens decide most of them.
	warm := func() *budget.Budget {
		bud := budget.New(cfg, clock.Real{})
		now := time.Now()
		for range 1_000_000 {
			bud.PrimaryAt(now)
		}
		return bud
	}
	newLimiter := func() *rate.Limiter { return rate.NewLimiter(rate.Limit(1e9), 1000) }
	b.Run("success-path", func(b *testing.B) { // what every successful operation pays
		bud := budget.New(cfg, clock.Real{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				bud.Primary()
				bud.Success()
			}
		})
	})
	b.Run("try-retry", func(b *testing.B) { // what a failure that wants a retry pays
		bud := warm()
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				bud.TryRetry()
				bud.Success()
			}
		})
	})
	b.Run("x-time-rate-allow", func(b *testing.B) {
		lim := newLimiter()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				lim.Allow()
			}
		})
	})
	// Primary and Success, each reading its own clock, against Allow.
	b.Run("success-path-paired", func(b *testing.B) {
		bud, lim := budget.New(cfg, clock.Real{}), newLimiter()
		paired(b, 256, func() { lim.Allow() }, func() { bud.Primary(); bud.Success() })
	})
	// TryRetry and Success against Allow: a decision under the budget's
	// mutex, on its own clock reading, against one under the limiter's.
	b.Run("try-retry-paired", func(b *testing.B) {
		bud, lim := warm(), newLimiter()
		b.ResetTimer()
		paired(b, 256, func() { lim.Allow() }, func() { bud.TryRetry(); bud.Success() })
	})
}
