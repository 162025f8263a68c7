package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/retryguard/retryguard/hack/drills/fleet/depseries"
)

// config is the dependency's capacity and its overload behaviour.
type config struct {
	// Workers each complete one request per Service: the capacity is
	// Workers/Service requests a second.
	Workers int
	Service time.Duration
	// QueueLimit bounds the queue; a request that finds it full is shed.
	QueueLimit int
	// DropAfter: a worker drops, unapplied, a request that waited longer
	// (the client has long given up). Between the client's timeout and
	// DropAfter a worker still does the whole work for nobody: the wasted
	// work that keeps an overload going once retries fill the queue.
	DropAfter time.Duration
	// SlowBy is the latency the Slow trigger adds to every answer, and
	// RetryAfter the seconds the Throttle trigger's 429 asks for.
	SlowBy     time.Duration
	RetryAfter int
}

// defaults: 400 requests/s, a queue of two seconds of work, requests
// dropped after a second in it; the Slow trigger adds a second.
var defaults = config{Workers: 40, Service: 100 * time.Millisecond, QueueLimit: 800, DropAfter: time.Second, SlowBy: time.Second, RetryAfter: 1}

func (c config) capacity() int { return int(time.Duration(c.Workers) * time.Second / c.Service) }

func (c config) validate() error {
	switch {
	case c.Workers < 1:
		return fmt.Errorf("workers %d: want at least 1", c.Workers)
	case c.Service <= 0:
		return fmt.Errorf("service %v: want a positive duration", c.Service)
	case c.QueueLimit < 1:
		return fmt.Errorf("queue %d: want at least 1", c.QueueLimit)
	case c.DropAfter <= 0:
		return fmt.Errorf("drop-after %v: want a positive duration", c.DropAfter)
	case c.RetryAfter < 0:
		return fmt.Errorf("retry-after %d: want 0 or more seconds", c.RetryAfter)
	}
	return nil
}

// job is a queued request; done receives its status once a worker took it.
type job struct {
	key  string
	at   time.Time
	slow bool
	done chan int
}

// verdict is what the dependency does with an arriving request.
type verdict int

const (
	queued verdict = iota
	shed
	outage
	throttled
)

// dep is the dependency's state. Its methods take the time explicitly, so
// that the model runs on a virtual clock in tests as it does on the real
// one in the server.
type dep struct {
	cfg      config
	mu       sync.Mutex
	nonEmpty *sync.Cond
	start    time.Time
	secs     []depseries.Second
	seen     map[string]bool
	applied  map[string]bool
	queue    []*job
	trigger  string
	until    time.Time
	windows  []depseries.Window
}

func newDep(cfg config, now time.Time) *dep {
	d := &dep{cfg: cfg}
	d.nonEmpty = sync.NewCond(&d.mu)
	d.reset(now)
	return d
}

// reset begins a new series at the second now is in: the series' seconds
// are the clock's, the clients' budgets' seconds on the same node.
// Queued requests stay queued (they are served as before), but are
// counted in the new series only when applied.
func (d *dep) reset(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.start, d.secs, d.seen, d.applied, d.windows = now.Truncate(time.Second), nil, map[string]bool{}, map[string]bool{}, nil
}

// sec is the series' bucket for now; d.mu is held.
func (d *dep) sec(now time.Time) *depseries.Second {
	i := max(0, int(now.Sub(d.start)/time.Second))
	for len(d.secs) <= i {
		d.secs = append(d.secs, depseries.Second{})
	}
	return &d.secs[i]
}

// setTrigger switches kind on at now, until now+length.
func (d *dep) setTrigger(kind string, now time.Time, length time.Duration) (depseries.Window, error) {
	switch kind {
	case depseries.Outage, depseries.Throttle, depseries.Slow:
	default:
		return depseries.Window{}, fmt.Errorf("kind %q: want one of %v", kind, depseries.Kinds)
	}
	if length <= 0 {
		return depseries.Window{}, fmt.Errorf("for %v: want a positive duration", length)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.active(now) != "" {
		return depseries.Window{}, fmt.Errorf("trigger %s is still on until %s", d.trigger, d.until.Format(time.RFC3339Nano))
	}
	d.trigger, d.until = kind, now.Add(length)
	w := depseries.Window{Kind: kind, From: now.Sub(d.start).Seconds(), To: d.until.Sub(d.start).Seconds()}
	d.windows = append(d.windows, w)
	return w, nil
}

// active is the trigger on at now ("" for none); d.mu is held.
func (d *dep) active(now time.Time) string {
	if d.trigger != "" && now.Before(d.until) {
		return d.trigger
	}
	return ""
}

// arrive counts a request with key at now and decides its fate; a queued
// request's job is returned.
func (d *dep) arrive(key string, now time.Time) (verdict, *job) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.sec(now)
	s.Received++
	// A request without a key is a first attempt: nothing links it to another.
	if key != "" && d.seen[key] {
		s.Retry++
	} else {
		s.First++
		if key != "" {
			d.seen[key] = true
		}
	}
	trigger := d.active(now)
	switch {
	case trigger == depseries.Outage:
		s.Outage++
		return outage, nil
	case trigger == depseries.Throttle:
		s.Throttled++
		return throttled, nil
	case len(d.queue) >= d.cfg.QueueLimit:
		s.Shed++
		return shed, nil
	}
	j := &job{key: key, at: now, slow: trigger == depseries.Slow, done: make(chan int, 1)}
	d.queue = append(d.queue, j)
	s.MaxQueue = max(s.MaxQueue, len(d.queue))
	d.nonEmpty.Signal()
	return queued, j
}

// take pops the queue's head at now; stale says it waited past DropAfter,
// and was answered 503 unapplied. It returns nil when the queue is empty.
func (d *dep) take(now time.Time) (j *job, stale bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.takeLocked(now)
}

func (d *dep) takeLocked(now time.Time) (*job, bool) {
	if len(d.queue) == 0 {
		return nil, false
	}
	j := d.queue[0]
	d.queue[0] = nil
	d.queue = d.queue[1:]
	s := d.sec(now)
	wait := now.Sub(j.at)
	s.MaxWaitMs = max(s.MaxWaitMs, float64(wait)/float64(time.Millisecond))
	if wait > d.cfg.DropAfter {
		s.Stale++
		j.done <- http.StatusServiceUnavailable
		return j, true
	}
	return j, false
}

// finish applies j at now: a worker completed it.
func (d *dep) finish(j *job, now time.Time) {
	d.mu.Lock()
	s := d.sec(now)
	s.Applied++
	if j.key != "" {
		if d.applied[j.key] {
			s.Duplicates++
		}
		d.applied[j.key] = true
	}
	d.mu.Unlock()
	j.done <- http.StatusCreated
}

// queued is the queue's depth now.
func (d *dep) depth() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.queue)
}

func (d *dep) series() depseries.Series {
	d.mu.Lock()
	defer d.mu.Unlock()
	return depseries.Series{Capacity: d.cfg.capacity(), Start: d.start, Seconds: append([]depseries.Second{}, d.secs...),
		Triggers: append([]depseries.Window{}, d.windows...)}
}

// work is one worker: it takes the queue's head as soon as there is one,
// and spends Service on it unless it is stale.
func (d *dep) work(ctx context.Context) {
	for {
		d.mu.Lock()
		for len(d.queue) == 0 && ctx.Err() == nil {
			d.nonEmpty.Wait()
		}
		if ctx.Err() != nil {
			d.mu.Unlock()
			return
		}
		j, stale := d.takeLocked(time.Now())
		d.mu.Unlock()
		if stale {
			continue
		}
		time.Sleep(d.cfg.Service)
		d.finish(j, time.Now())
	}
}

// answer runs one request with key through the model, for either API:
// its status once the dependency has one (201 applied; 503 for an outage,
// a full queue or a stale job; 429 throttled), after SlowBy when the slow
// trigger was on at its arrival; or ctx's error when the client went
// first, which is owed no answer.
func (d *dep) answer(ctx context.Context, key string) (int, error) {
	v, j := d.arrive(key, time.Now())
	switch v {
	case outage, shed:
		return http.StatusServiceUnavailable, nil
	case throttled:
		return http.StatusTooManyRequests, nil
	}
	// The request stays queued, and is served, after its client gave up:
	// the dependency cannot know.
	var status int
	select {
	case status = <-j.done:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if j.slow {
		t := time.NewTimer(d.cfg.SlowBy)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return status, nil
}

// serve answers one request of the HTTP API; a throttled one's 429 asks
// for RetryAfter seconds.
func (d *dep) serve(w http.ResponseWriter, r *http.Request) {
	status, err := d.answer(r.Context(), r.Header.Get("Idempotency-Key"))
	if err != nil {
		return
	}
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", strconv.Itoa(d.cfg.RetryAfter))
	}
	w.WriteHeader(status)
}
