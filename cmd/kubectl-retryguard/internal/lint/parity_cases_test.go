package lint_test

import (
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/retryguard/retryguard/api/policygraph/layertest"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/hack/devenv"
)

// The admission tests live in test packages (api/v1alpha1's cases_test.go
// for the CRD's CEL, webhooks' webhook_rules_test.go for the webhook), which
// nothing else can import. Their inputs are restated here under the same
// names, and TestParityTableCoversTheAdmissionTables fails when a case is
// added there and not here.

// parityCase is a sequence of objects applied in order; an object with the
// name of an earlier one is an update of it.
type parityCase struct {
	name string
	objs func(tb testing.TB) []client.Object
}

// dur is a Duration as written, so that a table can hold a malformed one.
func dur(s string) *v1.Duration { d := v1.Duration(s); return &d }

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

// samplePolicy is cases_test.go's policyFor: the sample 2FA policy, changed.
func samplePolicy(mutate func(*v1.RetryPolicySpec)) func(testing.TB) []client.Object {
	return func(tb testing.TB) []client.Object {
		p := loadSample[v1.RetryPolicy](tb, "policy_v1alpha1_retrypolicy.yaml")
		mutate(&p.Spec)
		p.Name = "parity"
		return []client.Object{p}
	}
}

func sampleBudget(mutate func(*v1.RetryBudgetSpec)) func(testing.TB) []client.Object {
	return func(tb testing.TB) []client.Object {
		b := loadSample[v1.RetryBudget](tb, "policy_v1alpha1_retrybudget.yaml")
		mutate(&b.Spec)
		b.Name = "parity"
		return []client.Object{b}
	}
}

func seq(objs ...client.Object) func(testing.TB) []client.Object {
	return func(testing.TB) []client.Object { return objs }
}

// The namespace is set when a case runs; fixtures get an empty one.
var (
	policy = func(name, layer string, attempts int32, opts ...fixtures.Option) *v1.RetryPolicy {
		return fixtures.Policy("", name, layer, attempts, opts...)
	}
	budget   = func(name string, percent int32) *v1.RetryBudget { return fixtures.Budget("", name, percent) }
	parent   = fixtures.Parent
	onPool   = fixtures.Pool
	onBudget = fixtures.BudgetRef
	critical = fixtures.Critical
)

// celCases restates api/v1alpha1/cases_test.go's policyCases and budgetCases.
var celCases = []parityCase{
	{"sample sms-2fa-dispatch is accepted", samplePolicy(func(*v1.RetryPolicySpec) {})},
	{"one attempt needs no budget", samplePolicy(func(s *v1.RetryPolicySpec) { s.MaxAttempts = 1; s.BudgetRef = nil })},
	{"one attempt may have a deadline at minRemaining", samplePolicy(func(s *v1.RetryPolicySpec) { s.MaxAttempts = 1; s.Deadline = *dur("500ms") })},
	{"zero attempts", samplePolicy(func(s *v1.RetryPolicySpec) { s.MaxAttempts = 0 })},
	{"five attempts", samplePolicy(func(s *v1.RetryPolicySpec) { s.MaxAttempts = 5 })},
	{"jitter None", samplePolicy(func(s *v1.RetryPolicySpec) { s.Backoff.Jitter = v1.JitterNone })},
	{"Equal and Decorrelated jitter are accepted", samplePolicy(func(s *v1.RetryPolicySpec) { s.Backoff.Jitter = v1.JitterDecorrelated })},
	{"base 0s is an immediate retry", samplePolicy(func(s *v1.RetryPolicySpec) { s.Backoff.Base = dur("0s") })},
	{"cap below base", samplePolicy(func(s *v1.RetryPolicySpec) { s.Backoff.Base = dur("2s"); s.Backoff.Cap = dur("1s") })},
	{"cap equal to base is accepted", samplePolicy(func(s *v1.RetryPolicySpec) { s.Backoff.Base = dur("1s"); s.Backoff.Cap = dur("1s") })},
	{"multiplier 11", samplePolicy(func(s *v1.RetryPolicySpec) { s.Backoff.Multiplier = ptr.To[int32](11) })},
	{"hiddenAttempts 0", samplePolicy(func(s *v1.RetryPolicySpec) { s.Layer.HiddenAttempts = ptr.To[int32](0) })},
	{"hiddenAttempts negative", samplePolicy(func(s *v1.RetryPolicySpec) { s.Layer.HiddenAttempts = ptr.To[int32](-2) })},
	{"hiddenAttempts above the cap", samplePolicy(func(s *v1.RetryPolicySpec) { s.Layer.HiddenAttempts = ptr.To[int32](11) })},
	{"hiddenAttempts 3 (an SDK's own retries) is accepted", samplePolicy(func(s *v1.RetryPolicySpec) { s.Layer.HiddenAttempts = ptr.To[int32](3) })},
	{"hiddenAttempts at the cap is accepted", samplePolicy(func(s *v1.RetryPolicySpec) { s.Layer.HiddenAttempts = ptr.To[int32](10) })},
	{"retry on 400", samplePolicy(func(s *v1.RetryPolicySpec) { s.RetryOn.StatusCodes = []int32{429, 400} })},
	{"retry on 404", samplePolicy(func(s *v1.RetryPolicySpec) { s.RetryOn.StatusCodes = []int32{404} })},
	{"retry on 302", samplePolicy(func(s *v1.RetryPolicySpec) { s.RetryOn.StatusCodes = []int32{302} })},
	{"retry on 501", samplePolicy(func(s *v1.RetryPolicySpec) { s.RetryOn.StatusCodes = []int32{503, 501} })},
	{"retry on 505", samplePolicy(func(s *v1.RetryPolicySpec) { s.RetryOn.StatusCodes = []int32{505} })},
	{"retry on 500 and 502 is accepted", samplePolicy(func(s *v1.RetryPolicySpec) { s.RetryOn.StatusCodes = []int32{500, 502} })},
	{"retries without a budget", samplePolicy(func(s *v1.RetryPolicySpec) { s.BudgetRef = nil })},
	{"POST timeout retry without a key", samplePolicy(func(s *v1.RetryPolicySpec) { s.Idempotency.KeyTemplate = nil })},
	{"no operation and ambiguous errors without a key", samplePolicy(func(s *v1.RetryPolicySpec) {
		s.Idempotency.KeyTemplate = nil
		s.Target.Operation = nil
	})},
	{"lower-case put is not a method", samplePolicy(func(s *v1.RetryPolicySpec) {
		s.Idempotency.KeyTemplate = nil
		s.Target.Operation = ptr.To("put /v1/messages")
	})},
	{"PUT timeout retry without a key is accepted", samplePolicy(func(s *v1.RetryPolicySpec) {
		s.Idempotency.KeyTemplate = nil
		s.Target.Operation = ptr.To("PUT /v1/messages/42")
	})},
	{"bare GET is accepted", samplePolicy(func(s *v1.RetryPolicySpec) {
		s.Idempotency.KeyTemplate = nil
		s.Target.Operation = ptr.To("GET")
	})},
	{"safe errors only need no key", samplePolicy(func(s *v1.RetryPolicySpec) {
		s.Idempotency.KeyTemplate = nil
		s.RetryOn.Errors = []v1.TransportError{v1.ConnectionRefused, v1.DNSFailure}
	})},
	{"key without placeholder", samplePolicy(func(s *v1.RetryPolicySpec) { s.Idempotency.KeyTemplate = ptr.To("SMS-2FA-static") })},
	{"key with {attempt}", samplePolicy(func(s *v1.RetryPolicySpec) { s.Idempotency.KeyTemplate = ptr.To("SMS-{user_id}-{attempt}") })},
	{"key with {UUID} in capitals", samplePolicy(func(s *v1.RetryPolicySpec) { s.Idempotency.KeyTemplate = ptr.To("{UUID}") })},
	{"key with unbalanced brace", samplePolicy(func(s *v1.RetryPolicySpec) { s.Idempotency.KeyTemplate = ptr.To("SMS-{user_id") })},
	{"deadline at minRemaining", samplePolicy(func(s *v1.RetryPolicySpec) {
		s.Deadline = *dur("500ms")
		s.RetryAfter.MaxDelay = dur("100ms")
	})},
	{"retry-after max equal to deadline", samplePolicy(func(s *v1.RetryPolicySpec) { s.RetryAfter.MaxDelay = dur("4s") })},
	{"per-attempt timeout above deadline", samplePolicy(func(s *v1.RetryPolicySpec) { s.PerAttemptTimeout = dur("5s") })},
	{"zero deadline breaks three rules", samplePolicy(func(s *v1.RetryPolicySpec) { s.Deadline = *dur("0s") })},
	{"negative deadline", samplePolicy(func(s *v1.RetryPolicySpec) { s.Deadline = *dur("-1s") })},
	{"durations without a unit, a leading digit or a number", samplePolicy(func(s *v1.RetryPolicySpec) {
		s.Backoff.Base = dur(".5s")
		s.Backoff.Cap = dur("0")
		s.PerAttemptTimeout = dur("soon")
	})},
	{"retrying a POST on 429 and safe errors only still needs a key", samplePolicy(func(s *v1.RetryPolicySpec) {
		s.Idempotency.KeyTemplate = nil
		s.RetryOn.Errors = []v1.TransportError{v1.ConnectionRefused, v1.DNSFailure}
	})},
	{"two attempts of a POST without a key", samplePolicy(func(s *v1.RetryPolicySpec) { s.MaxAttempts = 2; s.Idempotency = nil; s.RetryOn = nil })},
	{"one attempt of a POST needs no key, whatever it lists", samplePolicy(func(s *v1.RetryPolicySpec) {
		s.MaxAttempts = 1
		s.BudgetRef = nil
		s.Idempotency.KeyTemplate = nil
	})},
	{"header with CR LF", samplePolicy(func(s *v1.RetryPolicySpec) { s.Idempotency.Header = ptr.To("Idempotency-Key\r\nX-Evil: 1") })},
	{"header with a space", samplePolicy(func(s *v1.RetryPolicySpec) { s.Idempotency.Header = ptr.To("Idempotency Key") })},
	{"deadline 3s that never mentions retryAfter is accepted", samplePolicy(func(s *v1.RetryPolicySpec) { s.Deadline = *dur("3s"); s.RetryAfter = nil })},
	{"deadline 2s that never mentions retryAfter is accepted", samplePolicy(func(s *v1.RetryPolicySpec) {
		s.Deadline = *dur("2s")
		s.RetryAfter = nil
		s.MinRemaining = nil
	})},
	{"deadline 3s with retryAfter.maxDelay 3s written", samplePolicy(func(s *v1.RetryPolicySpec) {
		s.Deadline = *dur("3s")
		s.RetryAfter = &v1.RetryAfter{MaxDelay: dur("3s")}
	})},
	{"key with a lone closing brace", samplePolicy(func(s *v1.RetryPolicySpec) { s.Idempotency.KeyTemplate = ptr.To("SMS-{user_id}}") })},
	{"key with an empty placeholder", samplePolicy(func(s *v1.RetryPolicySpec) { s.Idempotency.KeyTemplate = ptr.To("SMS-{}-{user_id}") })},
	{"http fallback", samplePolicy(func(s *v1.RetryPolicySpec) { s.Fallback.Channels[0].Endpoint = "http://push.auth.internal/v1" })},
	{"fallback that is not a URL", samplePolicy(func(s *v1.RetryPolicySpec) { s.Fallback.Channels[0].Endpoint = "push.auth.internal/v1" })},
	{"unverified fallback", samplePolicy(func(s *v1.RetryPolicySpec) { s.Fallback.Channels[0].Verified = ptr.To(false) })},
	{"fallback without verified", samplePolicy(func(s *v1.RetryPolicySpec) {
		s.Fallback.Channels = append(s.Fallback.Channels, v1.FallbackChannel{Name: "email", Endpoint: "https://mail.internal/send"})
	})},
	{"pool of zero connections", samplePolicy(func(s *v1.RetryPolicySpec) { s.ConnectionPool.MaxConnections = 0 })},
	{"INC-2901 as written: five immediate unbudgeted retries", samplePolicy(func(s *v1.RetryPolicySpec) {
		s.MaxAttempts = 5
		s.Backoff.Jitter = v1.JitterNone
		s.Backoff.Base = dur("0s")
		s.BudgetRef = nil
	})},

	{"sample telephony-provider is accepted", sampleBudget(func(*v1.RetryBudgetSpec) {})},
	{"every bound at its edge is accepted", sampleBudget(func(s *v1.RetryBudgetSpec) {
		s.RetryPercent = 100
		s.Window = dur("1h")
		s.MaxTokens = ptr.To[int32](1000)
		s.Partitions = ptr.To[int32](1000)
		s.MinRetriesPerSecond = ptr.To[int32](10000)
	})},
	{"retryPercent 0", sampleBudget(func(s *v1.RetryBudgetSpec) { s.RetryPercent = 0 })},
	{"retryPercent 101", sampleBudget(func(s *v1.RetryBudgetSpec) { s.RetryPercent = 101 })},
	{"window 500ms", sampleBudget(func(s *v1.RetryBudgetSpec) { s.Window = dur("500ms") })},
	{"window 2h", sampleBudget(func(s *v1.RetryBudgetSpec) { s.Window = dur("2h") })},
	{"negative window", sampleBudget(func(s *v1.RetryBudgetSpec) { s.Window = dur("-1m") })},
	{"maxTokens 0", sampleBudget(func(s *v1.RetryBudgetSpec) { s.MaxTokens = ptr.To[int32](0) })},
	{"maxTokens 1001", sampleBudget(func(s *v1.RetryBudgetSpec) { s.MaxTokens = ptr.To[int32](1001) })},
	{"negative floor", sampleBudget(func(s *v1.RetryBudgetSpec) { s.MinRetriesPerSecond = ptr.To[int32](-1) })},
	{"zero partitions", sampleBudget(func(s *v1.RetryBudgetSpec) { s.Partitions = ptr.To[int32](0) })},
	{"1001 partitions", sampleBudget(func(s *v1.RetryBudgetSpec) { s.Partitions = ptr.To[int32](1001) })},
	{"floor of 10001 retries per second", sampleBudget(func(s *v1.RetryBudgetSpec) { s.MinRetriesPerSecond = ptr.To[int32](10001) })},
}

func raised[T client.Object](obj T, change func(T)) T {
	c := obj.DeepCopyObject().(T)
	change(c)
	return c
}

// webhookCases restates webhooks/webhook_rules_test.go: the objects each
// spec creates or updates, in its order.
var webhookCases = []parityCase{
	{"refuses the seed's [3,3,3] chain: 27 calls at the bottom", seq(
		policy("workflow", "workflow", 3), policy("connector", "connector", 3, parent("job")),
		policy("job", "job", 3, parent("workflow")))},
	{"accepts the seed's [1,3,1] chain: 3 calls at the bottom", seq(
		policy("workflow", "workflow", 1), policy("job", "job", 3, parent("workflow")),
		policy("connector", "connector", 1, parent("job")))},
	{"refuses an update that raises a parent above the limit for an existing child", seq(
		policy("job", "job", 1), policy("connector", "connector", 3, parent("job")),
		raised(policy("job", "job", 1), func(p *v1.RetryPolicy) { p.Spec.MaxAttempts = 2 }))},
	{"counts a hidden layer: a connector whose SDK makes 3 attempts pushes a [1,1] chain over the limit", seq(
		policy("job", "job", 1), policy("connector", "connector", 1, parent("job")),
		policy("sdk", "sdk", 3, parent("connector"), fixtures.Hidden(3)),
		policy("sdk", "sdk", 1, parent("connector"), fixtures.Hidden(3)))},
	{"accepts a parentRef to a policy that does not exist yet, with a warning", seq(
		policy("connector", "connector", 3, parent("job")))},
	{"refuses a parentRef cycle", seq(policy("a", "a", 1, parent("b")), policy("b", "b", 1, parent("a")))},
	{"refuses a Standard caller on a Critical caller's pool", seq(
		policy("sms-2fa", "connector", 3, onPool("pool-sms-auth"), critical),
		policy("marketing", "connector", 3, onPool("pool-sms-auth"), onBudget("marketing")))},
	{"accepts a pool shared by the same criticality and service", seq(
		policy("sms-2fa", "connector", 3, onPool("pool-sms-auth"), critical),
		policy("sms-2fa-resend", "connector", 2, onPool("pool-sms-auth"), critical))},
	{"refuses a Critical and a Standard caller sharing one budget", seq(
		policy("sms-2fa", "connector", 3, critical), policy("marketing", "connector", 3))},
	{"refuses a budget above 10%", seq(budget("greedy", 25))},
	{"accepts 10%, and warns when a floor weakens the ratio", seq(
		budget("telephony", 10),
		raised(budget("floor", 10), func(b *v1.RetryBudget) { b.Spec.MinRetriesPerSecond = ptr.To[int32](2) }))},
	{"refuses an update that raises a budget above the cap", seq(
		budget("telephony", 10), raised(budget("telephony", 10), func(b *v1.RetryBudget) { b.Spec.RetryPercent = 50 }))},
	{"accepts a schedule that cannot fit its deadline, warning how many attempts can run", seq(
		policy("slow", "connector", 3, fixtures.Deadline(4*time.Second), fixtures.PerAttempt(2*time.Second)))},
	{"still meet CEL first, so one request gets both kinds of answer in order", seq(policy("five", "connector", 5))},

	{"refuses a [3,3,3] chain across three namespaces, naming each layer's namespace", seq(
		policyIn("gw", "workflow", "workflow", 3, allowing(v1.NamespacesFromAll, nil)),
		policyIn("pay", "connector", "connector", 3, parentIn("co", "job")),
		policyIn("co", "job", "job", 3, parentIn("gw", "workflow"), allowing(v1.NamespacesFromAll, nil)))},
	{"refuses a child from another namespace when its parent allows only its own (Same)", seq(
		policyIn("gw", "job", "job", 1, allowing(v1.NamespacesFromSame, nil)),
		policyIn("pay", "connector", "connector", 3, parentIn("gw", "job")))},
	{"accepts a child from another namespace when its parent allows All", seq(
		policyIn("gw", "job", "job", 1, allowing(v1.NamespacesFromAll, nil)),
		policyIn("pay", "connector", "connector", 3, parentIn("gw", "job")))},
	{"accepts a child whose namespace labels match its Selector parent, and counts it against the parent", seq(
		namespace("pay", payments),
		policyIn("gw", "job", "job", 1, allowing(v1.NamespacesFromSelector, payments)),
		policyIn("pay", "connector", "connector", 3, parentIn("gw", "job")),
		policyIn("gw", "job", "job", 2, allowing(v1.NamespacesFromSelector, payments)))},
	{"refuses a child whose namespace labels do not match its Selector parent", seq(
		namespace("ads", map[string]string{"retryguard.io/team": "ads"}),
		policyIn("gw", "job", "job", 1, allowing(v1.NamespacesFromSelector, payments)),
		policyIn("ads", "connector", "connector", 3, parentIn("gw", "job")))},
	{"admits a parent that withdraws consent, warning which children it no longer counts", seq(
		policyIn("gw", "job", "job", 3, allowing(v1.NamespacesFromAll, nil)),
		policyIn("pay", "connector", "connector", 1, parentIn("gw", "job")),
		policyIn("gw", "job", "job", 3))},
}

// policyIn is a fixture policy in the case's namespace named ns; the
// parity test maps it to a namespace of the case's own.
func policyIn(ns, name, layer string, attempts int32, opts ...fixtures.Option) *v1.RetryPolicy {
	return fixtures.Policy(ns, name, layer, attempts, opts...)
}

// namespace is a Namespace with labels, named as policyIn names namespaces.
func namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

var payments = map[string]string{"retryguard.io/team": "payments"}

var (
	parentIn = layertest.ParentIn
	allowing = layertest.Allowing
)
