// Package depseries is what the fleet drill's dependency (test/e2e/apps/metadep)
// counts, per second of its own clock, and how it says it is over capacity:
// the wire format its /series answers and the fleet report reads.
package depseries

import "time"

// Trigger kinds the dependency can be switched into.
const (
	// Outage answers every request 503 at once.
	Outage = "outage"
	// Throttle answers every request 429 with Retry-After.
	Throttle = "throttle"
	// Slow adds latency past the clients' per-attempt timeout to every
	// answer, without holding a worker: the dependency works as usual, its
	// answers arrive too late.
	Slow = "slow"
)

// Kinds lists the triggers in the order the drill runs them.
var Kinds = []string{Outage, Throttle, Slow}

// MaxHealthyWait is the longest a request may wait in the dependency's
// queue in a second the dependency counts as under capacity: the clients'
// per-attempt timeout (testdata/fleet-drill.yaml's perAttemptTimeout, the
// naive client's attempt timeout). A request that waited longer is served
// for a client that has given up: work for nobody.
const MaxHealthyWait = 500 * time.Millisecond

// Second is what the dependency saw in one second since its series began.
type Second struct {
	// Received counts every request, First those whose Idempotency-Key
	// (or lack of one) it had not seen since the series began, Retry the
	// others: Received = First + Retry.
	Received int `json:"received"`
	First    int `json:"first"`
	Retry    int `json:"retry"`
	// Applied counts requests a worker completed (their effect happened),
	// Duplicates those whose key had been applied before.
	Applied    int `json:"applied"`
	Duplicates int `json:"duplicates"`
	// Shed: refused with 503 because the queue was full. Stale: dropped
	// with 503 by a worker because it had waited past the dependency's
	// drop age. Outage, Throttled: answered 503 or 429 by a trigger.
	Shed      int `json:"shed"`
	Stale     int `json:"stale"`
	Outage    int `json:"outage"`
	Throttled int `json:"throttled"`
	// MaxQueue is the deepest the queue was; MaxWaitMs the longest a
	// request a worker took had waited.
	MaxQueue  int     `json:"maxQueue"`
	MaxWaitMs float64 `json:"maxWaitMs"`
}

// Over says whether the dependency was over its capacity in the second:
// it received more than it can serve, or its queue held a request past
// MaxHealthyWait.
func (s Second) Over(capacity int) bool {
	return s.Received > capacity || s.MaxWaitMs > float64(MaxHealthyWait/time.Millisecond)
}

// Window is one trigger, in seconds since the series began.
type Window struct {
	Kind string  `json:"kind"`
	From float64 `json:"from"`
	To   float64 `json:"to"`
}

// Series is the dependency's /series answer.
type Series struct {
	// Capacity is the requests per second the workers can complete.
	Capacity int       `json:"capacity"`
	Start    time.Time `json:"start"`
	Seconds  []Second  `json:"seconds"`
	Triggers []Window  `json:"triggers"`
}
