package conformance_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/retryguard/retryguard/conformance"
	"github.com/retryguard/retryguard/contract/backoff"
	"github.com/retryguard/retryguard/contract/limits"
	"github.com/retryguard/retryguard/contract/policyconfig"
)

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	raw, err := conformance.Files.ReadFile(conformance.SchemaFile)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(conformance.SchemaFile, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(conformance.SchemaFile)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func instance(t *testing.T, raw []byte) any {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Every payload a pod accepts is valid under the schema: the schema is no
// stricter than the contract. (It is looser: rules across fields are
// stated in docs/configmap-format.md and held by the payload vectors.)
func TestEveryAcceptedPayloadIsValidUnderTheSchema(t *testing.T) {
	s := compileSchema(t)
	file := read[conformance.PayloadFileSchema](t, conformance.PayloadFile)
	n := 0
	for _, v := range file.Vectors {
		raw, err := v.Apply(file.Base)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := policyconfig.Parse(raw); err != nil {
			continue
		}
		n++
		if err := s.Validate(instance(t, raw)); err != nil {
			t.Errorf("%s: accepted by the runtime, invalid under the schema: %v", v.Name, err)
		}
	}
	for _, v := range read[[]conformance.PayloadVector](t, conformance.AdmissionFile) {
		if v.Accept {
			n++
			if err := s.Validate(instance(t, v.Payload)); err != nil {
				t.Errorf("%s: accepted, invalid under the schema: %v", v.Name, err)
			}
		}
	}
	if n < 10 {
		t.Fatalf("only %d accepted payloads checked", n)
	}
}

// The schema refuses what a field's own shape refuses: an unknown field,
// another schema version, a jitter or criticality outside the enum, a
// count out of range.
func TestTheSchemaRefusesWhatAFieldsShapeRefuses(t *testing.T) {
	s := compileSchema(t)
	file := read[conformance.PayloadFileSchema](t, conformance.PayloadFile)
	for _, name := range []string{
		"an unknown top-level field is refused", "field names are case-sensitive", "another schema version is refused",
		"jitter None is refused", "zero attempts are refused", "four attempts are above the ceiling of 3",
		"a criticality outside the list is refused", "a multiplier of 11 is refused", "a duration is a string, not a number",
		"an unknown transport error name is refused", "a namespace is a DNS-1123 label",
	} {
		i := slices.IndexFunc(file.Vectors, func(v conformance.PayloadPatch) bool { return v.Name == name })
		if i < 0 {
			t.Fatalf("no vector %q", name)
		}
		raw, err := file.Vectors[i].Apply(file.Base)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(instance(t, raw)); err == nil {
			t.Errorf("%s: valid under the schema", name)
		}
	}
}

// The schema's duration pattern is the grammar the duration vectors state.
func TestTheDurationPatternIsTheGrammar(t *testing.T) {
	var schema struct {
		Defs struct {
			Duration struct {
				Pattern string `json:"pattern"`
			} `json:"duration"`
		} `json:"$defs"`
	}
	raw, _ := conformance.Files.ReadFile(conformance.SchemaFile)
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(schema.Defs.Duration.Pattern)
	file := read[conformance.File[conformance.DurationVector]](t, conformance.DurationFile)
	for _, v := range file.Vectors {
		// A value past the int64 range fits the grammar and is still
		// refused: the grammar cannot count.
		overflow := v.Text == "3000000h"
		if got := re.MatchString(v.Text); got != v.Accept && !overflow {
			t.Errorf("%q: pattern matches %v, vector accepts %v", v.Text, got, v.Accept)
		}
	}
}

// Every bound and enum the schema states is contract/limits': the schema is a
// copy, held to its one home.
func TestTheSchemaBoundsAreTheLimits(t *testing.T) {
	raw, _ := conformance.Files.ReadFile(conformance.SchemaFile)
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	get := func(path ...string) any {
		var cur any = doc
		for _, p := range path {
			cur = cur.(map[string]any)[p]
		}
		return cur
	}
	policy := func(path ...string) any {
		return get(append([]string{"$defs", "enforcedPolicy", "properties"}, path...)...)
	}
	budget := func(path ...string) any {
		return get(append([]string{"$defs", "enforcedBudget", "properties"}, path...)...)
	}
	num := func(v any) string { return fmt.Sprint(v) }
	enum := func(v any) string { return fmt.Sprint(v.(map[string]any)["enum"]) }
	for _, c := range []struct {
		what      string
		got, want string
	}{
		{"schemaVersion", num(get("properties", "schemaVersion", "const")), policyconfig.SchemaVersion},
		{"maxAttempts", num(policy("maxAttempts", "maximum")), num(limits.MaxAttemptsCeiling)},
		{"multiplier", num(policy("backoff", "properties", "multiplier", "maximum")), num(limits.MaxBackoffMultiplier)},
		{"jitter", enum(policy("backoff", "properties", "jitter")), fmt.Sprint(backoff.Jitters)},
		{"criticality", enum(policy("criticality")), fmt.Sprint(limits.Criticalities)},
		{"retryOnErrors", enum(policy("retryOnErrors", "items")), fmt.Sprint(limits.TransportErrors)},
		{"retryOnStatusCodes", num(policy("retryOnStatusCodes", "maxItems")), num(limits.MaxRetryOnStatusCodes)},
		{"retryOnErrors count", num(policy("retryOnErrors", "maxItems")), num(limits.MaxRetryOnErrors)},
		{"fallback", num(policy("fallback", "maxItems")), num(limits.MaxFallbackChannels)},
		{"keyTemplate", num(policy("keyTemplate", "maxLength")), num(limits.MaxKeyTemplateLength)},
		{"idempotencyHeader", num(policy("idempotencyHeader", "maxLength")), num(limits.MaxHeaderLength)},
		{"operation", num(policy("operation", "maxLength")), num(limits.MaxOperationLength)},
		{"name", num(policy("name", "maxLength")), num(limits.MaxObjectNameLength - len(policyconfig.ConfigMapPrefix))},
		{"namespace", num(policy("namespace", "pattern")), limits.DNS1123LabelPattern},
		{"eventsTopic", num(policy("eventsTopic", "maxLength")), num(limits.MaxEventsTopicLength)},
		{"maxConnections", num(policy("connectionPool", "properties", "maxConnections", "maximum")), num(limits.MaxConnectionsPerPool)},
		{"retryPercent", num(budget("retryPercent", "maximum")), num(limits.MaxBudgetRetryPercent)},
		{"maxTokens", num(budget("maxTokens", "maximum")), num(limits.MaxBudgetTokens)},
		{"minRetriesPerSecond", num(budget("minRetriesPerSecond", "maximum")), num(limits.MaxBudgetMinRetriesPerSecond)},
		{"partitions", num(budget("partitions", "maximum")), num(limits.MaxBudgetPartitions)},
		{"maxRetriesPerSecond", num(budget("maxRetriesPerSecond", "maximum")), num(limits.MaxBudgetRetriesPerSecond)},
		{"uid", num(budget("uid", "maxLength")), num(limits.MaxUIDLength)},
		{"consumers.count", num(budget("consumers", "properties", "count", "maximum")), num(policyconfig.MaxConsumerCount)},
	} {
		if c.got != c.want {
			t.Errorf("schema %s is %s, contract/limits says %s", c.what, c.got, c.want)
		}
	}
}
