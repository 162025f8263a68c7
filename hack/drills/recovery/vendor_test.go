package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestVendorFaultsAreTheScenarios(t *testing.T) {
	sc := scenario{Fault: time.Second, FaultRate: 0.6, BanLimit: 1320, BaselineEvery: 2000}
	var n429 int
	for op := range 10000 {
		if sc.answer(op, 1, 0) == http.StatusTooManyRequests {
			n429++
		}
	}
	if n429 < 5800 || n429 > 6200 {
		t.Errorf("%d of 10,000 first attempts got 429 during the fault, want about 6,000", n429)
	}
	if got := sc.answer(4000, 1, 2*time.Second); got != http.StatusServiceUnavailable {
		t.Errorf("baseline error: %d", got)
	}
	if got := sc.answer(4000, 2, 2*time.Second); got != http.StatusCreated {
		t.Errorf("baseline retry: %d", got)
	}
}

// The vendor tells a retry from a primary by the key it has seen, counts
// 429s by second, and sends Retry-After when the scenario says so.
func TestVendorCountsAttemptsByKey(t *testing.T) {
	sc := scenario{Fault: time.Hour, FaultRate: 1, RetryAfter: 1500 * time.Millisecond, BanLimit: 2, RPS: 2}
	v := newVendor(sc, time.Now())
	srv := httptest.NewServer(v)
	defer srv.Close()
	for range 3 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/messages", nil)
		req.Header.Set("Idempotency-Key", "SMS-2FA-7-drill")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 429 || res.Header.Get("Retry-After") != "2" {
			t.Fatalf("%d, Retry-After %q", res.StatusCode, res.Header.Get("Retry-After"))
		}
	}
	if s := v.second(0); s != (second{Outbound: 3, Primary: 1, Retries: 2, Status429: 3}) {
		t.Fatalf("second 0: %+v", s)
	}
	if len(v.ledger.bans) != 1 {
		t.Fatalf("3 attempts in a second over a limit of 2: bans %v", v.ledger.bans)
	}
}
