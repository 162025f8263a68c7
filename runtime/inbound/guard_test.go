package inbound

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/retryguard/retryguard/runtime/clock"
	"github.com/retryguard/retryguard/runtime/retry"
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
	var p retry.Problem
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
		g.Allow(fmt.Sprint(i))
		clk.Advance(time.Millisecond)
	}
	if n, l := len(g.seen), g.order.Len(); n > 100 || l != n {
		t.Fatalf("%d keys and %d list entries kept, bound is 100", n, l)
	}
	if _, ok := g.seen["9999"]; !ok {
		t.Fatal("the newest key was evicted")
	}
	if _, ok := g.seen["0"]; ok {
		t.Fatal("the oldest key was kept")
	}
	// Expired windows go first, even below the bound.
	clk.Advance(DefaultWindow)
	g.Allow("fresh")
	if n := len(g.seen); n != 1 {
		t.Fatalf("%d keys after every window expired", n)
	}
}
