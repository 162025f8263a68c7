// Package inbound protects a service from its own callers' retries: rapid
// repeats of one idempotency key get 429 with Retry-After and an RFC 9457
// problem, so an upstream that retries immediately (INC-2901) is slowed down
// instead of amplified.
package inbound

import (
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
	// MaxKeys bounds memory; the oldest keys are forgotten first.
	MaxKeys int
	Clock   clock.Clock

	mu   sync.Mutex
	seen map[string]*burst
}

type burst struct {
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
		g.seen = map[string]*burst{}
	}
}

// Allow records one request with key and reports whether it may proceed.
func (g *Guard) Allow(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.defaults()
	now := g.Clock.Now()
	b, ok := g.seen[key]
	if !ok || now.Sub(b.start) >= g.Window {
		if !ok && len(g.seen) >= g.MaxKeys {
			g.evict(now)
		}
		g.seen[key] = &burst{start: now, count: 1}
		return true
	}
	b.count++
	return b.count <= g.MaxRepeats
}

// evict drops expired keys, and the oldest one when none has expired.
func (g *Guard) evict(now time.Time) {
	var oldest string
	var oldestAt time.Time
	for k, b := range g.seen {
		if now.Sub(b.start) >= g.Window {
			delete(g.seen, k)
			continue
		}
		if oldest == "" || b.start.Before(oldestAt) {
			oldest, oldestAt = k, b.start
		}
	}
	if len(g.seen) >= g.MaxKeys {
		delete(g.seen, oldest)
	}
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
