package policyconfig_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/retryguard/retryguard/contract/limits"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/contract/policyconfig/fixtures"
)

// testdata/fleet.json pins the wire format of a fleet budget, as
// docs/configmap-format.md shows it: Marshal writes exactly these bytes
// (compacted), and Parse reads them back to fixtures.Fleet.
func TestFleetGolden(t *testing.T) {
	golden, err := os.ReadFile("testdata/fleet.json")
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := json.Compact(&want, golden); err != nil {
		t.Fatal(err)
	}
	raw, err := policyconfig.Marshal(fixtures.Fleet())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, want.Bytes()) {
		t.Errorf("Marshal wrote\n%s\nwant (testdata/fleet.json)\n%s", raw, want.Bytes())
	}
	got, err := policyconfig.Parse(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, fixtures.Fleet()) {
		t.Errorf("Parse read\n%+v\nwant\n%+v", got.Budget, fixtures.Fleet().Budget)
	}
}

// A runtime released before fleet budgets refuses unknown fields, so a
// budget that uses neither an absolute allowance nor consumers must be
// published without a trace of them, and each appears only when used.
func TestFleetFieldsOnlyWhenUsed(t *testing.T) {
	keysOf := func(p *policyconfig.Payload) map[string]any {
		raw, err := policyconfig.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		return m["budget"].(map[string]any)
	}
	plain := keysOf(fixtures.SMS())
	for _, k := range []string{"maxRetriesPerSecond", "consumers"} {
		if _, ok := plain[k]; ok {
			t.Errorf("a budget without fleet figures carries %q", k)
		}
	}
	allowanceOnly := fixtures.Fleet()
	allowanceOnly.Budget.Consumers = nil
	m := keysOf(allowanceOnly)
	if _, ok := m["consumers"]; ok {
		t.Error("a budget without consumers carries a count")
	}
	if m["maxRetriesPerSecond"] != float64(20) {
		t.Errorf("maxRetriesPerSecond %v, want 20", m["maxRetriesPerSecond"])
	}
	// 0 is an allowance (no retry), not an absent one.
	zero := int32(0)
	allowanceOnly.Budget.MaxRetriesPerSecond = &zero
	if m := keysOf(allowanceOnly); m["maxRetriesPerSecond"] != float64(0) {
		t.Errorf("an allowance of 0 was dropped: %v", m)
	}
}

func TestParseRejectsFleetBudgets(t *testing.T) {
	budget := func(m map[string]any) map[string]any { return m["budget"].(map[string]any) }
	consumers := func(m map[string]any) map[string]any { return budget(m)["consumers"].(map[string]any) }
	for name, tc := range map[string]struct {
		edit  func(m map[string]any)
		field string
	}{
		"a negative allowance": {func(m map[string]any) { budget(m)["maxRetriesPerSecond"] = -1 }, "budget.maxRetriesPerSecond"},
		"an allowance above the cap": {
			func(m map[string]any) { budget(m)["maxRetriesPerSecond"] = limits.MaxBudgetRetriesPerSecond + 1 }, "budget.maxRetriesPerSecond"},
		"an allowance as a string": {func(m map[string]any) { budget(m)["maxRetriesPerSecond"] = "20" }, "payload"},
		"a floor above the allowance": {func(m map[string]any) {
			budget(m)["minRetriesPerSecond"] = 21
		}, "budget.minRetriesPerSecond"},
		"a negative count":          {func(m map[string]any) { consumers(m)["count"] = -1 }, "budget.consumers.count"},
		"a count beyond any fleet":  {func(m map[string]any) { consumers(m)["count"] = 1_000_000 + 1 }, "budget.consumers.count"},
		"a count beyond int32":      {func(m map[string]any) { consumers(m)["count"] = 1 << 40 }, "payload"},
		"a fractional count":        {func(m map[string]any) { consumers(m)["count"] = 1.5 }, "payload"},
		"a count without its time":  {func(m map[string]any) { delete(consumers(m), "observedAt") }, "budget.consumers.observedAt"},
		"the zero time":             {func(m map[string]any) { consumers(m)["observedAt"] = "0001-01-01T00:00:00Z" }, "budget.consumers.observedAt"},
		"a time that is not a time": {func(m map[string]any) { consumers(m)["observedAt"] = "just now" }, "payload"},
		"a time as a number":        {func(m map[string]any) { consumers(m)["observedAt"] = 1_700_000_000 }, "payload"},
		"an unknown consumer field": {func(m map[string]any) { consumers(m)["ready"] = 3 }, "payload"},
		"a key in other case": {func(m map[string]any) {
			consumers(m)["Count"] = consumers(m)["count"]
			delete(consumers(m), "count")
		}, "budget.consumers.Count"},
		"consumers that are not an object": {func(m map[string]any) { budget(m)["consumers"] = 20 }, "payload"},
		"a UID beyond the bound":           {func(m map[string]any) { budget(m)["uid"] = strings.Repeat("u", limits.MaxUIDLength+1) }, "budget.uid"},
		"members that are not base64":      {func(m map[string]any) { consumers(m)["members"] = "not base64!" }, "budget.consumers.members"},
		"members of a partial fingerprint": {func(m map[string]any) { consumers(m)["members"] = "AAAAAAAAAAAA" }, "budget.consumers.members"},
		"more members than the count":      {func(m map[string]any) { consumers(m)["count"] = 19 }, "budget.consumers.members"},
		"members named twice": {func(m map[string]any) {
			consumers(m)["members"], consumers(m)["count"] = "AAAAAAAAAAEAAAAAAAAAAQ==", 2
		}, "budget.consumers.members"},
		"members out of order": {func(m map[string]any) {
			consumers(m)["members"], consumers(m)["count"] = "AAAAAAAAAAIAAAAAAAAAAQ==", 2
		}, "budget.consumers.members"},
	} {
		t.Run(name, func(t *testing.T) {
			raw, err := policyconfig.Marshal(fixtures.Fleet())
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			tc.edit(m)
			edited, _ := json.Marshal(m)
			_, err = policyconfig.Parse(edited)
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

// A count names exactly the pods it counted, by their UIDs' fingerprints,
// in a form whose size follows the pods (8 bytes each, base64), whatever
// their UIDs: 2,000 pods take 21,336 bytes.
func TestMembersNameExactlyTheCountedPods(t *testing.T) {
	pods := fixtures.FleetPods()
	c := &policyconfig.Consumers{Count: int32(len(pods)), ObservedAt: fixtures.ObservedAt, Members: policyconfig.EncodeMembers(pods)}
	for _, uid := range pods {
		if !c.Includes(uid) {
			t.Fatalf("the count does not name %s", uid)
		}
	}
	for _, uid := range []string{"", "00000000-0000-4000-8000-000000000020", pods[0] + " "} {
		if c.Includes(uid) {
			t.Fatalf("the count names %q, which it did not count", uid)
		}
	}
	if again := policyconfig.EncodeMembers(append(slices.Clone(pods), pods[3], pods[0])); again != c.Members {
		t.Fatal("a pod listed twice is named once, in one order")
	}
	if (*policyconfig.Consumers)(nil).Includes(pods[0]) || (&policyconfig.Consumers{Members: "!"}).Includes(pods[0]) {
		t.Fatal("no count, or a count whose members do not decode, names no one")
	}
	many := make([]string, 2000)
	for i := range many {
		many[i] = fmt.Sprintf("8b0a6d0e-%04d-4c51-9a8e-1f2b3c4d5e6f", i)
	}
	if n := len(policyconfig.EncodeMembers(many)); n != 21_336 {
		t.Fatalf("2,000 pods take %d bytes", n)
	}
	huge := make([]string, policyconfig.MaxConsumerMembers+5)
	for i := range huge {
		huge[i] = fmt.Sprint(i)
	}
	capped := &policyconfig.Consumers{Count: int32(len(huge)), ObservedAt: fixtures.ObservedAt, Members: policyconfig.EncodeMembers(huge)}
	if n := len(capped.Members); n != base64.StdEncoding.EncodedLen(8*policyconfig.MaxConsumerMembers) {
		t.Fatalf("a fleet above the bound: %d bytes, want %d", n, base64.StdEncoding.EncodedLen(8*policyconfig.MaxConsumerMembers))
	}
	p := fixtures.Fleet()
	p.Budget.Consumers = capped
	if _, err := policyconfig.Marshal(p); err != nil {
		t.Fatalf("a fleet above the bound is published, its list capped: %v", err)
	}
}

// Marshal refuses what Parse would refuse: the controller never publishes a
// count the pods would throw away.
func TestMarshalRefusesAZeroObservedAt(t *testing.T) {
	p := fixtures.Fleet()
	p.Budget.Consumers.ObservedAt = time.Time{}
	if _, err := policyconfig.Marshal(p); err == nil || !strings.Contains(err.Error(), "budget.consumers.observedAt") {
		t.Fatalf("want an observedAt error, got %v", err)
	}
}

// FuzzFleetBudget: Parse accepts a fleet budget exactly when its figures are
// within the contract's bounds (an independent statement of them), and what
// it accepts reads back unchanged.
func FuzzFleetBudget(f *testing.F) {
	f.Add(true, int32(20), int32(0), true, int32(20), fixtures.ObservedAt.UnixNano(), fixtures.Fleet().Budget.Consumers.Members)
	f.Add(true, int32(0), int32(0), true, int32(0), int64(1), "")
	f.Add(false, int32(0), int32(5), true, int32(-1), int64(0), "")
	f.Add(true, int32(100001), int32(0), false, int32(0), int64(0), "")
	f.Add(true, int32(3), int32(4), true, int32(1_000_001), int64(-1), "")
	f.Fuzz(func(t *testing.T, hasMax bool, maxRPS, floor int32, hasConsumers bool, count int32, observedAt int64, members string) {
		p := fixtures.Fleet()
		p.Budget.MinRetriesPerSecond = floor
		p.Budget.MaxRetriesPerSecond, p.Budget.Consumers = nil, nil
		if hasMax {
			p.Budget.MaxRetriesPerSecond = &maxRPS
		}
		at := time.Time{}
		if observedAt != 0 {
			at = time.Unix(0, observedAt).UTC()
		}
		if hasConsumers {
			p.Budget.Consumers = &policyconfig.Consumers{Count: count, ObservedAt: at, Members: members}
		}
		valid := floor >= 0 && floor <= limits.MaxBudgetMinRetriesPerSecond &&
			(!hasMax || (maxRPS >= 0 && maxRPS <= limits.MaxBudgetRetriesPerSecond && floor <= maxRPS)) &&
			(!hasConsumers || (count >= 0 && count <= 1_000_000 && !at.IsZero() && membersValid(members, count)))
		raw, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := policyconfig.Parse(raw)
		switch {
		case valid && err != nil:
			t.Fatalf("refused a valid fleet budget: %v\n%s", err, raw)
		case !valid && err == nil:
			t.Fatalf("accepted an invalid fleet budget:\n%s", raw)
		case err != nil && !errors.Is(err, policyconfig.ErrInvalidPayload):
			t.Fatalf("not an ErrInvalidPayload: %v", err)
		case err == nil && !reflect.DeepEqual(got.Budget, p.Budget):
			t.Fatalf("read back\n%+v\nwant\n%+v", got.Budget, p.Budget)
		}
	})
}

// membersValid states the members' rule independently of the parser:
// standard base64 of whole 8-byte fingerprints, ascending without repeats,
// no more of them than the count.
func membersValid(members string, count int32) bool {
	raw, err := base64.StdEncoding.DecodeString(members)
	if err != nil || len(raw)%8 != 0 || len(raw)/8 > int(count) || len(raw)/8 > policyconfig.MaxConsumerMembers {
		return false
	}
	for i := 8; i < len(raw); i += 8 {
		if bytes.Compare(raw[i-8:i], raw[i:i+8]) >= 0 {
			return false
		}
	}
	return true
}
