package policyconfig_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
)

// fleetCount is the count fixtures.Fleet inlines, as the budget's
// ConfigMap carries it.
func fleetCount() *policyconfig.Count {
	return &policyconfig.Count{SchemaVersion: policyconfig.CountSchemaVersion, Namespace: "auth", Budget: "telephony-provider",
		UID: fixtures.BudgetUID, Consumers: *fixtures.Fleet().Budget.Consumers}
}

// published is fixtures.Fleet as the controller publishes it now: Counted,
// without its count.
func publishedFleet() *policyconfig.Payload {
	p := fixtures.Fleet()
	p.Budget.Counted, p.Budget.Consumers = true, nil
	return p
}

// testdata/count.json pins the budget ConfigMap's count, as
// docs/configmap-format.md shows it: MarshalCount writes exactly these bytes
// (compacted), and ParseCount reads them back.
func TestCountGolden(t *testing.T) {
	golden, err := os.ReadFile("testdata/count.json")
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := json.Compact(&want, golden); err != nil {
		t.Fatal(err)
	}
	raw, err := policyconfig.MarshalCount(fleetCount())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, want.Bytes()) {
		t.Errorf("MarshalCount wrote\n%s\nwant (testdata/count.json)\n%s", raw, want.Bytes())
	}
	got, err := policyconfig.ParseCount(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, fleetCount()) {
		t.Errorf("ParseCount read\n%+v\nwant\n%+v", got, fleetCount())
	}
	// The payload a counted budget is published in says so and carries
	// no count; it parses.
	raw, err = policyconfig.Marshal(publishedFleet())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte(`"counted":true`)) || bytes.Contains(raw, []byte(`"consumers"`)) {
		t.Errorf("the published payload:\n%s", raw)
	}
}

// Join gives a payload its budget's count only when the count is of that
// budget by namespace, name and UID; otherwise none, which gives no share.
func TestJoinByNameAndUID(t *testing.T) {
	joined := publishedFleet().Join(fleetCount())
	if !reflect.DeepEqual(joined.Budget.Consumers, fixtures.Fleet().Budget.Consumers) || !joined.Budget.Counted {
		t.Fatalf("joined %+v, want the count", joined.Budget)
	}
	for name, mutate := range map[string]func(*policyconfig.Count){
		"another UID (the budget deleted and created again)": func(c *policyconfig.Count) { c.UID = "8e4d3b72-1c6f-4a8b-8d2e-3f9a7b5c6d01" },
		"another budget":    func(c *policyconfig.Count) { c.Budget = "other" },
		"another namespace": func(c *policyconfig.Count) { c.Namespace = "billing" },
	} {
		c := fleetCount()
		mutate(c)
		if got := joined.Join(c); got.Budget.Consumers != nil {
			t.Errorf("%s: joined %+v", name, got.Budget.Consumers)
		}
	}
	if got := joined.Join(nil); got.Budget.Consumers != nil || !got.Budget.Counted {
		t.Errorf("no count: %+v", got.Budget)
	}
	// Join copies: the payload as published is never changed, so a
	// watcher can join it again to the next count.
	p := publishedFleet()
	_ = p.Join(fleetCount())
	if !reflect.DeepEqual(p, publishedFleet()) {
		t.Error("Join changed its receiver")
	}
	// A payload of an older controller, which inlined its count without
	// Counted, keeps it; one without a budget is as it was.
	old := fixtures.Fleet()
	if got := old.Join(nil); got != old {
		t.Error("an inlined count was replaced")
	}
	if sms := fixtures.SMS(); sms.Join(fleetCount()) != sms {
		t.Error("a payload of an uncounted budget changed")
	}
}

// ParseCount is as strict as Parse: every refusal names its field.
func TestParseCountRefuses(t *testing.T) {
	good, err := policyconfig.MarshalCount(fleetCount())
	if err != nil {
		t.Fatal(err)
	}
	for field, raw := range map[string]string{
		"schemaVersion":        strings.Replace(string(good), policyconfig.CountSchemaVersion, "policy.retryguard.io/consumers/v2", 1),
		"uid":                  strings.Replace(string(good), fixtures.BudgetUID, "", 1),
		"namespace":            strings.Replace(string(good), `"auth"`, `"Auth"`, 1),
		"budget":               strings.Replace(string(good), `"telephony-provider"`, `"telephony provider"`, 1),
		"consumers.count":      strings.Replace(string(good), `"count":20`, `"count":-1`, 1),
		"consumers.members":    strings.Replace(string(good), `"members":"`, `"members":"!`, 1),
		"consumers.observedAt": strings.Replace(string(good), `"observedAt":"2026-11-30T00:00:15.25Z"`, `"observedAt":"0001-01-01T00:00:00Z"`, 1),
		"count":                strings.Replace(string(good), `"budget"`, `"Budget"`, 1) + "",
		"payload trailing":     string(good) + "{}",
		"unknown field":        strings.Replace(string(good), `{"schemaVersion"`, `{"extra":1,"schemaVersion"`, 1),
	} {
		if _, err := policyconfig.ParseCount([]byte(raw)); err == nil || !errors.Is(err, policyconfig.ErrInvalidPayload) {
			t.Errorf("%s: accepted or not an ErrInvalidPayload: %v\n%s", field, err, raw)
		}
	}
}

// FuzzParseCount: ParseCount never panics, and what it accepts is written
// back by MarshalCount to a count it reads back unchanged.
func FuzzParseCount(f *testing.F) {
	good, _ := policyconfig.MarshalCount(fleetCount())
	f.Add(good)
	f.Add(
		[]byte(
			`{"schemaVersion":"policy.retryguard.io/consumers/v1","namespace":"a","budget":"b","uid":"u","consumers":{"count":0,"observedAt":"2026-01-01T00:00:00Z"}}`,
		),
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := policyconfig.ParseCount(data)
		if err != nil {
			if !errors.Is(err, policyconfig.ErrInvalidPayload) {
				t.Fatalf("not an ErrInvalidPayload: %v", err)
			}
			return
		}
		raw, err := policyconfig.MarshalCount(c)
		if err != nil {
			t.Fatalf("accepted but not written back: %v", err)
		}
		again, err := policyconfig.ParseCount(raw)
		if err != nil || !again.Consumers.ObservedAt.Equal(c.Consumers.ObservedAt) {
			t.Fatalf("read back %+v, %v", again, err)
		}
		again.Consumers.ObservedAt = c.Consumers.ObservedAt
		if !reflect.DeepEqual(again, c) {
			t.Fatalf("read back\n%+v\nwant\n%+v", again, c)
		}
	})
}

// A counted payload names its budget's UID: a count is joined by it.
func TestCountedNeedsAUID(t *testing.T) {
	p := publishedFleet()
	p.Budget.UID = ""
	if _, err := policyconfig.Marshal(p); err == nil || !strings.Contains(err.Error(), "budget.uid") {
		t.Fatalf("want a budget.uid error, got %v", err)
	}

}
