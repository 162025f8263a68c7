package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"

	"k8s.io/client-go/kubernetes"

	"github.com/retryguard/retryguard/internal/testenv"
	"github.com/retryguard/retryguard/runtime/deadletter"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch/informer"
)

// vendor is a scripted telephony API on loopback: each request takes the
// next scripted status (201 when the script is empty) and is logged.
type vendor struct {
	mu       sync.Mutex
	script   []int
	attempts int
	log      []string
}

func (v *vendor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	v.mu.Lock()
	code := http.StatusCreated
	if len(v.script) > 0 {
		code, v.script = v.script[0], v.script[1:]
	}
	v.attempts++
	v.log = append(v.log, fmt.Sprintf("vendor: %s %s, Idempotency-Key %s → %d", r.Method, r.URL.Path, r.Header.Get("Idempotency-Key"), code))
	v.mu.Unlock()
	if code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "10")
	}
	w.WriteHeader(code)
}

func (v *vendor) next(codes ...int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.script, v.log = append(v.script, codes...), nil
}

func (v *vendor) seen() (int, []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.attempts, v.log
}

// pod tells the last chapter: an application pod enforcing the published
// policy on its calls to the vendor.
func (s *story) pod(ctx context.Context, cluster *testenv.Cluster, dir string) error {
	ctx, stop := context.WithCancel(ctx) // ends the informer's watch before teardown
	defer stop()
	cs, err := kubernetes.NewForConfig(cluster.Config)
	if err != nil {
		return err
	}
	policies := informer.New(cs, "default")
	policies.Logger = slog.New(slog.DiscardHandler)
	if err := policies.Start(ctx); err != nil {
		return err
	}
	journalPath := filepath.Join(dir, "dead-letters.journal")
	journal, err := deadletter.Open(journalPath)
	if err != nil {
		return err
	}
	defer journal.Close()
	ex := retry.New(policies, retry.WithDeadLetters(journal))
	v := &vendor{}
	srv := httptest.NewServer(v)
	defer srv.Close()
	pools := &retry.Pools{}
	defer pools.CloseIdleConnections()
	client := &http.Client{Transport: &retry.RoundTripper{Executor: ex, Policy: "sms-2fa-dispatch", Pools: pools}}
	send := func(user string) (string, error) {
		ctx := retry.WithVars(ctx, retry.Vars{"user_id": user, "login_session_id": "s-9"})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/messages", strings.NewReader(`{"to":"+15550100"}`))
		res, err := client.Do(req)
		if err != nil {
			return "", err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		return res.Status, nil
	}
	report := func(status string, err error) {
		_, log := v.seen()
		for _, l := range log {
			fmt.Fprintln(s.w, "   "+l)
		}
		var re *retry.Error
		switch {
		case errors.As(err, &re):
			fmt.Fprintf(s.w, "   → %s (%s after %d attempt(s)): %s\n", re.Code, re.State, re.Attempts, re.Detail)
		case err != nil:
			fmt.Fprintf(s.w, "   → %v\n", err)
		default:
			fmt.Fprintf(s.w, "   → %s\n", status)
		}
	}

	s.note("Ordinary traffic: 30 logins, 30 SMS, nothing to retry. The budget learns the primary rate.")
	for i := range 30 {
		if _, err := send(fmt.Sprint(100 + i)); err != nil {
			return err
		}
	}
	attempts, _ := v.seen()
	fmt.Fprintf(s.w, "   → 30 SMS sent in %d attempts\n", attempts)

	s.note("A 503: the retry waits a jittered backoff and carries the same key, so the vendor can deduplicate.")
	v.next(http.StatusServiceUnavailable)
	report(send("42"))

	s.note("A 400 (a malformed number) is the caller's fault: returned at once, never retried.")
	v.next(http.StatusBadRequest)
	report(send("43"))

	s.note("A 429 asking for 10 s, more than retryAfter.maxDelay (3 s): fail fast rather than retry early.")
	v.next(http.StatusTooManyRequests)
	report(send("44"))

	s.note("The vendor goes down. Five logins would make 15 attempts; the budget allows 10% of recent primaries.")
	before, _ := v.seen()
	v.next(503, 503, 503, 503, 503, 503, 503, 503, 503, 503, 503, 503, 503, 503, 503)
	codes := map[string]int{}
	for i := range 5 {
		_, err := send(fmt.Sprint(200 + i))
		var re *retry.Error
		if errors.As(err, &re) {
			codes[string(re.Code)]++
		}
	}
	after, _ := v.seen()
	v.next() // clear the log; leftover script entries are harmless
	fmt.Fprintf(s.w, "   → %d attempts reached the vendor; outcomes: %v\n", after-before, codes)

	letters, err := deadletter.ReadAll(journalPath)
	if err != nil {
		return err
	}
	fmt.Fprintf(s.w, "   → %d operations are in the dead-letter journal for reconciliation, each with its key and evidence\n", len(letters))
	return nil
}
