package retry

import (
	"context"
	"sync"
	"time"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
)

var epoch = time.Date(2026, 9, 15, 12, 0, 0, 0, time.UTC)

// smsPolicy is RETRY-SMS-001's policy as the controller publishes it.
var smsPolicy = fixtures.SMS

var d = fixtures.D

var smsVars = Vars{"user_id": "42", "login_session_id": "s-9"}

// warm runs n successful operations, so that a test's retries rest on
// primary traffic rather than on a new budget's start credit.
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

func (m *memoryLetters) Write(_ context.Context, l DeadLetter) error {
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
