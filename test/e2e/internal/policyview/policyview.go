// Package policyview is /policy of the suite's Go apps (smsapp, fleetclient):
// the policy a pod enforces and its budget as the pod divides it, the figures
// the sidecar's admin /policies reports, so that the suite reads every pod
// alike.
package policyview

import (
	"os"
	"time"

	"github.com/retryguard/retryguard/runtime/budget"
	"github.com/retryguard/retryguard/runtime/retry"
)

// View is /policy's answer.
type View struct {
	Found       bool    `json:"found"`
	MaxAttempts int32   `json:"maxAttempts,omitempty"`
	Generation  int64   `json:"generation,omitempty"`
	Budget      *Budget `json:"budget,omitempty"`
}

// Budget is the policy's budget in this pod.
type Budget struct {
	Name string `json:"name"`
	// Consumers and ObservedAt are the payload's consumer count, when it
	// carries one, and Named whether it names this pod (by $POD_UID).
	Consumers  *int32     `json:"consumers,omitempty"`
	ObservedAt *time.Time `json:"observedAt,omitempty"`
	Named      bool       `json:"named"`
	// Denominator is the D the runtime's budget enforces now (0: no share).
	Denominator int64 `json:"denominator"`
}

// Of is policy's view as src publishes it and ex enforces it.
func Of(src retry.Source, ex *retry.Executor, policy string) View {
	p, ok := src.Policy(policy)
	if !ok {
		return View{}
	}
	v := View{Found: true, MaxAttempts: p.Policy.MaxAttempts, Generation: p.Policy.Generation}
	if b := p.Budget; b != nil {
		v.Budget = &Budget{Name: b.Name}
		if enforced, ok := ex.Budget(policy); ok {
			v.Budget.Denominator = enforced.Denominator()
		}
		if c := b.Consumers; c != nil {
			v.Budget.Consumers, v.Budget.ObservedAt, v.Budget.Named = &c.Count, &c.ObservedAt, c.Includes(os.Getenv(budget.PodUIDEnv))
		}
	}
	return v
}
