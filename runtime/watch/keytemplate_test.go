package watch_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
)

// A key template that cannot render must never mean zero attempts: the
// update is refused and the pod keeps enforcing the last good policy, key
// included.
func TestATemplateThatCannotRenderKeepsTheLastGoodPolicy(t *testing.T) {
	m := watch.NewManual()
	good := fixtures.Named("sms", 1)
	raw, err := policyconfig.Marshal(good)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetRaw("sms", raw); err != nil {
		t.Fatal(err)
	}
	for _, tmpl := range []string{"SMS-2FA-{user_id", "SMS-2FA-{user_id}}", "SMS-2FA-{}", "SMS-2FA-{user id}"} {
		bad := fixtures.Named("sms", 2)
		bad.Policy.KeyTemplate = tmpl
		b, err := jsonOf(bad)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.SetRaw("sms", b); err == nil {
			t.Fatalf("a template %q that cannot render was accepted", tmpl)
		}
	}
	if p, _ := m.Policy("sms"); p.Policy.Generation != 1 {
		t.Fatalf("the last good policy was replaced: %+v", p.Policy)
	}
	var keys []string
	err = retry.New(m).Do(context.Background(), "sms", retry.Vars{"user_id": "42", "login_session_id": "s-9"},
		func(_ context.Context, a retry.Attempt) error {
			keys = append(keys, a.Key)
			return nil
		})
	if err != nil || len(keys) != 1 || keys[0] != "SMS-2FA-42-s-9" {
		t.Fatalf("attempts %q, err %v", keys, err)
	}
}

// jsonOf encodes p without Marshal's validation, as a forger would.
func jsonOf(p *policyconfig.Payload) ([]byte, error) { return json.Marshal(p) }
