// Package inbound protects a service from its own callers' retries: rapid
// repeats of one idempotency key by one caller get 429 with Retry-After and
// an RFC 9457 problem, so an upstream that retries immediately (INC-2901) is
// slowed down instead of amplified.
//
// Repeats are counted per caller: the key is the caller's identity (the
// client's address, or a principal the application authenticated) together
// with the idempotency key, so a third party that sends a victim's
// predictable key spends only its own repeats, never the victim's
// (docs/security.md, tenant boundaries).
//
// The guard's memory is bounded in keys (MaxKeys) and in bytes (MaxBytes),
// the oldest windows going first. A key longer than MaxKeyBytes is kept as
// its SHA-256 digest rather than refused: a caller with long keys keeps
// working, repeats of a long key are still counted apart from every other
// key, and no caller can make one entry large. A refusal names the key by
// its first few bytes only, since a key may be a secret or an attacker's
// payload.
package inbound

import (
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/httprules"
	"github.com/retryguard/retryguard/contract/limits"
	"github.com/retryguard/retryguard/runtime/clock"
)

// Defaults of Guard.
const (
	DefaultHeader     = "Idempotency-Key"
	DefaultWindow     = 10 * time.Second
	DefaultMaxRepeats = int(limits.MaxAttemptsCeiling) // the platform's three-attempt ceiling
	DefaultRetryAfter = 30 * time.Second
	DefaultMaxKeys    = 100_000
	DefaultMaxBytes   = 16 << 20
	// DefaultMaxKeyBytes is the longest key kept as it is; a UUID or a
	// templated key such as SMS-2FA-{user_id}-{session} fits many times.
	DefaultMaxKeyBytes = 128
)

// echoedKeyBytes is how much of a key a refusal shows.
const echoedKeyBytes = 16

// entryOverhead estimates what one key costs besides its bytes: its map
// entry, list element and burst.
const entryOverhead = 160

// digestPrefix marks a stored key that is the digest of a long one.
const digestPrefix = "sha256:"

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
	// MaxKeys and MaxBytes bound memory, in keys and in bytes (each key's
	// length and entryOverhead); the oldest windows are forgotten first.
	MaxKeys  int
	MaxBytes int
	// MaxKeyBytes is the longest key kept as it is (the caller's identity
	// and the idempotency key together); longer ones are kept as their
	// SHA-256 digest.
	MaxKeyBytes int
	// Caller names who sent r: an authenticated principal (a client
	// certificate's subject, a verified token's subject). Nil or "" is the
	// client's address (the host of r.RemoteAddr). Name a forwarded address only when a
	// proxy you trust sets it: a caller chooses its own headers. Behind a
	// sidecar (Istio, any local proxy) every request comes from the proxy's
	// loopback address, so the address names no caller: name the peer the
	// sidecar authenticated (its mTLS identity, in the element of
	// X-Forwarded-Client-Cert that the sidecar itself added, never one the
	// caller sent), or every caller shares one count.
	Caller func(r *http.Request) string
	Clock  clock.Clock

	mu    sync.Mutex
	seen  map[string]*list.Element // of *burst, oldest window first in order
	order list.List
	bytes int // what seen holds, as entryCost counts it
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
	if g.MaxBytes <= 0 {
		g.MaxBytes = DefaultMaxBytes
	}
	if g.MaxKeyBytes <= 0 {
		g.MaxKeyBytes = DefaultMaxKeyBytes
	}
	if g.Clock == nil {
		g.Clock = clock.Real{}
	}
	if g.seen == nil {
		g.seen = map[string]*list.Element{}
	}
}

// clientAddress is the host of r.RemoteAddr, without the port (a caller
// opens new connections from new ports).
func clientAddress(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// Allow records one request by caller with key and reports whether it may
// proceed. Repeats of one key by different callers are counted apart.
func (g *Guard) Allow(caller, key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.defaults()
	// The caller's length first, so that no pair of caller and key spells
	// another pair.
	key = strconv.Itoa(len(caller)) + ":" + caller + key
	if len(key) > g.MaxKeyBytes {
		sum := sha256.Sum256([]byte(key))
		key = digestPrefix + hex.EncodeToString(sum[:])
	}
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
	cost := entryCost(key)
	// The list is ordered by window start, so expired keys and, when the
	// table is full, the oldest keys are at the front: O(1) per request.
	for front := g.order.Front(); front != nil; front = g.order.Front() {
		b := front.Value.(*burst)
		if now.Sub(b.start) < g.Window && len(g.seen) < g.MaxKeys && g.bytes+cost <= g.MaxBytes {
			break
		}
		delete(g.seen, b.key)
		g.order.Remove(front)
		g.bytes -= entryCost(b.key)
	}
	if cost > g.MaxBytes {
		return true // a bound too small for one key: nothing is remembered
	}
	g.seen[key] = g.order.PushBack(&burst{key: key, start: now, count: 1})
	g.bytes += cost
	return true
}

func entryCost(key string) int { return len(key) + entryOverhead }

// echo is how a refusal names key: its first few bytes, cut on a rune
// boundary.
func echo(key string) string {
	if len(key) <= echoedKeyBytes {
		return key
	}
	cut := echoedKeyBytes
	for cut > 0 && !utf8.RuneStart(key[cut]) {
		cut--
	}
	return key[:cut] + "…"
}

// Middleware refuses rapid repeats before they reach next. Requests without
// a key pass through.
func (g *Guard) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.defaults()
		header, window, max, after, callerOf := g.Header, g.Window, g.MaxRepeats, g.RetryAfter, g.Caller
		g.mu.Unlock()
		key := r.Header.Get(header)
		if key == "" {
			next.ServeHTTP(w, r)
			return
		}
		caller := ""
		if callerOf != nil {
			caller = callerOf(r)
		}
		if caller == "" {
			caller = clientAddress(r)
		}
		if g.Allow(caller, key) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Retry-After", strconv.Itoa(int(after/time.Second)))
		httprules.WriteProblem(w, httprules.Problem{
			Type:     httprules.ProblemType + string(codes.RetryLimitExceeded),
			Title:    "Too many attempts for one operation",
			Status:   http.StatusTooManyRequests,
			Code:     string(codes.RetryLimitExceeded),
			Detail:   fmt.Sprintf("more than %d requests from this caller with %s %q within %s; retry after %s", max, header, echo(key), window, after),
			Instance: r.URL.Path,
		})
	})
}
