package main

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// scenario is what the fake telephony provider does, as MC-RT-01 injects it.
type scenario struct {
	// Fault: from the drill's start until Fault, FaultRate of all attempts
	// are answered 429.
	Fault     time.Duration
	FaultRate float64
	// RetryAfter, when positive, is sent (in whole seconds) with every 429.
	RetryAfter time.Duration
	// Latency is how long every answer takes.
	Latency time.Duration
	// BanLimit is the contracted rate: more attempts than this in any 1 s
	// window ban the caller, as the carrier did in INC-2901. RPS is the
	// primary rate it is contracted over.
	BanLimit, RPS int
	// BaselineEvery: after the fault, one first attempt in BaselineEvery is
	// answered 503 (the spec's baseline of under 1% errors).
	BaselineEvery int
}

// keyPrefix is the sample's idempotency key up to {user_id}, which the
// drill sets to the operation's number.
const keyPrefix = "SMS-2FA-"

// second is what the vendor saw during one second of the drill.
type second struct {
	Outbound, Primary, Retries, Status429 int
}

// vendor is a fake telephony provider for one option: it answers POST
// /v1/messages per the scenario, and counts every attempt by the second it
// arrived in. It is safe for concurrent use.
type vendor struct {
	sc    scenario
	start time.Time

	mu       sync.Mutex
	attempts []uint8 // attempts seen per operation
	ledger   *ledger
	seconds  []second
	// lateRetries are the arrival times of retries once the fault is over.
	lateRetries []time.Duration
	// faultAttempts and faultPrimaries count arrivals during the fault.
	faultAttempts, faultPrimaries int
}

func newVendor(sc scenario, start time.Time) *vendor {
	return &vendor{sc: sc, start: start, ledger: newLedger(sc.BanLimit, time.Second, sc.BanLimit-sc.RPS)}
}

// answer is the scenario's status for an operation's attempt at since:
// deterministic per (operation, attempt), so every option meets the same
// faults.
func (sc scenario) answer(op, attempt int, since time.Duration) int {
	if since < sc.Fault {
		if splitmix(uint64(op)*31+uint64(attempt))%10000 < uint64(sc.FaultRate*10000) {
			return http.StatusTooManyRequests
		}
		return http.StatusCreated
	}
	if attempt == 1 && sc.BaselineEvery > 0 && op%sc.BaselineEvery == 0 {
		return http.StatusServiceUnavailable
	}
	return http.StatusCreated
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// operation reads the operation's number from its idempotency key.
func operation(key string) (int, bool) {
	rest, ok := strings.CutPrefix(key, keyPrefix)
	if !ok {
		return 0, false
	}
	num, _, _ := strings.Cut(rest, "-")
	op, err := strconv.Atoi(num)
	return op, err == nil && op >= 0 && op < 1<<26
}

// warmPath answers 204 and is not counted: the drill opens its
// connections with it before the load starts.
const warmPath = "/warm"

func (v *vendor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == warmPath {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	since := time.Since(v.start)
	op, ok := operation(r.Header.Get("Idempotency-Key"))
	_, _ = io.Copy(io.Discard, r.Body)
	if !ok || r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	attempt := v.record(op, since)
	status := v.sc.answer(op, attempt, since)
	if status == http.StatusTooManyRequests {
		v.count429(since)
		if v.sc.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int((v.sc.RetryAfter+time.Second-1)/time.Second)))
		}
	}
	time.Sleep(v.sc.Latency)
	w.WriteHeader(status)
}

// record counts one arrival and returns which attempt of op it is.
func (v *vendor) record(op int, since time.Duration) int {
	sec := int(since / time.Second)
	v.mu.Lock()
	defer v.mu.Unlock()
	if op >= len(v.attempts) {
		v.attempts = append(v.attempts, make([]uint8, op+1-len(v.attempts)+4096)...)
	}
	v.attempts[op] = min(v.attempts[op]+1, 255)
	attempt := int(v.attempts[op])
	for sec >= len(v.seconds) {
		v.seconds = append(v.seconds, second{})
	}
	s := &v.seconds[sec]
	s.Outbound++
	if attempt == 1 {
		s.Primary++
	} else {
		s.Retries++
		if since >= v.sc.Fault {
			v.lateRetries = append(v.lateRetries, since)
		}
	}
	if since < v.sc.Fault {
		v.faultAttempts++
		if attempt == 1 {
			v.faultPrimaries++
		}
	}
	v.ledger.add(since, attempt > 1)
	return attempt
}

func (v *vendor) count429(since time.Duration) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.seconds[int(since/time.Second)].Status429++
}

// second returns what arrived during second i (zero when nothing did).
func (v *vendor) second(i int) second {
	v.mu.Lock()
	defer v.mu.Unlock()
	if i < len(v.seconds) {
		return v.seconds[i]
	}
	return second{}
}
