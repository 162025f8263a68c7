package retry_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/httprules"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
	"github.com/retryguard/retryguard/runtime/clock"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
)

// attemptsUnder runs two logical operations under p, as an application
// would, with every key variable its template names: one that succeeds and
// one that fails with a retryable 503 and then ends its context (so that no
// backoff waits on the fake clock). It returns the fewest attempts either
// made.
func attemptsUnder(t *testing.T, p *policyconfig.Payload) int {
	vars := retry.Vars{}
	for _, name := range httprules.KeyTemplatePlaceholders(p.Policy.KeyTemplate) {
		vars[name] = "v-" + name
	}
	e := retry.New(watch.NewStatic(p), retry.WithClock(clock.NewFake(time.Unix(1_800_000_000, 0))))
	fewest := -1
	for _, fail := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		n := 0
		_ = e.Do(ctx, p.Policy.Name, vars, func(context.Context, retry.Attempt) error {
			n++
			if fail {
				cancel()
				return retry.Status(503, "")
			}
			return nil
		})
		cancel()
		if fewest < 0 || n < fewest {
			fewest = n
		}
	}
	return fewest
}

// FuzzPayloadThenDo: no payload that Parse accepts may lead to zero
// attempts. A pod that cannot trust a payload keeps its last good policy or
// makes one attempt; a payload it accepts must never stop an operation
// before its first call.
//
// Do arms a real per-attempt timer (context.WithTimeout), so coverage is
// not fully deterministic and minimizing an input can spend the whole
// default minute; run with -fuzzminimizetime 10x (docs/benchmarks.md).
func FuzzPayloadThenDo(f *testing.F) {
	for _, p := range seedPayloads() {
		raw, err := json.Marshal(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := policyconfig.Parse(data)
		if err != nil {
			return
		}
		if n := attemptsUnder(t, p); n < 1 {
			t.Fatalf("Parse accepted a payload under which an operation made %d attempts:\n%s", n, data)
		}
	})
}

// FuzzPolicyFieldsThenDo reaches the same property through the fields most
// likely to stop an operation early (key template, operation, deadline and
// reserve, attempts, mode), which random JSON bytes rarely keep well formed.
func FuzzPolicyFieldsThenDo(f *testing.F) {
	f.Add("SMS-2FA-{user_id}-{login_session_id}", "POST /v1/messages", int64(4e9), int64(5e8), int32(3), false)
	f.Add("", "GET /v1/balance", int64(3e9), int64(5e8), int32(2), false)
	f.Add("SMS-{user_id", "POST /v1/messages", int64(4e9), int64(5e8), int32(3), true)
	f.Add("{a}{b}{a}", "", int64(1), int64(0), int32(1), false)
	f.Fuzz(func(t *testing.T, tmpl, operation string, deadline, minRemaining int64, attempts int32, noRetry bool) {
		p := fixtures.SMS()
		p.Policy.KeyTemplate, p.Policy.Operation, p.Policy.MaxAttempts = tmpl, operation, attempts
		p.Policy.Deadline, p.Policy.MinRemaining = policyconfig.Duration(deadline), policyconfig.Duration(minRemaining)
		p.Policy.RetryAfterMaxDelay = min(p.Policy.RetryAfterMaxDelay, policyconfig.Duration(deadline-1))
		if noRetry {
			p.Enforcement = policyconfig.Enforcement{Mode: policyconfig.NoRetry, Reason: "InvalidSpec"}
		}
		raw, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := policyconfig.Parse(raw)
		if err != nil {
			return
		}
		if n := attemptsUnder(t, parsed); n < 1 {
			t.Fatalf("Parse accepted a payload under which an operation made %d attempts:\n%s", n, raw)
		}
	})
}

func seedPayloads() []*policyconfig.Payload {
	sms := fixtures.SMS()
	get := fixtures.Named("ledger-read", 1)
	get.Policy.Operation, get.Policy.KeyTemplate = "GET /v1/balance", ""
	noRetry := fixtures.Named("refused", 2)
	noRetry.Budget = nil
	noRetry.Enforcement = policyconfig.Enforcement{Mode: policyconfig.NoRetry, Reason: "BudgetNotFound"}
	short := fixtures.Named("short", 1)
	short.Policy.Deadline, short.Policy.RetryAfterMaxDelay = fixtures.D("2s"), fixtures.D("1500ms")
	// A fleet budget may grant no retry at all, never no first attempt.
	return []*policyconfig.Payload{sms, get, noRetry, short, fixtures.Fleet()}
}
