package conformance_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
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
// copy, held to its one home, and written from it by make manifests
// (RETRYGUARD_WRITE_SCHEMA=1), so that a bound changed in contract/limits
// moves the schema too.
func TestTheSchemaBoundsAreTheLimits(t *testing.T) {
	raw, err := conformance.Files.ReadFile(conformance.SchemaFile)
	if err != nil {
		t.Fatal(err)
	}
	policy := func(path ...string) []string {
		return append([]string{"$defs", "enforcedPolicy", "properties"}, path...)
	}
	budget := func(path ...string) []string {
		return append([]string{"$defs", "enforcedBudget", "properties"}, path...)
	}
	want, err := writeBounds(raw, []schemaBound{
		{[]string{"properties", "schemaVersion", "const"}, policyconfig.SchemaVersion},
		{policy("maxAttempts", "maximum"), limits.MaxAttemptsCeiling},
		{policy("backoff", "properties", "multiplier", "maximum"), limits.MaxBackoffMultiplier},
		{policy("backoff", "properties", "jitter", "enum"), backoff.Jitters},
		{policy("criticality", "enum"), limits.Criticalities},
		{policy("retryOnErrors", "items", "enum"), limits.TransportErrors},
		{policy("retryOnStatusCodes", "maxItems"), limits.MaxRetryOnStatusCodes},
		{policy("retryOnErrors", "maxItems"), limits.MaxRetryOnErrors},
		{policy("fallback", "maxItems"), limits.MaxFallbackChannels},
		{policy("keyTemplate", "maxLength"), limits.MaxKeyTemplateLength},
		{policy("idempotencyHeader", "maxLength"), limits.MaxHeaderLength},
		{policy("operation", "maxLength"), limits.MaxOperationLength},
		{policy("name", "maxLength"), limits.MaxObjectNameLength - len(policyconfig.ConfigMapPrefix)},
		{policy("namespace", "pattern"), limits.DNS1123LabelPattern},
		{policy("eventsTopic", "maxLength"), limits.MaxEventsTopicLength},
		{policy("connectionPool", "properties", "maxConnections", "maximum"), limits.MaxConnectionsPerPool},
		{budget("retryPercent", "maximum"), limits.MaxBudgetRetryPercent},
		{budget("maxTokens", "maximum"), limits.MaxBudgetTokens},
		{budget("minRetriesPerSecond", "maximum"), limits.MaxBudgetMinRetriesPerSecond},
		{budget("partitions", "maximum"), limits.MaxBudgetPartitions},
		{budget("maxRetriesPerSecond", "maximum"), limits.MaxBudgetRetriesPerSecond},
		{budget("uid", "maxLength"), limits.MaxUIDLength},
		{budget("consumers", "properties", "count", "maximum"), policyconfig.MaxConsumerCount},
	})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(want, raw) {
		return
	}
	if os.Getenv("RETRYGUARD_WRITE_SCHEMA") != "" {
		if err := os.WriteFile(conformance.SchemaFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s states bounds other than contract/limits': run make manifests", conformance.SchemaFile)
}

// A schemaBound is the value a JSON path of the schema holds.
type schemaBound struct {
	path  []string
	value any
}

// writeBounds sets each bound's path in the JSON document raw to its value,
// leaving every other byte as it is: a value that already equals it keeps
// its layout, another is written in place on one line.
func writeBounds(raw []byte, bounds []schemaBound) ([]byte, error) {
	for _, b := range bounds {
		start, end, err := locate(raw, b.path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", strings.Join(b.path, "."), err)
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false) // a pattern is written as the schema reads it
		if err := enc.Encode(b.value); err != nil {
			return nil, err
		}
		value := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		var have, want bytes.Buffer
		if err := errors.Join(json.Compact(&have, raw[start:end]), json.Compact(&want, value)); err != nil {
			return nil, err
		}
		if !bytes.Equal(have.Bytes(), want.Bytes()) {
			raw = slices.Concat(raw[:start], value, raw[end:])
		}
	}
	return raw, nil
}

// locate is the byte range of the value at path (object keys) in raw.
func locate(raw []byte, path []string) (start, end int, err error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	for depth, key := range path {
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			return 0, 0, fmt.Errorf("%s is not an object", strings.Join(path[:depth], "."))
		}
		for {
			tok, err := dec.Token()
			if err != nil {
				return 0, 0, err
			}
			if tok == json.Delim('}') {
				return 0, 0, fmt.Errorf("no %s", strings.Join(path[:depth+1], "."))
			}
			if tok == key {
				break
			}
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return 0, 0, err
			}
		}
	}
	var value json.RawMessage
	if err := dec.Decode(&value); err != nil {
		return 0, 0, err
	}
	end = int(dec.InputOffset())
	return end - len(value), end, nil
}
