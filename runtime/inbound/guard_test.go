package inbound

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/httprules"
	"github.com/retryguard/retryguard/runtime/clock"
)

func TestRapidRepeatsAreRefused(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 9, 15, 12, 0, 0, 0, time.UTC))
	g := &Guard{Clock: clk}
	h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) }))
	send := func(key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/v1/messages", nil)
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for i := range 3 {
		if c := send("SMS-2FA-42-s-9").Code; c != http.StatusCreated {
			t.Fatalf("attempt %d: %d", i+1, c)
		}
	}
	w := send("SMS-2FA-42-s-9")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "30" ||
		w.Header().Get("Content-Type") != "application/problem+json" {
		t.Fatalf("the 4th rapid repeat: %d %v", w.Code, w.Header())
	}
	var p httprules.Problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Code != "ERR_RETRY_LIMIT_EXCEEDED" || p.Status != 429 || p.Instance != "/v1/messages" {
		t.Fatalf("problem %+v %v", p, err)
	}
	if send("another-key").Code != http.StatusCreated || send("").Code != http.StatusCreated {
		t.Fatal("other keys and keyless requests pass")
	}
	clk.Advance(DefaultWindow)
	if send("SMS-2FA-42-s-9").Code != http.StatusCreated {
		t.Fatal("a new window starts afresh")
	}
}

func TestMemoryIsBoundedAndTheOldestGoesFirst(t *testing.T) {
	clk := clock.NewFake(time.Now())
	g := &Guard{MaxKeys: 100, Clock: clk}
	for i := range 10_000 {
		g.Allow("10.0.0.1", fmt.Sprint(i))
		clk.Advance(time.Millisecond)
	}
	if n, l := len(g.seen), g.order.Len(); n > 100 || l != n {
		t.Fatalf("%d keys and %d list entries kept, bound is 100", n, l)
	}
	if _, ok := g.seen[stored("10.0.0.1", "9999")]; !ok {
		t.Fatal("the newest key was evicted")
	}
	if _, ok := g.seen[stored("10.0.0.1", "0")]; ok {
		t.Fatal("the oldest key was kept")
	}
	// Expired windows go first, even below the bound.
	clk.Advance(DefaultWindow)
	g.Allow("10.0.0.1", "fresh")
	if n := len(g.seen); n != 1 {
		t.Fatalf("%d keys after every window expired", n)
	}
}

func refusedProblem(t *testing.T, g *Guard, key string) (*httptest.ResponseRecorder, httprules.Problem) {
	t.Helper()
	h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) }))
	for range g.MaxRepeats + 1 {
		r := httptest.NewRequest(http.MethodPost, "/v1/messages", nil)
		r.Header.Set(DefaultHeader, key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code == http.StatusTooManyRequests {
			var p httprules.Problem
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
				t.Fatal(err)
			}
			return w, p
		}
	}
	t.Fatal("the repeats were not refused")
	return nil, httprules.Problem{}
}

// The 429 problem names the key by a short prefix only: a caller's key can
// be a secret, or an attacker's payload.
func TestRefusalEchoesOnlyAShortPrefixOfTheKey(t *testing.T) {
	key := strings.Repeat("0123456789", 10) // 100 bytes, stored as it is
	w, p := refusedProblem(t, &Guard{MaxRepeats: 1}, key)
	if strings.Contains(w.Body.String(), key[:echoedKeyBytes+1]) || !strings.Contains(p.Detail, key[:echoedKeyBytes]) {
		t.Fatalf("the problem echoes more or less than %d bytes of the key: %s", echoedKeyBytes, w.Body)
	}
}

// A key over MaxKeyBytes is kept as its SHA-256 digest: repeats of it are
// still counted, two long keys that differ only at their end stay apart, and
// neither the table nor the problem holds the key.
func TestLongKeysAreKeptAsDigests(t *testing.T) {
	clk := clock.NewFake(time.Now())
	g := &Guard{Clock: clk}
	long := strings.Repeat("k", 100_000)
	for i := range 3 {
		if !g.Allow("10.0.0.1", long+"a") || !g.Allow("10.0.0.1", long+"b") {
			t.Fatalf("repeat %d of two distinct long keys refused", i+1)
		}
	}
	if g.Allow("10.0.0.1", long+"a") || g.Allow("10.0.0.1", long+"b") {
		t.Fatal("the 4th repeat of a long key was allowed")
	}
	for stored := range g.seen {
		if len(stored) > DefaultMaxKeyBytes {
			t.Fatalf("a key of %d bytes is stored; the bound is %d", len(stored), DefaultMaxKeyBytes)
		}
	}
	w, _ := refusedProblem(t, g, long+"a")
	if w.Body.Len() > 1024 {
		t.Fatalf("a %d-byte problem for a long key", w.Body.Len())
	}
}

// Memory is bounded in bytes as well as in keys: many long keys evict the
// oldest before the table outgrows MaxBytes.
func TestMemoryIsBoundedInBytes(t *testing.T) {
	clk := clock.NewFake(time.Now())
	const bound = 64 << 10
	g := &Guard{MaxBytes: bound, Clock: clk}
	last := ""
	for i := range 10_000 {
		last = fmt.Sprintf("%0100d", i)
		g.Allow("", last)
		clk.Advance(time.Millisecond)
	}
	held := 0
	for stored := range g.seen {
		held += len(stored) + entryOverhead
	}
	if held > bound || held != g.bytes {
		t.Fatalf("%d bytes held (%d accounted), bound %d", held, g.bytes, bound)
	}
	if _, ok := g.seen[stored("", last)]; !ok {
		t.Fatal("the newest key was evicted")
	}
	if len(g.seen) < bound/(2*(100+entryOverhead)) {
		t.Fatalf("only %d keys held under a %d-byte bound", len(g.seen), bound)
	}
}

// stored is the table's key for caller and key.
func stored(caller, key string) string { return fmt.Sprintf("%d:%s%s", len(caller), caller, key) }

// A third party that sends a victim's predictable key spends its own
// repeats, not the victim's: repeats are counted per caller, by the
// client's address unless the application names an authenticated
// principal.
func TestRepeatsAreCountedPerCaller(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 9, 15, 12, 0, 0, 0, time.UTC))
	for _, tc := range []struct {
		name             string
		guard            *Guard
		victim, attacker func(*http.Request)
	}{{
		name:     "client address",
		guard:    &Guard{Clock: clk},
		victim:   func(r *http.Request) { r.RemoteAddr = "10.0.0.1:40001" },
		attacker: func(r *http.Request) { r.RemoteAddr = "10.0.0.2:40002" },
	}, {
		name:     "authenticated principal behind one proxy",
		guard:    &Guard{Clock: clk, Caller: func(r *http.Request) string { return r.Header.Get("X-Verified-Principal") }},
		victim:   func(r *http.Request) { r.RemoteAddr = "10.0.0.9:1"; r.Header.Set("X-Verified-Principal", "team-a") },
		attacker: func(r *http.Request) { r.RemoteAddr = "10.0.0.9:2"; r.Header.Set("X-Verified-Principal", "team-b") },
	}} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.guard.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) }))
			send := func(as func(*http.Request)) int {
				r := httptest.NewRequest(http.MethodPost, "/v1/messages", nil)
				r.Header.Set(DefaultHeader, "SMS-2FA-42-s-9")
				as(r)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w.Code
			}
			for range DefaultMaxRepeats + 1 {
				send(tc.attacker)
			}
			if c := send(tc.attacker); c != http.StatusTooManyRequests {
				t.Fatalf("the attacker's own repeats: %d", c)
			}
			for i := range DefaultMaxRepeats {
				if c := send(tc.victim); c != http.StatusCreated {
					t.Fatalf("the victim's request %d after a third party used its key: %d", i+1, c)
				}
			}
			if c := send(tc.victim); c != http.StatusTooManyRequests {
				t.Fatalf("the victim's own 4th repeat: %d", c)
			}
		})
	}
}

// A caller and a key never spell another pair: ("1", "2x") and ("12", "x")
// are counted apart.
func TestCallerAndKeyDoNotRunTogether(t *testing.T) {
	g := &Guard{MaxRepeats: 1, Clock: clock.NewFake(time.Now())}
	if !g.Allow("1", "2x") || !g.Allow("12", "x") {
		t.Fatal("two distinct pairs share a count")
	}
}
