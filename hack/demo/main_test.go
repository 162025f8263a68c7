package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/internal/testenv"
)

// `make demo` is one of the two commands the README promises; this runs the
// same story and checks that it still tells the truth.
func TestDemoTellsTheStory(t *testing.T) {
	if _, err := testenv.AssetsDir(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("demo failed: %v\n%s", err, out.String())
	}
	story := out.String()
	for _, want := range []string{
		"retrypolicy.policy.retryguard.io/sms-2fa-dispatch created",
		"retrybudget.policy.retryguard.io/telephony-provider created",
		"SERVICE         LAYER       ATTEMPTS   LEAF   BUDGET",
		`retryOn: {"errors":["ConnectionRefused","DNSFailure"],"statusCodes":[429,503,504]}`,
		"== Tearing down",
		`"schemaVersion": "policy.retryguard.io/payload/v1"`,
		`"mode": "Enforced"`,
	} {
		if !strings.Contains(story, want) {
			t.Errorf("the demo no longer prints %q", want)
		}
	}
	// Each unsafe manifest is refused, with the code its story is about.
	unsafe, _ := filepath.Glob(testenv.Path("hack", "demo", "unsafe", "*.yaml"))
	if len(unsafe) == 0 {
		t.Fatal("no unsafe manifests")
	}
	for _, f := range unsafe {
		raw, _ := os.ReadFile(f)
		name := regexp.MustCompile(`(?m)^  name: (\S+)`).FindSubmatch(raw)
		if name == nil {
			t.Fatalf("%s has no name", f)
		}
		if !strings.Contains(story, `"`+string(name[1])+`" is invalid`) {
			t.Errorf("%s was not refused in the story", filepath.Base(f))
		}
	}
	for _, code := range []string{"ERR_BUDGET_REQUIRED", "ERR_JITTER_REQUIRED", "ERR_RETRY_LIMIT_EXCEEDED",
		"ERR_NON_RETRYABLE_STATUS", "ERR_AMBIGUOUS_WITHOUT_IDEMPOTENCY", "ERR_UNSTABLE_IDEMPOTENCY_KEY",
		"ERR_UNTESTED_COMPENSATION_BLOCKED", "ERR_SHARED_FAILURE_DOMAIN_LEAK", "ERR_BUDGET_ABOVE_PLATFORM_CAP",
		"workflow(3) × job(3) × connector(3) = 27 > 3", `RetryPolicy "statement-job" does not exist yet`,
		"retrypolicy.policy.retryguard.io/statement-job created"} {
		if !strings.Contains(story, code) {
			t.Errorf("the demo no longer shows %s", code)
		}
	}
	// After convergence every policy is Ready, and the chain's leaf is 3.
	if !regexp.MustCompile(`statement-connector\s+bank-api\s+connector\s+1\s+3\s+bank-api\s+True`).MatchString(story) {
		t.Errorf("the connector under the one retrying job is not Ready with 3 leaf attempts:\n%s", story)
	}
	if !regexp.MustCompile(`sms-2fa-dispatch\s+telephony-api\s+connector\s+3\s+3\s+telephony-provider\s+True`).MatchString(story) {
		t.Errorf("the 2FA policy is not shown Ready:\n%s", story)
	}
	// The pod chapter: one key across attempts, a 4xx at once, a fail-fast
	// Retry-After, the budget cutting a storm short, and the dead letters.
	for _, want := range []string{
		"→ 30 SMS sent in 30 attempts",
		"Idempotency-Key SMS-2FA-42-s-9 → 503",
		"Idempotency-Key SMS-2FA-42-s-9 → 201",
		"Idempotency-Key SMS-2FA-43-s-9 → 400",
		"→ 400 Bad Request",
		"→ ERR_RETRY_AFTER_TOO_LONG",
		"ERR_RETRY_BUDGET_EXHAUSTED",
		"operations are in the dead-letter journal",
	} {
		if !strings.Contains(story, want) {
			t.Errorf("the pod chapter no longer prints %q", want)
		}
	}
	// Deleting cleans up: the garbage collector takes a deleted policy's
	// ConfigMap, and a deleted namespace terminates, then disappears.
	for _, want := range []string{
		`retrypolicy.policy.retryguard.io "marketing-campaign-notify" deleted`,
		"$ kubectl get cm -l policy.retryguard.io/policy=marketing-campaign-notify\n   No resources found in default namespace.",
		"retrypolicy.policy.retryguard.io/marketing-campaign-notify created",
		`namespace "team-sunset" deleted`,
		`Error from server (NotFound): namespaces "team-sunset" not found`,
	} {
		if !strings.Contains(story, want) {
			t.Errorf("the cleanup chapter no longer prints %q", want)
		}
	}
	if !regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(policyconfig.ConfigMapName("marketing-campaign-notify")) + `\s+1\s`).MatchString(story) {
		t.Errorf("the cleanup chapter does not show the policy published in team-sunset")
	}
	if !regexp.MustCompile(`team-sunset\s+Terminating`).MatchString(story) {
		t.Errorf("the deleted namespace was not shown Terminating")
	}
	// Teams in their own namespaces: consent refuses a child the parent did
	// not allow, and a foreign child it did allow bounds the parent.
	for _, want := range []string{
		`ERR_PARENT_NOT_PERMITTED: layer.parentRef: RetryPolicy "gateway/order-workflow" does not allow child layers from namespace "ads"`,
		"ERR_LAYER_AMPLIFICATION: gateway/workflow(3) × 1 layer in another namespace (×3) = 9 > 3",
	} {
		if !strings.Contains(story, want) {
			t.Errorf("the teams chapter no longer prints %q", want)
		}
	}
	if !regexp.MustCompile(`charge-connector\s+payments-api\s+connector\s+3\s+3\s+payments-api\s+True`).MatchString(story) {
		t.Errorf("the payments connector under the gateway's workflow is not Ready with 3 leaf attempts")
	}
	// One budget for a fleet: the controller counts 2, then 20 pods, and the
	// payload carries the count.
	for _, n := range []string{"2", "20"} {
		if !regexp.MustCompile(`sms-fleet\s+10\s+60s\s+1\s+` + n + `\s+True`).MatchString(story) {
			t.Errorf("the fleet budget was not shown counting %s consumers", n)
		}
	}
	if !regexp.MustCompile(`"consumers": \{\s+"count": 20,`).MatchString(story) {
		t.Errorf("the payload does not carry the count of 20 consumers")
	}
	// Refused: every unsafe manifest, the job above the layer limit, the ads
	// job without consent, and the gateway's retries above its child.
	if !strings.Contains(story, fmt.Sprintf("%d unsafe objects refused; the 5 policies stored were the safe ones", len(unsafe)+3)) {
		t.Errorf("an unsafe policy was stored:\n%s", story)
	}
}
