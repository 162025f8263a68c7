// Package inbound protects a service from its own callers' retries: rapid
// repeats of one idempotency key get 429 with Retry-After and an RFC 9457
// problem, so an upstream that retries immediately (INC-2901) is slowed down
// instead of amplified.
package inbound

import (
	"container/list"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/retryguard/retryguard/api/codes"
	"github.com/retryguard/retryguard/runtime/clock"
	"github.com/retryguard/retryguard/runtime/retry"
)

// Defaults of Guard.
const (
	DefaultHeader     = "Idempotency-Key"
	DefaultWindow     = 10 * time.Second
	DefaultMaxRepeats = 3 // the platform's three-attempt ceiling
	DefaultRetryAfter = 30 * time.Second
	DefaultMaxKeys    = 100_000
)

// Guard is HTTP middleware. Its zero value uses the defaults. It is safe for
// concurrent use.
type Guard struct {
	// Header carries the key (DefaultHeader).
	Header string
	// Window and MaxRepeats: more than MaxRepeats requests with one key
	// within Window are refused.
	Window     time.Duration
	MaxRepeats int
	// RetryAfter is what a refused caller is told to wait.
	RetryAfter time.Duration
	// MaxKeys bounds memory; the oldest windows are forgotten first.
	MaxKeys int
	Clock   clock.Clock

	mu    sync.Mutex
	seen  map[string]*list.Element // of *burst, oldest window first in order
	order list.List
}

type burst struct {
	key   string
	start time.Time
	count int
}

func (g *Guard) defaults() {
	if g.Header == "" {
		g.Header = DefaultHeader
	}
	if g.Window <= 0 {
		g.Window = DefaultWindow
	}
	if g.MaxRepeats <= 0 {
		g.MaxRepeats = DefaultMaxRepeats
	}
	if g.RetryAfter <= 0 {
		g.RetryAfter = DefaultRetryAfter
	}
	if g.MaxKeys <= 0 {
		g.MaxKeys = DefaultMaxKeys
	}
	if g.Clock == nil {
		g.Clock = clock.Real{}
	}
	if g.seen == nil {
		g.seen = map[string]*list.Element{}
	}
}

// Allow records one request with key and reports whether it may proceed.
func (g *Guard) Allow(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.defaults()
	now := g.Clock.Now()
	if e, ok := g.seen[key]; ok {
		b := e.Value.(*burst)
		if now.Sub(b.start) < g.Window {
			b.count++
			return b.count <= g.MaxRepeats
		}
		// A new window for this key: it becomes the newest.
		b.start, b.count = now, 1
		g.order.MoveToBack(e)
		return true
	}
	// The list is ordered by window start, so expired keys and, when the
	// table is full, the oldest key are at the front: O(1) per request.
	for front := g.order.Front(); front != nil; front = g.order.Front() {
		b := front.Value.(*burst)
		if now.Sub(b.start) < g.Window && len(g.seen) < g.MaxKeys {
			break
		}
		delete(g.seen, b.key)
		g.order.Remove(front)
	}
	g.seen[key] = g.order.PushBack(&burst{key: key, start: now, count: 1})
	return true
}

// Middleware refuses rapid repeats before they reach next. Requests without
// a key pass through.
func (g *Guard) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.defaults()
		header, window, max, after := g.Header, g.Window, g.MaxRepeats, g.RetryAfter
		g.mu.Unlock()
		key := r.Header.Get(header)
		if key == "" || g.Allow(key) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Retry-After", strconv.Itoa(int(after/time.Second)))
		retry.WriteProblem(w, retry.Problem{
			Type:     retry.ProblemType + string(codes.RetryLimitExceeded),
			Title:    "Too many attempts for one operation",
			Status:   http.StatusTooManyRequests,
			Code:     string(codes.RetryLimitExceeded),
			Detail:   fmt.Sprintf("more than %d requests with %s %q within %s; retry after %s", max, header, key, window, after),
			Instance: r.URL.Path,
		})
	})
}
