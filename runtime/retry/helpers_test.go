package retry

import (
	"context"
	"sync"
	"time"

	"github.com/retryguard/retryguard/runtime/policyconfig"
)

var epoch = time.Date(2026, 9, 15, 12, 0, 0, 0, time.UTC)

func d(s string) policyconfig.Duration {
	v, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return policyconfig.Duration(v)
}

// smsPolicy is RETRY-SMS-001's policy as the controller publishes it, with
// every transport error listed so each can be exercised.
func smsPolicy() *policyconfig.Payload {
	return &policyconfig.Payload{
		SchemaVersion: policyconfig.SchemaVersion,
		Policy: policyconfig.Policy{
			Namespace: "auth", Name: "sms-2fa-dispatch", Generation: 1,
			Service: "telephony-api", Operation: "POST /v1/messages", Layer: "connector",
			MaxAttempts: 3, LeafAttempts: 3,
			Backoff:  policyconfig.Backoff{Jitter: "Full", Base: d("100ms"), Cap: d("3s"), Multiplier: 2},
			Deadline: d("4s"), MinRemaining: d("500ms"), RetryAfterMax: d("3s"),
			RetryOnStatus:     []int32{429, 503, 504},
			RetryOnErrors:     []string{"ConnectionRefused", "ConnectionReset", "Timeout", "DNSFailure"},
			IdempotencyHeader: "Idempotency-Key", KeyTemplate: "SMS-2FA-{user_id}-{login_session_id}",
			Budget: "telephony-provider", Criticality: "Critical", EventsTopic: "auth.sms.lifecycle.v1",
		},
		Budget: &policyconfig.Budget{Name: "telephony-provider", Generation: 1, RetryPercent: 10,
			Window: d("60s"), MaxTokens: 10, Partitions: 1},
		Enforcement: policyconfig.Enforcement{Mode: policyconfig.Enforced},
	}
}

var smsVars = Vars{"user_id": "42", "login_session_id": "s-9"}

// warm runs n successful operations: the budget's ratio allows retries only
// as a share of primary traffic, so a cold process has none to give.
func warm(ex *Executor, policy string, n int) {
	for range n {
		_ = ex.Do(context.Background(), policy, smsVars, func(context.Context, Attempt) error { return nil })
	}
}

// memoryLetters is an in-memory dead-letter sink for tests.
type memoryLetters struct {
	mu      sync.Mutex
	letters []DeadLetter
}

func (m *memoryLetters) Write(l DeadLetter) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.letters = append(m.letters, l)
	return nil
}

func (m *memoryLetters) all() []DeadLetter {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]DeadLetter(nil), m.letters...)
}

// staticSource serves fixed payloads by name.
type staticSource map[string]*policyconfig.Payload

func (s staticSource) Policy(name string) (*policyconfig.Payload, bool) {
	p, ok := s[name]
	return p, ok
}
