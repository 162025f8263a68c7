package policyconfig_test

import (
	"encoding/json"
	"errors"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
)

func TestRoundTrip(t *testing.T) {
	want := fixtures.SMS()
	raw, err := policyconfig.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"base":"100ms"`) {
		t.Errorf("durations are not written as strings: %s", raw)
	}
	got, err := policyconfig.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip changed the payload:\n got %+v\nwant %+v", got, want)
	}
}

func TestParseRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		edit  func(m map[string]any)
		field string
	}{
		"another schema version": {func(m map[string]any) { m["schemaVersion"] = "policy.retryguard.io/payload/v2" }, "schemaVersion"},
		"an unknown field":       {func(m map[string]any) { m["surprise"] = true }, "payload"},
		"a key in other case": {func(m map[string]any) {
			pol(m)["MaxAttempts"] = pol(m)["maxAttempts"]
			delete(pol(m), "maxAttempts")
		}, "policy.MaxAttempts"},
		"four attempts":           {func(m map[string]any) { pol(m)["maxAttempts"] = 4 }, "policy.maxAttempts"},
		"jitter None":             {func(m map[string]any) { pol(m)["backoff"].(map[string]any)["jitter"] = "None" }, "policy.backoff.jitter"},
		"zero base":               {func(m map[string]any) { pol(m)["backoff"].(map[string]any)["base"] = "0s" }, "policy.backoff.base"},
		"retries without backoff": {func(m map[string]any) { delete(pol(m), "backoff") }, "policy.backoff.jitter"},
		"a bad duration":          {func(m map[string]any) { pol(m)["deadline"] = "soon" }, "payload"},
		"retry on 404":            {func(m map[string]any) { pol(m)["retryOnStatusCodes"] = []int{404} }, "policy.retryOnStatusCodes"},
		"an unknown error":        {func(m map[string]any) { pol(m)["retryOnErrors"] = []string{"Gremlins"} }, "policy.retryOnErrors"},
		"NoRetry without reason":  {func(m map[string]any) { m["enforcement"] = map[string]any{"mode": "NoRetry"} }, "enforcement.reason"},
		"an unknown mode":         {func(m map[string]any) { m["enforcement"] = map[string]any{"mode": "Maybe"} }, "enforcement.mode"},
		"retries without budget":  {func(m map[string]any) { delete(m, "budget") }, "budget"},
		"a budget of 0%":          {func(m map[string]any) { m["budget"].(map[string]any)["retryPercent"] = 0 }, "budget.retryPercent"},
		"zero partitions":         {func(m map[string]any) { m["budget"].(map[string]any)["partitions"] = 0 }, "budget.partitions"},
		// Every single-object rule of admission holds in the pod too.
		"a template with {attempt}":     {func(m map[string]any) { pol(m)["keyTemplate"] = "SMS-{user_id}-{attempt}" }, "policy.keyTemplate"},
		"a template without {name}":     {func(m map[string]any) { pol(m)["keyTemplate"] = "SMS-static" }, "policy.keyTemplate"},
		"a template with an open brace": {func(m map[string]any) { pol(m)["keyTemplate"] = "SMS-{user_id" }, "policy.keyTemplate"},
		"a template with a lone }":      {func(m map[string]any) { pol(m)["keyTemplate"] = "SMS-{user_id}}" }, "policy.keyTemplate"},
		"a template too long":           {func(m map[string]any) { pol(m)["keyTemplate"] = "{a}" + strings.Repeat("x", 254) }, "policy.keyTemplate"},
		"a NoRetry template that cannot render": {func(m map[string]any) {
			m["enforcement"] = map[string]any{"mode": "NoRetry", "reason": "InvalidSpec"}
			pol(m)["keyTemplate"] = "SMS-{user_id"
		}, "policy.keyTemplate"},
		"a POST retried without a key":   {func(m map[string]any) { delete(pol(m), "keyTemplate") }, "policy.maxAttempts"},
		"minRemaining at the deadline":   {func(m map[string]any) { pol(m)["minRemaining"] = "4s" }, "policy.minRemaining"},
		"retryAfter at the deadline":     {func(m map[string]any) { pol(m)["retryAfterMaxDelay"] = "4s" }, "policy.retryAfterMaxDelay"},
		"a per-attempt timeout too long": {func(m map[string]any) { pol(m)["perAttemptTimeout"] = "5s" }, "policy.perAttemptTimeout"},
		"a header with CR LF":            {func(m map[string]any) { pol(m)["idempotencyHeader"] = "Idempotency-Key\r\nX-Evil: 1" }, "policy.idempotencyHeader"},
		"a header with a space":          {func(m map[string]any) { pol(m)["idempotencyHeader"] = "Idempotency Key" }, "policy.idempotencyHeader"},
		"17 status codes":                {func(m map[string]any) { pol(m)["retryOnStatusCodes"] = slices.Repeat([]int{503}, 17) }, "policy.retryOnStatusCodes"},
		"a status code twice":            {func(m map[string]any) { pol(m)["retryOnStatusCodes"] = []int{503, 503} }, "policy.retryOnStatusCodes"},
		"an http fallback":               {func(m map[string]any) { fallback(m)["endpoint"] = "http://push.auth.internal/v1" }, "policy.fallback[0].endpoint"},
		"an unverified fallback":         {func(m map[string]any) { fallback(m)["verified"] = false }, "policy.fallback[0].verified"},
		"a service that is not a label":  {func(m map[string]any) { pol(m)["service"] = "Telephony API" }, "policy.service"},
		"an operation too long":          {func(m map[string]any) { pol(m)["operation"] = "POST /" + strings.Repeat("x", 251) }, "policy.operation"},
		"a topic with a slash":           {func(m map[string]any) { pol(m)["eventsTopic"] = "auth/sms" }, "policy.eventsTopic"},
		"a pool of 1001": {
			func(m map[string]any) { pol(m)["connectionPool"].(map[string]any)["maxConnections"] = 1001 }, "policy.connectionPool.maxConnections"},
		"a namespace that is not a label": {func(m map[string]any) { pol(m)["namespace"] = "Auth" }, "policy.namespace"},
		"a name that is not an object":    {func(m map[string]any) { pol(m)["name"] = "../sms" }, "policy.name"},
		"a window of 500ms":               {func(m map[string]any) { m["budget"].(map[string]any)["window"] = "500ms" }, "budget.window"},
		"a window of 2h":                  {func(m map[string]any) { m["budget"].(map[string]any)["window"] = "2h" }, "budget.window"},
		"a floor of 10001":                {func(m map[string]any) { m["budget"].(map[string]any)["minRetriesPerSecond"] = 10001 }, "budget.minRetriesPerSecond"},
		"1001 partitions":                 {func(m map[string]any) { m["budget"].(map[string]any)["partitions"] = 1001 }, "budget.partitions"},
	} {
		t.Run(name, func(t *testing.T) {
			raw, _ := policyconfig.Marshal(fixtures.SMS())
			var m map[string]any
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			tc.edit(m)
			edited, _ := json.Marshal(m)
			_, err := policyconfig.Parse(edited)
			var pe *policyconfig.ParseError
			if !errors.As(err, &pe) || !errors.Is(err, policyconfig.ErrInvalidPayload) {
				t.Fatalf("want a ParseError, got %v", err)
			}
			if pe.Field != tc.field {
				t.Errorf("field %q, want %q (%v)", pe.Field, tc.field, err)
			}
		})
	}
}

func pol(m map[string]any) map[string]any { return m["policy"].(map[string]any) }

func fallback(m map[string]any) map[string]any {
	return pol(m)["fallback"].([]any)[0].(map[string]any)
}

func TestNoRetryNeedsNoBudget(t *testing.T) {
	p := fixtures.SMS()
	p.Budget = nil
	p.Enforcement = policyconfig.Enforcement{Mode: policyconfig.NoRetry, Reason: "BudgetNotFound", Message: "RetryBudget telephony-provider not found"}
	if _, err := policyconfig.Marshal(p); err != nil {
		t.Fatal(err)
	}
}

// A single-attempt policy needs no backoff: absent, it means no retry. The
// same payload with two attempts is refused (TestParseRejects).
func TestSingleAttemptNeedsNoBackoff(t *testing.T) {
	raw, _ := policyconfig.Marshal(fixtures.SMS())
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	delete(pol(m), "backoff")
	delete(m, "budget")
	pol(m)["maxAttempts"], pol(m)["leafAttempts"] = 1, 1
	edited, _ := json.Marshal(m)
	p, err := policyconfig.Parse(edited)
	if err != nil {
		t.Fatalf("a single attempt without backoff is refused: %v", err)
	}
	if p.Policy.MaxAttempts != 1 || p.Policy.Backoff != (policyconfig.Backoff{}) {
		t.Errorf("parsed %+v", p.Policy)
	}
	pol(m)["maxAttempts"] = 2
	edited, _ = json.Marshal(m)
	if _, err := policyconfig.Parse(edited); err == nil {
		t.Error("two attempts without backoff (or budget) are accepted")
	}
}

// The contract is for any program: it must not drag in controller-runtime
// or client-go.
func TestImportsNoKubernetesClients(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/retryguard/retryguard/contract/policyconfig").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "sigs.k8s.io/controller-runtime") || strings.HasPrefix(dep, "k8s.io/client-go") {
			t.Errorf("policyconfig depends on %s", dep)
		}
	}
}

// FuzzParse: Parse never panics, and whatever it accepts encodes and parses
// back to the same payload.
func FuzzParse(f *testing.F) {
	raw, _ := policyconfig.Marshal(fixtures.SMS())
	f.Add(raw)
	fleet, _ := policyconfig.Marshal(fixtures.Fleet())
	f.Add(fleet)
	f.Add([]byte(`{"schemaVersion":"policy.retryguard.io/payload/v1"}`))
	f.Add([]byte(`{"schemaVersion":"policy.retryguard.io/payload/v1","policy":{"maxAttempts":-1},"enforcement":{"mode":"NoRetry"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := policyconfig.Parse(data)
		if err != nil {
			if !errors.Is(err, policyconfig.ErrInvalidPayload) {
				t.Fatalf("an error that is not ErrInvalidPayload: %v", err)
			}
			return
		}
		again, err := policyconfig.Marshal(p)
		if err != nil {
			t.Fatalf("accepted but cannot marshal: %v", err)
		}
		back, err := policyconfig.Parse(again)
		if err != nil || !reflect.DeepEqual(back, p) {
			t.Fatalf("round trip of an accepted payload changed it: %v", err)
		}
	})
}
