package v1alpha1_test

import (
	"os"
	"regexp"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/hack/devenv"
	"github.com/retryguard/retryguard/runtime/codes"
)

// One table drives both the Go validators (validation_test.go) and the real
// API server's CEL (cel_suite_test.go), so that a verdict that differs
// between the two fails a test. Each case lists the (field, code) pairs it
// must produce; an empty list means accepted.

type policyCase struct {
	name   string
	mutate func(*v1.RetryPolicySpec)
	want   []string // "field code", any order
}

type budgetCase struct {
	name   string
	mutate func(*v1.RetryBudgetSpec)
	want   []string
}

// dur is a Duration as written, so that a table can hold a malformed one.
func dur(s string) *v1.Duration { d := v1.Duration(s); return &d }

func fe(path string, c codes.Code) string { return path + " " + string(c) }

var policyCases = []policyCase{
	{name: "sample sms-2fa-dispatch is accepted", mutate: func(*v1.RetryPolicySpec) {}},
	{name: "one attempt needs no budget", mutate: func(s *v1.RetryPolicySpec) { s.MaxAttempts = 1; s.BudgetRef = nil }},
	{name: "one attempt may have a deadline at minRemaining", mutate: func(s *v1.RetryPolicySpec) {
		s.MaxAttempts = 1
		s.Deadline = *dur("500ms")
	}},
	{name: "zero attempts", mutate: func(s *v1.RetryPolicySpec) { s.MaxAttempts = 0 },
		want: []string{fe("spec.maxAttempts", codes.RetryLimitExceeded)}},
	{name: "five attempts", mutate: func(s *v1.RetryPolicySpec) { s.MaxAttempts = 5 },
		want: []string{fe("spec.maxAttempts", codes.RetryLimitExceeded)}},
	{name: "jitter None", mutate: func(s *v1.RetryPolicySpec) { s.Backoff.Jitter = v1.JitterNone },
		want: []string{fe("spec.backoff.jitter", codes.JitterRequired)}},
	{name: "Equal and Decorrelated jitter are accepted", mutate: func(s *v1.RetryPolicySpec) { s.Backoff.Jitter = v1.JitterDecorrelated }},
	{name: "base 0s is an immediate retry", mutate: func(s *v1.RetryPolicySpec) { s.Backoff.Base = dur("0s") },
		want: []string{fe("spec.backoff.base", codes.JitterRequired)}},
	{name: "cap below base", mutate: func(s *v1.RetryPolicySpec) { s.Backoff.Base = dur("2s"); s.Backoff.Cap = dur("1s") },
		want: []string{fe("spec.backoff.cap", codes.BackoffInvalid)}},
	{name: "cap equal to base is accepted", mutate: func(s *v1.RetryPolicySpec) { s.Backoff.Base = dur("1s"); s.Backoff.Cap = dur("1s") }},
	{name: "multiplier 11", mutate: func(s *v1.RetryPolicySpec) { s.Backoff.Multiplier = ptr.To[int32](11) },
		want: []string{fe("spec.backoff.multiplier", codes.OutOfRange)}},
	{name: "children from a namespace selector", mutate: func(s *v1.RetryPolicySpec) {
		s.Layer.AllowedChildren = &v1.AllowedChildren{Namespaces: &v1.ChildNamespaces{
			From:     ptr.To(v1.NamespacesFromSelector),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "payments"}}}}
	}},
	{name: "a parent in another namespace", mutate: func(s *v1.RetryPolicySpec) {
		s.Layer.ParentRef = &v1.ParentReference{Name: "gateway", Namespace: ptr.To("edge")}
	}},
	{name: "from Selector without a selector", mutate: func(s *v1.RetryPolicySpec) {
		s.Layer.AllowedChildren = &v1.AllowedChildren{Namespaces: &v1.ChildNamespaces{From: ptr.To(v1.NamespacesFromSelector)}}
	}, want: []string{fe("spec.layer.allowedChildren.namespaces.selector", codes.InvalidSelector)}},
	{name: "a selector with from All", mutate: func(s *v1.RetryPolicySpec) {
		s.Layer.AllowedChildren = &v1.AllowedChildren{Namespaces: &v1.ChildNamespaces{From: ptr.To(v1.NamespacesFromAll),
			Selector: &metav1.LabelSelector{}}}
	}, want: []string{fe("spec.layer.allowedChildren.namespaces.selector", codes.InvalidSelector)}},
	{name: "hiddenAttempts 0", mutate: func(s *v1.RetryPolicySpec) { s.Layer.HiddenAttempts = ptr.To[int32](0) },
		want: []string{fe("spec.layer.hiddenAttempts", codes.OutOfRange)}},
	{name: "hiddenAttempts negative", mutate: func(s *v1.RetryPolicySpec) { s.Layer.HiddenAttempts = ptr.To[int32](-2) },
		want: []string{fe("spec.layer.hiddenAttempts", codes.OutOfRange)}},
	{name: "hiddenAttempts above the cap", mutate: func(s *v1.RetryPolicySpec) { s.Layer.HiddenAttempts = ptr.To[int32](11) },
		want: []string{fe("spec.layer.hiddenAttempts", codes.OutOfRange)}},
	{name: "hiddenAttempts 3 (an SDK's own retries) is accepted", mutate: func(s *v1.RetryPolicySpec) { s.Layer.HiddenAttempts = ptr.To[int32](3) }},
	{name: "hiddenAttempts at the cap is accepted", mutate: func(s *v1.RetryPolicySpec) { s.Layer.HiddenAttempts = ptr.To[int32](10) }},
	{name: "retry on 400", mutate: func(s *v1.RetryPolicySpec) { s.RetryOn.StatusCodes = []int32{429, 400} },
		want: []string{fe("spec.retryOn.statusCodes", codes.NonRetryableStatus)}},
	{name: "retry on 404", mutate: func(s *v1.RetryPolicySpec) { s.RetryOn.StatusCodes = []int32{404} },
		want: []string{fe("spec.retryOn.statusCodes", codes.NonRetryableStatus)}},
	{name: "retry on 302", mutate: func(s *v1.RetryPolicySpec) { s.RetryOn.StatusCodes = []int32{302} },
		want: []string{fe("spec.retryOn.statusCodes", codes.NonRetryableStatus)}},
	{name: "retry on 501", mutate: func(s *v1.RetryPolicySpec) { s.RetryOn.StatusCodes = []int32{503, 501} },
		want: []string{fe("spec.retryOn.statusCodes", codes.NonRetryableStatus)}},
	{name: "retry on 505", mutate: func(s *v1.RetryPolicySpec) { s.RetryOn.StatusCodes = []int32{505} },
		want: []string{fe("spec.retryOn.statusCodes", codes.NonRetryableStatus)}},
	{name: "retry on 500 and 502 is accepted", mutate: func(s *v1.RetryPolicySpec) { s.RetryOn.StatusCodes = []int32{500, 502} }},
	{name: "retries without a budget", mutate: func(s *v1.RetryPolicySpec) { s.BudgetRef = nil },
		want: []string{fe("spec.budgetRef", codes.BudgetRequired)}},
	{name: "POST timeout retry without a key", mutate: func(s *v1.RetryPolicySpec) { s.Idempotency.KeyTemplate = nil },
		want: []string{fe("spec.maxAttempts", codes.AmbiguousWithoutIdempotency)}},
	{name: "no operation and ambiguous errors without a key", mutate: func(s *v1.RetryPolicySpec) {
		s.Idempotency.KeyTemplate = nil
		s.Target.Operation = nil
	}, want: []string{fe("spec.maxAttempts", codes.AmbiguousWithoutIdempotency)}},
	{name: "lower-case put is not a method", mutate: func(s *v1.RetryPolicySpec) {
		s.Idempotency.KeyTemplate = nil
		s.Target.Operation = ptr.To("put /v1/messages")
	}, want: []string{fe("spec.maxAttempts", codes.AmbiguousWithoutIdempotency)}},
	{name: "PUT timeout retry without a key is accepted", mutate: func(s *v1.RetryPolicySpec) {
		s.Idempotency.KeyTemplate = nil
		s.Target.Operation = ptr.To("PUT /v1/messages/42")
	}},
	{name: "bare GET is accepted", mutate: func(s *v1.RetryPolicySpec) {
		s.Idempotency.KeyTemplate = nil
		s.Target.Operation = ptr.To("GET")
	}},
	// Seed 003: retry_allowed(429, safe=False, ...) is false. Any retry of a
	// non-idempotent operation needs a key, whatever failure it answers.
	{name: "retrying a POST on 429 and safe errors only still needs a key", mutate: func(s *v1.RetryPolicySpec) {
		s.Idempotency.KeyTemplate = nil
		s.RetryOn.Errors = []v1.TransportError{v1.ConnectionRefused, v1.DNSFailure}
	}, want: []string{fe("spec.maxAttempts", codes.AmbiguousWithoutIdempotency)}},
	{name: "two attempts of a POST without a key", mutate: func(s *v1.RetryPolicySpec) {
		s.MaxAttempts = 2
		s.Idempotency = nil
		s.RetryOn = nil
	}, want: []string{fe("spec.maxAttempts", codes.AmbiguousWithoutIdempotency)}},
	{name: "one attempt of a POST needs no key, whatever it lists", mutate: func(s *v1.RetryPolicySpec) {
		s.MaxAttempts = 1
		s.BudgetRef = nil
		s.Idempotency.KeyTemplate = nil
	}},
	{name: "header with CR LF", mutate: func(s *v1.RetryPolicySpec) { s.Idempotency.Header = ptr.To("Idempotency-Key\r\nX-Evil: 1") },
		want: []string{fe("spec.idempotency.header", codes.InvalidHeader)}},
	{name: "header with a space", mutate: func(s *v1.RetryPolicySpec) { s.Idempotency.Header = ptr.To("Idempotency Key") },
		want: []string{fe("spec.idempotency.header", codes.InvalidHeader)}},
	// Defaults never invalidate a reasonable spec: retryAfter.maxDelay has
	// no fixed default that a short deadline could fall below.
	{name: "deadline 3s that never mentions retryAfter is accepted", mutate: func(s *v1.RetryPolicySpec) {
		s.Deadline = *dur("3s")
		s.RetryAfter = nil
	}},
	{name: "deadline 2s that never mentions retryAfter is accepted", mutate: func(s *v1.RetryPolicySpec) {
		s.Deadline = *dur("2s")
		s.RetryAfter = nil
		s.MinRemaining = nil
	}},
	{name: "deadline 3s with retryAfter.maxDelay 3s written", mutate: func(s *v1.RetryPolicySpec) {
		s.Deadline = *dur("3s")
		s.RetryAfter = &v1.RetryAfter{MaxDelay: dur("3s")}
	}, want: []string{fe("spec.retryAfter.maxDelay", codes.DeadlineInfeasible)}},
	{name: "key without placeholder", mutate: func(s *v1.RetryPolicySpec) { s.Idempotency.KeyTemplate = ptr.To("SMS-2FA-static") },
		want: []string{fe("spec.idempotency.keyTemplate", codes.UnstableIdempotencyKey)}},
	{name: "key with {attempt}", mutate: func(s *v1.RetryPolicySpec) { s.Idempotency.KeyTemplate = ptr.To("SMS-{user_id}-{attempt}") },
		want: []string{fe("spec.idempotency.keyTemplate", codes.UnstableIdempotencyKey)}},
	{name: "key with {UUID} in capitals", mutate: func(s *v1.RetryPolicySpec) { s.Idempotency.KeyTemplate = ptr.To("{UUID}") },
		want: []string{fe("spec.idempotency.keyTemplate", codes.UnstableIdempotencyKey)}},
	{name: "key with unbalanced brace", mutate: func(s *v1.RetryPolicySpec) { s.Idempotency.KeyTemplate = ptr.To("SMS-{user_id") },
		want: []string{fe("spec.idempotency.keyTemplate", codes.InvalidKeyTemplate), fe("spec.idempotency.keyTemplate", codes.UnstableIdempotencyKey)}},
	{name: "key with a lone closing brace", mutate: func(s *v1.RetryPolicySpec) { s.Idempotency.KeyTemplate = ptr.To("SMS-{user_id}}") },
		want: []string{fe("spec.idempotency.keyTemplate", codes.InvalidKeyTemplate)}},
	{name: "key with an empty placeholder", mutate: func(s *v1.RetryPolicySpec) { s.Idempotency.KeyTemplate = ptr.To("SMS-{}-{user_id}") },
		want: []string{fe("spec.idempotency.keyTemplate", codes.InvalidKeyTemplate)}},
	{name: "deadline at minRemaining", mutate: func(s *v1.RetryPolicySpec) {
		s.Deadline = *dur("500ms")
		s.RetryAfter.MaxDelay = dur("100ms")
	}, want: []string{fe("spec.deadline", codes.DeadlineInfeasible)}},
	{name: "retry-after max equal to deadline", mutate: func(s *v1.RetryPolicySpec) { s.RetryAfter.MaxDelay = dur("4s") },
		want: []string{fe("spec.retryAfter.maxDelay", codes.DeadlineInfeasible)}},
	{name: "per-attempt timeout above deadline", mutate: func(s *v1.RetryPolicySpec) { s.PerAttemptTimeout = dur("5s") },
		want: []string{fe("spec.perAttemptTimeout", codes.DeadlineInfeasible)}},
	{name: "zero deadline breaks three rules", mutate: func(s *v1.RetryPolicySpec) { s.Deadline = *dur("0s") },
		want: []string{
			fe("spec.deadline", codes.DeadlineInfeasible), fe("spec.deadline", codes.DeadlineInfeasible),
			fe("spec.retryAfter.maxDelay", codes.DeadlineInfeasible),
		}},
	{name: "negative deadline", mutate: func(s *v1.RetryPolicySpec) { s.Deadline = *dur("-1s") },
		want: []string{fe("spec.deadline", codes.InvalidDuration)}},
	{name: "durations without a unit, a leading digit or a number", mutate: func(s *v1.RetryPolicySpec) {
		s.Backoff.Base = dur(".5s")
		s.Backoff.Cap = dur("0")
		s.PerAttemptTimeout = dur("soon")
	}, want: []string{
		fe("spec.backoff.base", codes.InvalidDuration), fe("spec.backoff.cap", codes.InvalidDuration),
		fe("spec.perAttemptTimeout", codes.InvalidDuration),
	}},
	{name: "http fallback", mutate: func(s *v1.RetryPolicySpec) { s.Fallback.Channels[0].Endpoint = "http://push.auth.internal/v1" },
		want: []string{fe("spec.fallback.channels[0].endpoint", codes.UntestedCompensationBlocked)}},
	{name: "fallback that is not a URL", mutate: func(s *v1.RetryPolicySpec) { s.Fallback.Channels[0].Endpoint = "push.auth.internal/v1" },
		want: []string{fe("spec.fallback.channels[0].endpoint", codes.UntestedCompensationBlocked)}},
	{name: "unverified fallback", mutate: func(s *v1.RetryPolicySpec) { s.Fallback.Channels[0].Verified = ptr.To(false) },
		want: []string{fe("spec.fallback.channels[0].verified", codes.UntestedCompensationBlocked)}},
	{name: "fallback without verified", mutate: func(s *v1.RetryPolicySpec) {
		s.Fallback.Channels = append(s.Fallback.Channels, v1.FallbackChannel{Name: "email", Endpoint: "https://mail.internal/send"})
	}, want: []string{fe("spec.fallback.channels[1].verified", codes.UntestedCompensationBlocked)}},
	{name: "pool of zero connections", mutate: func(s *v1.RetryPolicySpec) { s.ConnectionPool.MaxConnections = 0 },
		want: []string{fe("spec.connectionPool.maxConnections", codes.OutOfRange)}},
	{name: "INC-2901 as written: five immediate unbudgeted retries", mutate: func(s *v1.RetryPolicySpec) {
		s.MaxAttempts = 5
		s.Backoff.Jitter = v1.JitterNone
		s.Backoff.Base = dur("0s")
		s.BudgetRef = nil
	}, want: []string{
		fe("spec.maxAttempts", codes.RetryLimitExceeded), fe("spec.backoff.jitter", codes.JitterRequired),
		fe("spec.backoff.base", codes.JitterRequired), fe("spec.budgetRef", codes.BudgetRequired),
	}},
}

var budgetCases = []budgetCase{
	{name: "sample telephony-provider is accepted", mutate: func(*v1.RetryBudgetSpec) {}},
	{name: "every bound at its edge is accepted", mutate: func(s *v1.RetryBudgetSpec) {
		s.RetryPercent = 100
		s.Window = dur("1h")
		s.MaxTokens = ptr.To[int32](1000)
		s.Partitions = ptr.To[int32](1000)
		s.MinRetriesPerSecond = ptr.To[int32](10000)
	}},
	{name: "retryPercent 0", mutate: func(s *v1.RetryBudgetSpec) { s.RetryPercent = 0 },
		want: []string{fe("spec.retryPercent", codes.OutOfRange)}},
	{name: "retryPercent 101", mutate: func(s *v1.RetryBudgetSpec) { s.RetryPercent = 101 },
		want: []string{fe("spec.retryPercent", codes.OutOfRange)}},
	{name: "window 500ms", mutate: func(s *v1.RetryBudgetSpec) { s.Window = dur("500ms") },
		want: []string{fe("spec.window", codes.OutOfRange)}},
	{name: "window 2h", mutate: func(s *v1.RetryBudgetSpec) { s.Window = dur("2h") },
		want: []string{fe("spec.window", codes.OutOfRange)}},
	{name: "negative window", mutate: func(s *v1.RetryBudgetSpec) { s.Window = dur("-1m") },
		want: []string{fe("spec.window", codes.InvalidDuration)}},
	{name: "maxTokens 0", mutate: func(s *v1.RetryBudgetSpec) { s.MaxTokens = ptr.To[int32](0) },
		want: []string{fe("spec.maxTokens", codes.OutOfRange)}},
	{name: "maxTokens 1001", mutate: func(s *v1.RetryBudgetSpec) { s.MaxTokens = ptr.To[int32](1001) },
		want: []string{fe("spec.maxTokens", codes.OutOfRange)}},
	{name: "negative floor", mutate: func(s *v1.RetryBudgetSpec) { s.MinRetriesPerSecond = ptr.To[int32](-1) },
		want: []string{fe("spec.minRetriesPerSecond", codes.OutOfRange)}},
	{name: "zero partitions", mutate: func(s *v1.RetryBudgetSpec) { s.Partitions = ptr.To[int32](0) },
		want: []string{fe("spec.partitions", codes.OutOfRange)}},
	{name: "1001 partitions", mutate: func(s *v1.RetryBudgetSpec) { s.Partitions = ptr.To[int32](1001) },
		want: []string{fe("spec.partitions", codes.OutOfRange)}},
	{name: "a fleet allowance at its edges", mutate: func(s *v1.RetryBudgetSpec) {
		s.MaxRetriesPerSecond = ptr.To[int32](100000)
		s.Consumers = &v1.BudgetConsumers{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "sms"}}}
	}},
	{name: "no retry at all: maxRetriesPerSecond 0", mutate: func(s *v1.RetryBudgetSpec) { s.MaxRetriesPerSecond = ptr.To[int32](0) }},
	{name: "negative maxRetriesPerSecond", mutate: func(s *v1.RetryBudgetSpec) { s.MaxRetriesPerSecond = ptr.To[int32](-1) },
		want: []string{fe("spec.maxRetriesPerSecond", codes.OutOfRange)}},
	{name: "maxRetriesPerSecond 100001", mutate: func(s *v1.RetryBudgetSpec) { s.MaxRetriesPerSecond = ptr.To[int32](100001) },
		want: []string{fe("spec.maxRetriesPerSecond", codes.OutOfRange)}},
	{name: "a floor above the fleet allowance", mutate: func(s *v1.RetryBudgetSpec) {
		s.MaxRetriesPerSecond = ptr.To[int32](20)
		s.MinRetriesPerSecond = ptr.To[int32](21)
	}, want: []string{fe("spec.minRetriesPerSecond", codes.OutOfRange)}},
	{name: "floor of 10001 retries per second", mutate: func(s *v1.RetryBudgetSpec) { s.MinRetriesPerSecond = ptr.To[int32](10001) },
		want: []string{fe("spec.minRetriesPerSecond", codes.OutOfRange)}},
}

// loadSample decodes one file of config/samples.
func loadSample[T any](tb testing.TB, file string) *T {
	tb.Helper()
	raw, err := os.ReadFile(devenv.Path("config", "samples", file))
	if err != nil {
		tb.Fatal(err)
	}
	obj := new(T)
	if err := yaml.UnmarshalStrict(raw, obj); err != nil {
		tb.Fatalf("%s: %v", file, err)
	}
	return obj
}

// policyFor returns the sample 2FA policy with the case's change applied.
func policyFor(tb testing.TB, tc policyCase) *v1.RetryPolicy {
	p := loadSample[v1.RetryPolicy](tb, "policy_v1alpha1_retrypolicy.yaml")
	tc.mutate(&p.Spec)
	return p
}

func budgetFor(tb testing.TB, tc budgetCase) *v1.RetryBudget {
	b := loadSample[v1.RetryBudget](tb, "policy_v1alpha1_retrybudget.yaml")
	tc.mutate(&b.Spec)
	return b
}

// verdict reduces field errors to sorted "field code" lines.
func verdict(errs field.ErrorList) []string {
	out := make([]string, 0, len(errs))
	for _, e := range errs {
		out = append(out, e.Field+" "+codeOf(e.Detail))
	}
	slices.Sort(out)
	return out
}

var codePattern = regexp.MustCompile(`\bERR_[A-Z_]+\b`)

// codeOf extracts the first ERR_ code of a message, or "" when it has none.
// The API server puts "Invalid value: " before a CEL message.
func codeOf(msg string) string { return codePattern.FindString(msg) }

func sorted(s []string) []string {
	out := slices.Clone(s)
	if out == nil {
		out = []string{}
	}
	slices.Sort(out)
	return out
}
