package retry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/clock"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
)

// The payload a pod reads from the published ConfigMap retrypolicy-sms-2fa-dispatch.
// A low-traffic caller sets minRetriesPerSecond: past a new process's start
// credit (its full bucket of retries), the ratio cap allows retries only as
// a share of the primary traffic of the last window.
const smsPayload = `{
  "schemaVersion": "policy.retryguard.io/payload/v1",
  "policy": {
    "namespace": "auth", "name": "sms-2fa-dispatch", "generation": 1,
    "service": "telephony-api", "operation": "POST /v1/messages", "layer": "connector",
    "maxAttempts": 3, "leafAttempts": 3,
    "backoff": {"jitter": "Full", "base": "100ms", "cap": "3s", "multiplier": 2},
    "deadline": "4s", "minRemaining": "500ms", "retryAfterMaxDelay": "3s",
    "retryOnStatusCodes": [429, 503, 504], "retryOnErrors": ["ConnectionRefused", "ConnectionReset", "Timeout"],
    "idempotencyHeader": "Idempotency-Key", "keyTemplate": "SMS-2FA-{user_id}-{login_session_id}",
    "budgetRef": "telephony-provider", "criticality": "Critical"
  },
  "budget": {"name": "telephony-provider", "generation": 1, "retryPercent": 10, "window": "1m0s",
             "maxTokens": 10, "minRetriesPerSecond": 5, "partitions": 1},
  "enforcement": {"mode": "Enforced"}
}`

func policies() retry.Source { return policiesIn("auth") }

// policiesIn serves the same policy published in namespace ns. The
// process's registries share a budget by its namespace and name (one
// share a process: budget.Registry), so an example that runs on the real
// clock names a namespace of its own, and no other test's use of the
// budget spends its tokens or sets its figures first.
func policiesIn(ns string) retry.Source {
	p, err := policyconfig.Parse([]byte(strings.Replace(smsPayload, `"namespace": "auth"`, `"namespace": "`+ns+`"`, 1)))
	if err != nil {
		panic(err)
	}
	return watch.NewStatic(p)
}

func ExampleExecutor_Do() {
	ex := retry.New(policies(), retry.WithClock(clock.NewVirtual(clock.Real{}.Now())))
	vars := retry.Vars{"user_id": "42", "login_session_id": "s-9"}
	err := ex.Do(context.Background(), "sms-2fa-dispatch", vars, func(ctx context.Context, a retry.Attempt) error {
		fmt.Printf("attempt %d with %s: %s\n", a.Number, a.Header, a.Key)
		if a.Number == 1 {
			return retry.Status(http.StatusServiceUnavailable, "")
		}
		return nil
	})
	fmt.Println("err:", err)

	// A 400 is the caller's fault: one attempt, a typed error with its code.
	err = ex.Do(context.Background(), "sms-2fa-dispatch", vars, func(context.Context, retry.Attempt) error {
		return retry.Status(http.StatusBadRequest, "")
	})
	var re *retry.Error
	if errors.As(err, &re) {
		fmt.Println(re.Code, re.State, re.Attempts)
	}
	// Output:
	// attempt 1 with Idempotency-Key: SMS-2FA-42-s-9
	// attempt 2 with Idempotency-Key: SMS-2FA-42-s-9
	// err: <nil>
	// ERR_PERMANENT_FAILURE TERMINAL_EXHAUSTED 1
}

// An app team's whole HTTP integration, against a real server on loopback:
// the vendor answers 429 once, then 201. The lines between the readme
// markers are the README's, word for word (TestTheREADMEShowsTheExample).
func ExampleRoundTripper() {
	calls := 0
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		fmt.Printf("vendor saw attempt %d with key %s\n", calls, r.Header.Get("Idempotency-Key"))
		if calls == 1 {
			w.WriteHeader(http.StatusTooManyRequests) // no Retry-After: backoff decides
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"msg-1"}`)
	}))
	defer vendor.Close()
	policies := policiesIn("example-roundtripper") // in a pod: informer.New(cs, namespace), started

	// readme:start
	ex := retry.New(policies)
	client := &http.Client{Transport: &retry.RoundTripper{Executor: ex, Policy: "sms-2fa-dispatch"}}
	ctx := retry.WithVars(context.Background(), retry.Vars{"user_id": "42", "login_session_id": "s-9"})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, vendor.URL+"/v1/messages", strings.NewReader(`{"to":"+15550100"}`))
	if err != nil {
		panic(err)
	}
	res, err := client.Do(req)
	var re *retry.Error
	switch {
	case errors.As(err, &re) && re.State == retry.UnknownOutcome:
		// It may have been applied: reconcile it from the dead letter (every
		// attempt's evidence), never send it again as a new message.
		fmt.Println("unknown outcome:", re.Code)
	case err != nil:
		fmt.Println("not sent:", err) // definitely not applied: the fallback may take it
	default:
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body) // readable to the end; closing it ends the attempt
		fmt.Println(res.Status, string(body), err)
	}
	// readme:end

	// Output:
	// vendor saw attempt 1 with key SMS-2FA-42-s-9
	// vendor saw attempt 2 with key SMS-2FA-42-s-9
	// 201 Created {"id":"msg-1"} <nil>
}
