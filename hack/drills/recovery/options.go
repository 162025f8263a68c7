package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/retry"
)

// body is the message every attempt posts.
var body = []byte(`{"to":"+15550100","template":"2fa"}`)

// outcome is how one logical operation ended.
type outcome uint8

const (
	pending    outcome = iota // not ended (an operation still pending at the end is lost)
	dispatched                // answered 201
	failed                    // ended without a 201; Option C dead-letters it
	// budgetDenied: failed because the retry budget refused a retry.
	budgetDenied
)

// endings counts the operations that ended in one second.
type endings struct {
	Dispatched, Failed, BudgetDenied int
}

// option is one retry strategy under test, with its own vendor.
type option struct {
	Name   string
	Label  string
	vendor *vendor
	url    string
	// transport sends Options A's and B's attempts; C's go through its policy's pool.
	transport *http.Transport
	// do runs operation op to its end.
	do func(ctx context.Context, op int) outcome

	mu     sync.Mutex
	ended  []endings // by the second operations ended in
	result []outcome
}

func (o *option) finish(op int, since time.Duration, out outcome) {
	sec := int(since / time.Second)
	o.mu.Lock()
	defer o.mu.Unlock()
	for sec >= len(o.ended) {
		o.ended = append(o.ended, endings{})
	}
	o.result[op] = out
	switch out {
	case dispatched:
		o.ended[sec].Dispatched++
	case budgetDenied:
		o.ended[sec].BudgetDenied++
		fallthrough
	default:
		o.ended[sec].Failed++
	}
}

func (o *option) endedIn(i int) endings {
	o.mu.Lock()
	defer o.mu.Unlock()
	if i < len(o.ended) {
		return o.ended[i]
	}
	return endings{}
}

// transport is a client to the loopback vendor with at most conns
// connections, speaking HTTP/2 without TLS (prior knowledge), as a carrier's
// API over HTTPS would: one connection carries many attempts at once, so a
// 50-connection pool is not a ceiling of 50 attempts in flight.
func transport(conns int) *http.Transport {
	t := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: time.Second}).DialContext,
		MaxConnsPerHost:     conns,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
		Protocols:           new(http.Protocols),
	}
	t.Protocols.SetUnencryptedHTTP2(true)
	return t
}

// loopConns is the connection pool of Options A and B, which name none:
// enough that their own queueing does not hide their amplification.
const loopConns = 256

func key(op int) string { return keyPrefix + strconv.Itoa(op) + "-drill" }

// post sends one attempt and returns its status (0 on a transport error).
func post(ctx context.Context, rt http.RoundTripper, url string, op int) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header.Set("Idempotency-Key", key(op))
	res, err := rt.RoundTrip(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return res.StatusCode
}

// loop is a plain retry loop: attempts in all, sleeping wait(n) after the
// n-th failure. Options A and B are such loops, with no budget.
func loop(rt http.RoundTripper, url string, attempts int, wait func(n int) time.Duration) func(context.Context, int) outcome {
	return func(ctx context.Context, op int) outcome {
		for n := 1; n <= attempts; n++ {
			if post(ctx, rt, url, op) == http.StatusCreated {
				return dispatched
			}
			if n < attempts {
				time.Sleep(wait(n))
			}
		}
		return failed
	}
}

// warm opens each option's connections before the load starts, through
// the transport its attempts will use, so that the first second measures
// the policy rather than connection setup.
func warm(ctx context.Context, opts []*option, rt *retry.RoundTripper, p *policyconfig.Payload) error {
	for _, o := range opts {
		t := o.transport
		if o.Name == "C" {
			pooled, err := rt.Pools.Transport(&p.Policy)
			if err != nil {
				return err
			}
			t = pooled
		}
		url := strings.TrimSuffix(o.url, "/v1/messages") + warmPath
		for range 4 {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return err
			}
			res, err := t.RoundTrip(req)
			if err != nil {
				return fmt.Errorf("opening a connection to option %s's vendor: %w", o.Name, err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
		}
	}
	return nil
}

// optionA is the developers' proposal: 5 attempts, 500 ms constant, no budget.
func optionA(t http.RoundTripper, url string) func(context.Context, int) outcome {
	return loop(t, url, 5, func(int) time.Duration { return 500 * time.Millisecond })
}

// optionB is exponential backoff without jitter: 3 attempts, 100 ms × 2^n, no budget.
func optionB(t http.RoundTripper, url string) func(context.Context, int) outcome {
	return loop(t, url, 3, func(n int) time.Duration { return 100 * time.Millisecond << n })
}

// optionC is Retryguard: each operation one RoundTrip through
// retry.RoundTripper under the published policy, on the policy's own pool.
func optionC(rt *retry.RoundTripper, url string) func(context.Context, int) outcome {
	return func(ctx context.Context, op int) outcome {
		ctx = retry.WithVars(ctx, retry.Vars{"user_id": strconv.Itoa(op), "login_session_id": "drill"})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return failed
		}
		res, err := rt.RoundTrip(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
			if res.StatusCode == http.StatusCreated {
				return dispatched
			}
			return failed
		}
		var re *retry.Error
		if errors.As(err, &re) && re.Code == codes.RetryBudgetExhausted {
			return budgetDenied
		}
		return failed
	}
}

// maxWorkers bounds each option's workers, so its operations in flight. An
// operation lives a few seconds at most, so at 1,200/s a few thousand run at
// once; past the bound, arrivals wait for a worker and count as late.
const maxWorkers = 12000

// pool is one option's elastic pool of workers: a worker runs operations one
// after another, so its stack, grown by the HTTP stack once, is reused
// rather than grown again for every operation.
type pool struct {
	o       *option
	ops     chan int
	workers int
	wg      sync.WaitGroup
}

// offer hands op to an idle worker, or to a new one while under the bound,
// or else waits for one.
func (p *pool) offer(op int, work func(int)) {
	select {
	case p.ops <- op:
		return
	default:
	}
	if p.workers < maxWorkers {
		p.workers++
		p.wg.Go(func() {
			work(op)
			for op := range p.ops {
				work(op)
			}
		})
		return
	}
	p.ops <- op
}

// generate offers rps operations a second, open-loop, from start until
// duration: operation i is due at start + i/rps whatever the vendor does,
// and a late schedule catches up at once. It returns when every operation
// has ended, with how late operations began against their schedule.
func generate(ctx context.Context, start time.Time, rps int, duration time.Duration, opts []*option) generatorReport {
	total := int(duration.Seconds() * float64(rps))
	due := func(i int) time.Duration { return time.Duration(int64(i) * int64(time.Second) / int64(rps)) }
	var mu sync.Mutex
	var g generatorReport
	pools := make([]*pool, len(opts))
	works := make([]func(int), len(opts))
	for k, o := range opts {
		pools[k] = &pool{o: o, ops: make(chan int)}
		works[k] = func(op int) {
			began := time.Since(start)
			if late := began - due(op); late > 10*time.Millisecond {
				mu.Lock()
				g.MaxLateMs = max(g.MaxLateMs, ms(late))
				g.LateOver10ms++
				mu.Unlock()
			}
			out := o.do(ctx, op)
			o.finish(op, time.Since(start), out)
		}
	}
	for i := 0; i < total && ctx.Err() == nil; {
		now := time.Since(start)
		for ; i < total && due(i) <= now; i++ {
			for k := range pools {
				pools[k].offer(i, works[k])
			}
		}
		if i < total {
			time.Sleep(max(due(i)-time.Since(start), 500*time.Microsecond))
		}
	}
	for _, p := range pools {
		close(p.ops)
		p.wg.Wait()
		g.Workers = max(g.Workers, p.workers)
	}
	return g
}
