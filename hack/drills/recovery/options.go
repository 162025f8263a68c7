package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/retryguard/retryguard/api/codes"
	"github.com/retryguard/retryguard/runtime/retry"
)

// body is the message every attempt posts.
var body = []byte(`{"to":"+15550100","template":"2fa"}`)

// outcome is how one logical operation ended.
type outcome uint8

const (
	pending outcome = iota
	dispatched
	failed        // ended without a 201; Option C dead-letters it
	budgetDenied  // failed because the retry budget refused a retry
	notConsidered // never offered
)

// option is one retry strategy under test, with its own vendor.
type option struct {
	Name   string
	Label  string
	vendor *vendor
	url    string
	// do runs operation op to its end.
	do func(ctx context.Context, op int) outcome

	mu     sync.Mutex
	ended  []second // by the second an operation ended: Primary=dispatched, Retries=failed, Status429=budget denials
	result []outcome
}

func (o *option) finish(op int, since time.Duration, out outcome) {
	sec := int(since / time.Second)
	o.mu.Lock()
	defer o.mu.Unlock()
	for sec >= len(o.ended) {
		o.ended = append(o.ended, second{})
	}
	o.result[op] = out
	switch out {
	case dispatched:
		o.ended[sec].Primary++
	case budgetDenied:
		o.ended[sec].Status429++
		fallthrough
	default:
		o.ended[sec].Retries++
	}
}

func (o *option) endedIn(i int) second {
	o.mu.Lock()
	defer o.mu.Unlock()
	if i < len(o.ended) {
		return o.ended[i]
	}
	return second{}
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

// optionA is the developers' proposal: 5 attempts, 500 ms constant, no budget.
func optionA(url string) func(context.Context, int) outcome {
	return loop(transport(loopConns), url, 5, func(int) time.Duration { return 500 * time.Millisecond })
}

// optionB is exponential backoff without jitter: 3 attempts, 100 ms × 2^n, no budget.
func optionB(url string) func(context.Context, int) outcome {
	return loop(transport(loopConns), url, 3, func(n int) time.Duration { return 100 * time.Millisecond << n })
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

// maxInFlight bounds each option's concurrent operations. An operation
// lives at most a few seconds, so at 1,200/s a few thousand are in flight;
// reaching the bound delays arrivals, which the generator reports as late.
const maxInFlight = 20000

// generate offers rps operations a second, open-loop, from start until
// duration: operation i is due at start + i/rps whatever the vendor does,
// and a late loop catches up at once. It returns when every operation has
// ended, with the lateness of the arrivals.
func generate(ctx context.Context, start time.Time, rps int, duration time.Duration, opts []*option) generatorReport {
	total := int(duration.Seconds() * float64(rps))
	due := func(i int) time.Duration { return time.Duration(int64(i) * int64(time.Second) / int64(rps)) }
	var wg sync.WaitGroup
	sems := make([]chan struct{}, len(opts))
	for i := range sems {
		sems[i] = make(chan struct{}, maxInFlight)
	}
	var g generatorReport
	for i := 0; i < total && ctx.Err() == nil; {
		now := time.Since(start)
		for ; i < total && due(i) <= now; i++ {
			late := now - due(i)
			g.MaxLateMs = max(g.MaxLateMs, float64(late)/float64(time.Millisecond))
			if late > 10*time.Millisecond {
				g.LateOver10ms++
			}
			op := i
			for k, o := range opts {
				sems[k] <- struct{}{}
				wg.Go(func() {
					defer func() { <-sems[k] }()
					out := o.do(ctx, op)
					o.finish(op, time.Since(start), out)
				})
			}
		}
		if i < total {
			time.Sleep(max(due(i)-time.Since(start), 500*time.Microsecond))
		}
	}
	wg.Wait()
	return g
}
