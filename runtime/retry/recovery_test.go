package retry

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/retryguard/retryguard/runtime/clock"
)

// The recovery drill's mark, as a pod sees it (docs/metrics.md "Recovery
// lag"): after a fault (60% of primaries failing), retries must drop under 2 a
// second within 2.5 s of its end, and ALERT_RETRY_RECOVERY_LAG fires past 5 s.
// A fault that ends with its retries gives a recovery of a second (the window
// its last retries fall in); retries that go on 6 s past the fault's end show
// as a lag that grows while they last, then as a 6 s recovery.
func TestRecoveryLagIsMeasuredFromTheFaultsEnd(t *testing.T) {
	for _, tc := range []struct {
		name       string
		retriesTil time.Duration // retries at 5 a second go on until then
		lagAt      map[time.Duration]time.Duration
		recovery   time.Duration
	}{
		{"recovers", 3400 * time.Millisecond,
			map[time.Duration]time.Duration{3500 * time.Millisecond: 0, 4500 * time.Millisecond: time.Second, 5500 * time.Millisecond: 0}, time.Second},
		{"lags", 9 * time.Second, map[time.Duration]time.Duration{6500 * time.Millisecond: 3 * time.Second, 8500 * time.Millisecond: 5 * time.Second,
			9500 * time.Millisecond: 6 * time.Second, 10500 * time.Millisecond: 0}, 6 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			clk := clock.NewFake(epoch)
			pm := NewMetrics(reg).forPolicy("sms", clk)
			gather := func() (lag float64, h *dto.Histogram) {
				families, err := reg.Gather()
				if err != nil {
					t.Fatal(err)
				}
				for _, mf := range families {
					switch mf.GetName() {
					case "retryguard_recovery_lag_seconds":
						lag = mf.GetMetric()[0].GetGauge().GetValue()
					case "retryguard_recovery_seconds":
						h = mf.GetMetric()[0].GetHistogram()
					}
				}
				return lag, h
			}
			// Every 100 ms: 10 primaries, 6 of them failing during the 3 s
			// fault; 5 retries a second until retriesTil.
			for at := time.Duration(0); at < 11*time.Second; at += 100 * time.Millisecond {
				clk.Set(epoch.Add(at))
				for i := range 10 {
					if at < 3*time.Second && i < 6 {
						pm.primaryFailed(Transient, clk.Now())
					} else {
						pm.succeededFirst(time.Millisecond)
					}
				}
				if at < tc.retriesTil && at%(200*time.Millisecond) == 0 {
					pm.retried(clk.Now())
				}
				if want, ok := tc.lagAt[at]; ok {
					if lag, _ := gather(); lag != want.Seconds() {
						t.Errorf("at %s: lag %v s, want %v", at, lag, want.Seconds())
					}
				}
				if _, h := gather(); at < tc.retriesTil && h.GetSampleCount() != 0 {
					t.Fatalf("at %s, retries still at 5/s: a recovery was recorded: %v", at, h)
				}
			}
			lag, h := gather()
			if lag != 0 || h.GetSampleCount() != 1 || h.GetSampleSum() != tc.recovery.Seconds() {
				t.Fatalf("lag %v, recoveries %v; want one of %s", lag, h, tc.recovery)
			}
			for _, b := range h.GetBucket() {
				if within := b.GetCumulativeCount() == 1; within != (b.GetUpperBound() >= tc.recovery.Seconds()) {
					t.Errorf("bucket le=%v holds %d", b.GetUpperBound(), b.GetCumulativeCount())
				}
			}
		})
	}
}

// A fault that lasts, and a dependency whose baseline errors are retried,
// record no recovery and no lag: retries that the second's own failures call
// for are the baseline.
func TestRecoveryIgnoresLastingFaultsAndBaselineErrors(t *testing.T) {
	for name, failEvery := range map[string]int{"lasting fault (50%)": 2, "baseline errors (0.5%)": 200} {
		reg := prometheus.NewRegistry()
		clk := clock.NewFake(epoch)
		pm := NewMetrics(reg).forPolicy("sms", clk)
		n := 0
		for at := time.Duration(0); at < 10*time.Second; at += 10 * time.Millisecond {
			clk.Set(epoch.Add(at))
			for range 10 { // 1,000 primaries a second
				if n++; n%failEvery == 0 {
					pm.primaryFailed(Transient, clk.Now())
					pm.retried(clk.Now())
				} else {
					pm.succeededFirst(time.Millisecond)
				}
			}
		}
		_, done := pm.recoveryNow()
		if lag, _ := pm.recoveryNow(); lag != 0 || done.count() != 0 {
			t.Errorf("%s: lag %s, %d recoveries", name, lag, done.count())
		}
	}
}

// Through Do: 2 s of primaries failing with 503, then 2 s of successes, on the
// executor's virtual clock. The fault's end is seen, and its recovery is
// recorded when the metrics are collected, with no operation after it.
func TestRecoveryIsRecordedThroughDo(t *testing.T) {
	reg := prometheus.NewRegistry()
	p := smsPolicy()
	clk := clock.NewVirtual(epoch)
	ex := New(staticSource{p.Policy.Name: p}, WithClock(clk), WithMetrics(NewMetrics(reg)))
	for at := time.Duration(0); at < 4*time.Second; at = clk.Now().Sub(epoch) {
		clk.Advance(50 * time.Millisecond)
		_ = ex.Do(context.Background(), p.Policy.Name, smsVars, func(_ context.Context, a Attempt) error {
			if at < 2*time.Second && a.Number == 1 {
				return Status(503, "")
			}
			return nil
		})
	}
	clk.Advance(2 * time.Second)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() == "retryguard_recovery_seconds" {
			if h := mf.GetMetric()[0].GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() > 1 {
				t.Fatalf("recoveries %v, want one within a second of the fault's end", h)
			}
			return
		}
	}
	t.Fatal("no retryguard_recovery_seconds")
}
