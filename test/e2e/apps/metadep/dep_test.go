package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/retryguard/retryguard/hack/drills/fleet/depseries"
	"github.com/retryguard/retryguard/hack/drills/fleet/naive"
)

// simOp is one simulated client operation: the attempts it made, the one
// in flight (its job, when queued, when it was sent, and when its answer
// arrives once a worker is done with it), or when its next one is due.
type simOp struct {
	n        int
	job      *job
	sentAt   time.Time
	answerAt time.Time
	status   int
	nextAt   time.Time
}

// simulate runs the dependency's model on a virtual clock, ms by ms: rate
// operations a second for length, each retried as naive.DelayAfter says
// when retries is set (3 × 3 × 3 attempts, fixed delays, INC-2901's shape)
// and tried once otherwise, each attempt timing out after timeout; the
// trigger is on from triggerAt for triggerFor. It returns the series.
func simulate(t *testing.T, cfg config, rate int, retries bool, timeout time.Duration, kind string,
	triggerAt, triggerFor, length time.Duration) depseries.Series {
	t.Helper()
	t0 := time.Date(2026, 9, 15, 0, 0, 0, 0, time.UTC)
	d := newDep(cfg, t0)
	type worker struct {
		j     *job
		until time.Time
	}
	workers := make([]worker, cfg.Workers)
	var ops []*simOp
	send := func(o *simOp, key string, now time.Time) {
		o.sentAt, o.answerAt, o.status = now, time.Time{}, 0
		v, j := d.arrive(key, now)
		o.job = j
		if v != queued {
			o.job = nil
		}
	}
	keys := map[*simOp]string{}
	next := 0
	const step = time.Millisecond
	for at := time.Duration(0); at < length; at += step {
		now := t0.Add(at)
		if at == triggerAt {
			if _, err := d.setTrigger(kind, now, triggerFor); err != nil {
				t.Fatal(err)
			}
		}
		for i := range workers {
			w := &workers[i]
			if w.j != nil && !now.Before(w.until) {
				d.finish(w.j, now)
				w.j = nil
			}
			for w.j == nil {
				j, stale := d.take(now)
				if j == nil {
					break
				}
				if !stale {
					w.j, w.until = j, now.Add(cfg.Service)
				}
			}
		}
		// Open-loop arrivals: operation n begins at n/rate seconds.
		for ; time.Duration(next)*time.Second/time.Duration(rate) <= at; next++ {
			o := &simOp{}
			keys[o] = "op-" + time.Duration(next).String()
			send(o, keys[o], now)
			ops = append(ops, o)
		}
		kept := ops[:0]
		for _, o := range ops {
			if !o.nextAt.IsZero() {
				if now.Before(o.nextAt) {
					kept = append(kept, o)
					continue
				}
				o.nextAt = time.Time{}
				send(o, keys[o], now)
			}
			failed := false
			switch {
			case o.job == nil: // refused at once
				failed = true
			case o.answerAt.IsZero() && len(o.job.done) > 0:
				o.status, o.answerAt = <-o.job.done, now
				if o.job.slow {
					o.answerAt = now.Add(cfg.SlowBy)
				}
			}
			switch {
			case failed:
			case now.Sub(o.sentAt) >= timeout:
				failed = true // the job may stay queued: the dependency cannot know
			case !o.answerAt.IsZero() && !now.Before(o.answerAt):
				if o.status == http.StatusCreated {
					continue // succeeded
				}
				failed = true
			}
			if failed {
				delay, ok := naive.DelayAfter(o.n)
				o.n++
				if !retries || !ok {
					continue
				}
				o.nextAt = now.Add(delay)
			}
			kept = append(kept, o)
		}
		ops = kept
	}
	return d.series()
}

// overAfter counts the seconds over capacity from the first whole second
// after the trigger's end to the end of the series.
func overAfter(s depseries.Series, end time.Duration) (over, total int) {
	for i := int((end + time.Second - 1) / time.Second); i < len(s.Seconds); i++ {
		total++
		if s.Seconds[i].Over(s.Capacity) {
			over++
		}
	}
	return over, total
}

// TestNaiveRetriesKeepTheOverloadAfterTheTrigger: 300 ops/s against 400/s
// of capacity. An 8 s trigger with 3×3×3 attempts per operation
// leaves the dependency over capacity every second until the end, 20 s
// later (the storm sustains itself: the trigger is gone); the same outage
// with no retries leaves it under capacity from the first second after.
func TestNaiveRetriesKeepTheOverloadAfterTheTrigger(t *testing.T) {
	for _, kind := range depseries.Kinds {
		t.Run(kind, func(t *testing.T) {
			const triggerAt, triggerFor, length = 5 * time.Second, 8 * time.Second, 33 * time.Second
			naive := simulate(t, defaults, 300, true, 500*time.Millisecond, kind, triggerAt, triggerFor, length)
			over, total := overAfter(naive, triggerAt+triggerFor)
			if total == 0 || over != total {
				t.Errorf("naive: over capacity in %d of the %d seconds after the trigger, want all: %+v", over, total, naive.Seconds)
			}
			var applied, firsts int
			for _, s := range naive.Seconds[15:] {
				applied, firsts = applied+s.Applied, firsts+s.First
			}
			if applied == 0 {
				t.Errorf("naive: the workers applied nothing after the trigger: the overload must be wasted work, not idle workers")
			}
			once := simulate(t, defaults, 300, false, 500*time.Millisecond, kind, triggerAt, triggerFor, length)
			if over, total := overAfter(once, triggerAt+triggerFor); over != 0 {
				t.Errorf("no retries: over capacity in %d of the %d seconds after the trigger, want none: %+v", over, total, once.Seconds)
			}
			for i, s := range once.Seconds[:int(triggerAt/time.Second)] {
				if s.Over(once.Capacity) || s.Received != s.First {
					t.Errorf("no retries, second %d before the trigger: %+v", i, s)
				}
			}
		})
	}
}

func TestConfigFromEnvNamesTheVariable(t *testing.T) {
	for env, want := range map[string]string{
		"WORKERS=x":      "$WORKERS",
		"SERVICE=fast":   "$SERVICE",
		"WORKERS=0":      "workers 0",
		"DROP_AFTER=-1s": "drop-after",
	} {
		name, value, _ := strings.Cut(env, "=")
		_, err := configFromEnv(defaults, func(k string) string {
			if k == name {
				return value
			}
			return ""
		})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error naming %s", env, err, want)
		}
	}
	c, err := configFromEnv(defaults, func(k string) string { return map[string]string{"WORKERS": "8", "SERVICE": "20ms"}[k] })
	if err != nil || c.capacity() != 400 {
		t.Errorf("WORKERS=8 SERVICE=20ms: %+v %v, want capacity 400", c, err)
	}
}

// server is the dependency on loopback with cfg.
func server(t *testing.T, cfg config) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv := httptest.NewServer(start(ctx, cfg))
	t.Cleanup(func() { srv.Close(); cancel() })
	return srv.URL
}

func post(t *testing.T, c *http.Client, url, key string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := c.Do(req)
	if err == nil {
		_ = res.Body.Close()
	}
	return res, err
}

func status(t *testing.T, url, key string) int {
	t.Helper()
	res, err := post(t, http.DefaultClient, url+"/v1/work", key)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode
}

func getJSON(t *testing.T, url string, out any) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}

// triggerOff waits until no trigger is on.
func triggerOff(t *testing.T, url string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var st struct{ Trigger string }
		if getJSON(t, url+"/state", &st); st.Trigger == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("trigger %s still on after 10 s", st.Trigger)
		}
	}
}

// onceApplied is the series once the dependency has applied a request:
// the latency spike's answer comes late, its work on time.
func onceApplied(t *testing.T, url string) depseries.Series {
	t.Helper()
	var s depseries.Series
	for deadline := time.Now().Add(10 * time.Second); total(s).Applied == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("nothing applied within 10 s: %+v", total(s))
		}
		getJSON(t, url+"/series", &s)
	}
	return s
}

// total sums the series' seconds.
func total(s depseries.Series) depseries.Second {
	var t depseries.Second
	for _, x := range s.Seconds {
		t.Received, t.First, t.Retry = t.Received+x.Received, t.First+x.First, t.Retry+x.Retry
		t.Applied, t.Duplicates = t.Applied+x.Applied, t.Duplicates+x.Duplicates
		t.Shed, t.Stale, t.Outage, t.Throttled = t.Shed+x.Shed, t.Stale+x.Stale, t.Outage+x.Outage, t.Throttled+x.Throttled
	}
	return t
}

func trigger(t *testing.T, url, kind, length string) {
	t.Helper()
	res, err := http.Post(url+"/trigger?kind="+kind+"&for="+length, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("trigger %s: %s", kind, res.Status)
	}
}

// TestCountsEveryRequestAReallientSends: through a real HTTP client, the
// series counts firsts and retries by key, applied requests and
// duplicates, and each trigger's answers.
func TestCountsEveryRequestARealClientSends(t *testing.T) {
	cfg := defaults
	cfg.Workers, cfg.Service, cfg.SlowBy = 2, 10*time.Millisecond, 300*time.Millisecond
	url := server(t, cfg)
	for _, key := range []string{"a", "a", "b", ""} {
		if got := status(t, url, key); got != http.StatusCreated {
			t.Fatalf("key %q: %d, want 201", key, got)
		}
	}
	trigger(t, url, depseries.Outage, "1h")
	if got := status(t, url, "c"); got != http.StatusServiceUnavailable {
		t.Fatalf("during the outage: %d, want 503", got)
	}
	res, err := http.Post(url+"/trigger?kind=throttle&for=1s", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Errorf("a second trigger while one is on: %s, want 400", res.Status)
	}
	var s depseries.Series
	getJSON(t, url+"/series", &s)
	got := total(s)
	want := depseries.Second{Received: 5, First: 4, Retry: 1, Applied: 4, Duplicates: 1, Outage: 1}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if len(s.Triggers) != 1 || s.Triggers[0].Kind != depseries.Outage || s.Capacity != 200 {
		t.Errorf("series: %+v", s)
	}

	// A new series: the throttle's 429 asks for Retry-After; the slow
	// trigger's answer comes after the client's timeout, and the work is
	// applied all the same.
	url = server(t, cfg)
	trigger(t, url, depseries.Throttle, "200ms")
	res, err = post(t, http.DefaultClient, url+"/v1/work", "d")
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") != "1" {
		t.Errorf("throttled: %s Retry-After %q, want 429 and 1", res.Status, res.Header.Get("Retry-After"))
	}
	triggerOff(t, url)
	trigger(t, url, depseries.Slow, "1h")
	_, err = post(t, &http.Client{Timeout: 100 * time.Millisecond}, url+"/v1/work", "e")
	var ne interface{ Timeout() bool }
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("during the latency spike: %v, want the client's timeout", err)
	}
	if got, want := total(onceApplied(t, url)), (depseries.Second{Received: 2, First: 2, Applied: 1, Throttled: 1}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// TestShedsWhenTheQueueIsFull: one worker busy, one request queued, the
// next is refused with 503 at once.
func TestShedsWhenTheQueueIsFull(t *testing.T) {
	cfg := defaults
	cfg.Workers, cfg.Service, cfg.QueueLimit = 1, 300*time.Millisecond, 1
	url := server(t, cfg)
	done := make(chan int, 2)
	depth := func() (n int) {
		var st struct{ Queue int }
		getJSON(t, url+"/state", &st)
		return st.Queue
	}
	go func() { done <- status(t, url, "busy") }()
	for s := (depseries.Series{}); total(s).Received == 0 || depth() != 0; getJSON(t, url+"/series", &s) {
		time.Sleep(time.Millisecond)
	}
	go func() { done <- status(t, url, "queued") }()
	for depth() != 1 {
		time.Sleep(time.Millisecond)
	}
	if got := status(t, url, "shed"); got != http.StatusServiceUnavailable {
		t.Errorf("with the queue full: %d, want 503", got)
	}
	<-done
	<-done
	var s depseries.Series
	getJSON(t, url+"/series", &s)
	if got := total(s); got.Shed != 1 || got.Applied != 2 || got.Received != 3 {
		t.Errorf("got %+v, want 3 received, 2 applied, 1 shed", got)
	}
}
