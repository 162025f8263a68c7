package v1alpha1_test

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/contract/backoff"
	"github.com/retryguard/retryguard/contract/codes"
	"github.com/retryguard/retryguard/contract/httprules"
	"github.com/retryguard/retryguard/contract/limits"
)

// The CRD's markers restate facts whose home is Go: the codes, the bounds in
// package limits, the enum sets, the duration syntax. A CEL rule names its
// bound as ${limits.Name}, which make manifests (hack/crdbounds) replaces with
// the value; numeric markers (MaxLength, MaxItems) and patterns cannot, so
// this test reads the generated CRD and holds each copy to its home: a bound
// changed on one side only, or a CRD not regenerated, fails here.

// admissionCodes are the codes a CRD rule may carry.
var admissionCodes = []codes.Code{
	codes.RetryLimitExceeded, codes.JitterRequired, codes.BackoffInvalid, codes.NonRetryableStatus,
	codes.BudgetRequired, codes.AmbiguousWithoutIdempotency, codes.HedgeWithoutIdempotency, codes.UnstableIdempotencyKey,
	codes.InvalidHeader, codes.InvalidKeyTemplate, codes.DeadlineInfeasible,
	codes.UntestedCompensationBlocked, codes.OutOfRange, codes.InvalidDuration, codes.InvalidSelector,
}

func loadCRDSchema(t *testing.T, plural string) *apiextensionsv1.JSONSchemaProps {
	t.Helper()
	raw, err := os.ReadFile("../../config/crd/bases/policy.retryguard.io_" + plural + ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatal(err)
	}
	return crd.Spec.Versions[0].Schema.OpenAPIV3Schema
}

// at walks properties (and list items, written "[]") from s.
func at(t *testing.T, s *apiextensionsv1.JSONSchemaProps, path string) *apiextensionsv1.JSONSchemaProps {
	t.Helper()
	for _, p := range strings.Split(path, ".") {
		if p == "[]" {
			s = s.Items.Schema
			continue
		}
		next, ok := s.Properties[p]
		if !ok {
			t.Fatalf("CRD has no %s (at %q)", path, p)
		}
		s = &next
	}
	return s
}

// walk calls f on every schema under s, with its path.
func walk(path string, s *apiextensionsv1.JSONSchemaProps, f func(string, *apiextensionsv1.JSONSchemaProps)) {
	f(path, s)
	for name, p := range s.Properties {
		walk(path+"."+name, &p, f)
	}
	if s.Items != nil && s.Items.Schema != nil {
		walk(path+".[]", s.Items.Schema, f)
	}
}

var (
	ruleCode     = regexp.MustCompile(`^(ERR_[A-Z_]+): `)
	ruleMatches  = regexp.MustCompile(`matches\('((?:[^']|\\')*)'\)`)
	ruleDuration = regexp.MustCompile(`duration\('([^']*)'\)`)
	ruleBound    = regexp.MustCompile(`<= (\d+)\b`)
)

func TestCRDRulesCarryKnownCodesAndOneDurationSyntax(t *testing.T) {
	for _, plural := range []string{"retrypolicies", "retrybudgets"} {
		walk(plural, loadCRDSchema(t, plural), func(path string, s *apiextensionsv1.JSONSchemaProps) {
			for _, r := range s.XValidations {
				m := ruleCode.FindStringSubmatch(r.Message)
				if m == nil || !slices.Contains(admissionCodes, codes.Code(m[1])) {
					t.Errorf("%s: rule %q has message %q, which does not start with a known admission code", path, r.Rule, r.Message)
				}
				for _, mm := range ruleMatches.FindAllStringSubmatch(r.Rule, -1) {
					if strings.Contains(mm[1], "(ns|us") && mm[1] != v1.DurationPattern {
						t.Errorf("%s: rule %q spells the duration syntax as %q, not v1alpha1.DurationPattern %q", path, r.Rule, mm[1], v1.DurationPattern)
					}
				}
			}
		})
	}
}

// bound returns the single "<= N" of the one rule at s whose message has code c.
func bound(t *testing.T, s *apiextensionsv1.JSONSchemaProps, c codes.Code, field string) string {
	t.Helper()
	for _, r := range s.XValidations {
		if strings.HasPrefix(r.Message, string(c)+":") && strings.Contains(r.Rule, field) {
			if m := ruleBound.FindAllStringSubmatch(r.Rule, -1); len(m) == 1 {
				return m[0][1]
			}
		}
	}
	t.Fatalf("no %s rule with one upper bound on %q", c, field)
	return ""
}

func TestCRDBoundsAreTheLimits(t *testing.T) {
	policy := loadCRDSchema(t, "retrypolicies")
	spec := at(t, policy, "spec")
	budget := at(t, loadCRDSchema(t, "retrybudgets"), "spec")
	n := func(v any) string { return fmt.Sprint(v) }
	for _, tc := range []struct {
		name      string
		got, want string
	}{
		{"maxAttempts", bound(t, spec, codes.RetryLimitExceeded, "self.maxAttempts"), n(limits.MaxAttemptsCeiling)},
		{"backoff.multiplier", bound(t, at(t, spec, "backoff.multiplier"), codes.OutOfRange, "self"), n(limits.MaxBackoffMultiplier)},
		{"layer.hiddenAttempts", bound(t, at(t, spec, "layer.hiddenAttempts"), codes.OutOfRange, "self"), n(limits.MaxHiddenAttempts)},
		{"hedging.maxHedges", bound(t, at(t, spec, "hedging.maxHedges"), codes.OutOfRange, "self"), n(limits.MaxHedges)},
		{"hedging.latency.percentile", bound(t, at(t, spec, "hedging.latency.percentile"), codes.OutOfRange, "self"), n(limits.MaxHedgePercentile)},
		{"connectionPool.maxConnections", bound(t, at(t, spec, "connectionPool.maxConnections"), codes.OutOfRange, "self"), n(limits.MaxConnectionsPerPool)},
		{"retryPercent", bound(t, at(t, budget, "retryPercent"), codes.OutOfRange, "self"), n(limits.MaxBudgetRetryPercent)},
		{"maxTokens", bound(t, at(t, budget, "maxTokens"), codes.OutOfRange, "self"), n(limits.MaxBudgetTokens)},
		{"minRetriesPerSecond", bound(t, at(t, budget, "minRetriesPerSecond"), codes.OutOfRange, "self"), n(limits.MaxBudgetMinRetriesPerSecond)},
		{"partitions", bound(t, at(t, budget, "partitions"), codes.OutOfRange, "self"), n(limits.MaxBudgetPartitions)},
		{"maxRetriesPerSecond", bound(t, at(t, budget, "maxRetriesPerSecond"), codes.OutOfRange, "self"), n(limits.MaxBudgetRetriesPerSecond)},
		{"status.hiddenLayers maxItems", n(*at(t, policy, "status.hiddenLayers").MaxItems), n(limits.MaxHiddenLayers)},
		{"layer.parentRef.namespace maxLength", n(*at(t, spec, "layer.parentRef.namespace").MaxLength), n(limits.MaxDNSLabelLength)},
		{"layer.parentRef.namespace pattern", at(t, spec, "layer.parentRef.namespace").Pattern, limits.DNS1123LabelPattern},
		{"retryOn.statusCodes maxItems", n(*at(t, spec, "retryOn.statusCodes").MaxItems), n(limits.MaxRetryOnStatusCodes)},
		{"retryOn.errors maxItems", n(*at(t, spec, "retryOn.errors").MaxItems), n(limits.MaxRetryOnErrors)},
		{"fallback.channels maxItems", n(*at(t, spec, "fallback.channels").MaxItems), n(limits.MaxFallbackChannels)},
		{"idempotency.keyTemplate maxLength", n(*at(t, spec, "idempotency.keyTemplate").MaxLength), n(limits.MaxKeyTemplateLength)},
		{"idempotency.header maxLength", n(*at(t, spec, "idempotency.header").MaxLength), n(limits.MaxHeaderLength)},
		{"target.operation maxLength", n(*at(t, spec, "target.operation").MaxLength), n(limits.MaxOperationLength)},
		{"target.service maxLength", n(*at(t, spec, "target.service").MaxLength), n(limits.MaxDNSLabelLength)},
		{"budgetRef.name maxLength", n(*at(t, spec, "budgetRef.name").MaxLength), n(limits.MaxObjectNameLength)},
		{"fallback endpoint maxLength", n(*at(t, spec, "fallback.channels.[].endpoint").MaxLength), n(limits.MaxFallbackEndpointLength)},
		{"events.topic maxLength", n(*at(t, spec, "events.topic").MaxLength), n(limits.MaxEventsTopicLength)},
		{"target.service pattern", at(t, spec, "target.service").Pattern, limits.DNS1123LabelPattern},
		{"connectionPool.name pattern", at(t, spec, "connectionPool.name").Pattern, limits.DNS1123LabelPattern},
		{"events.topic pattern", at(t, spec, "events.topic").Pattern, limits.EventsTopicPattern},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: the CRD says %s, Go says %s", tc.name, tc.got, tc.want)
		}
	}

	// The window's range is written as two duration literals.
	var window []time.Duration
	for _, r := range at(t, budget, "window").XValidations {
		if strings.HasPrefix(r.Message, string(codes.OutOfRange)+":") {
			for _, m := range ruleDuration.FindAllStringSubmatch(r.Rule, -1) {
				d, err := time.ParseDuration(m[1])
				if err != nil {
					t.Fatal(err)
				}
				window = append(window, d)
			}
		}
	}
	if want := []time.Duration{limits.MinBudgetWindow, limits.MaxBudgetWindow}; !slices.Equal(window, want) {
		t.Errorf("window range: the CRD says %v, Go says %v", window, want)
	}
}

func TestCRDEnumsAreTheGoSets(t *testing.T) {
	spec := at(t, loadCRDSchema(t, "retrypolicies"), "spec")
	enum := func(path string) []string {
		var out []string
		for _, e := range at(t, spec, path).Enum {
			var s string
			if err := yaml.Unmarshal(e.Raw, &s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		slices.Sort(out)
		return out
	}
	set := func(vs ...string) []string { slices.Sort(vs); return vs }
	// The CRD also names None, only to refuse it with ERR_JITTER_REQUIRED.
	jitters := []string{string(v1.JitterNone)}
	for _, j := range backoff.Jitters {
		jitters = append(jitters, string(j))
	}
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"backoff.jitter", set(jitters...)},
		{"retryOn.errors.[]", set(slices.Clone(limits.TransportErrors)...)},
		{"criticality", set(slices.Clone(limits.Criticalities)...)},
	} {
		if got := enum(tc.path); !slices.Equal(got, tc.want) {
			t.Errorf("%s: the CRD's enum is %v, Go's set is %v", tc.path, got, tc.want)
		}
	}
}

var ruleIn = regexp.MustCompile(`e in \[([^\]]*)\]`)

// The maxAttempts rule restates two sets: the idempotent methods
// (httprules.IdempotentMethodPattern) and the errors that prove a request
// never left (limits.PreDispatchErrors).
func TestCRDReplaySafetyRuleIsTheGoRule(t *testing.T) {
	spec := at(t, loadCRDSchema(t, "retrypolicies"), "spec")
	var rule string
	for _, r := range spec.XValidations {
		if strings.HasPrefix(r.Message, string(codes.AmbiguousWithoutIdempotency)+":") {
			rule = r.Rule
		}
	}
	if rule == "" {
		t.Fatal("no ERR_AMBIGUOUS_WITHOUT_IDEMPOTENCY rule on spec")
	}
	var patterns []string
	for _, m := range ruleMatches.FindAllStringSubmatch(rule, -1) {
		patterns = append(patterns, m[1])
	}
	if !slices.Equal(patterns, []string{httprules.IdempotentMethodPattern}) {
		t.Errorf("the rule matches %q, Go's pattern is %q", patterns, httprules.IdempotentMethodPattern)
	}
	m := ruleIn.FindStringSubmatch(rule)
	if m == nil {
		t.Fatalf("the rule %q lists no pre-dispatch errors", rule)
	}
	var listed []string
	for _, e := range strings.Split(m[1], ",") {
		listed = append(listed, strings.Trim(strings.TrimSpace(e), "'"))
	}
	slices.Sort(listed)
	want := slices.Sorted(slices.Values(limits.PreDispatchErrors))
	if !slices.Equal(listed, want) {
		t.Errorf("the rule lists %v as pre-dispatch errors, limits.PreDispatchErrors is %v", listed, want)
	}
}
