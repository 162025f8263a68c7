package lint_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/internal/testenv"
)

// The single-object admission cases are imported from api/v1alpha1/fixtures.
// The webhook's cases live in a test package (webhooks'
// webhook_rules_test.go), which nothing else can import: their inputs are
// restated here under the same names, and
// TestParityTableCoversTheAdmissionTables fails when a case is added there
// and not here.

// parityCase is a sequence of objects applied in order; an object with the
// name of an earlier one is an update of it.
type parityCase struct {
	name string
	objs func(tb testing.TB) []client.Object
}

// samplePolicy is api/v1alpha1's policyFor: the sample 2FA policy, changed.
func samplePolicy(mutate func(*v1.RetryPolicySpec)) func(testing.TB) []client.Object {
	return func(tb testing.TB) []client.Object {
		p := testenv.Sample[v1.RetryPolicy](tb, "policy_v1alpha1_retrypolicy.yaml")
		mutate(&p.Spec)
		p.Name = "parity"
		return []client.Object{p}
	}
}

func sampleBudget(mutate func(*v1.RetryBudgetSpec)) func(testing.TB) []client.Object {
	return func(tb testing.TB) []client.Object {
		b := testenv.Sample[v1.RetryBudget](tb, "policy_v1alpha1_retrybudget.yaml")
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

// celCases are api/v1alpha1/fixtures' single-object admission cases, the
// very table the API server's CEL is tested with.
var celCases = func() []parityCase {
	var out []parityCase
	for _, tc := range fixtures.PolicyCases {
		out = append(out, parityCase{tc.Name, samplePolicy(tc.Mutate)})
	}
	for _, tc := range fixtures.BudgetCases {
		out = append(out, parityCase{tc.Name, sampleBudget(tc.Mutate)})
	}
	return out
}()

func raised[T client.Object](obj T, change func(T)) T {
	c := obj.DeepCopyObject().(T)
	change(c)
	return c
}

// webhookCases restates webhooks/webhook_rules_test.go: the objects each
// spec creates or updates, in its order.
var webhookCases = []parityCase{
	{"refuses the spec's [3,3,3] chain: 27 calls at the bottom", seq(
		policy("workflow", "workflow", 3), policy("connector", "connector", 3, parent("job")),
		policy("job", "job", 3, parent("workflow")))},
	{"accepts the spec's [1,3,1] chain: 3 calls at the bottom", seq(
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

	{"refuses a [3,3,3] chain across three namespaces, naming the layers it referenced and counting the others", seq(
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
	{"admits a parent that withdraws consent, warning how many children it no longer counts", seq(
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
	parentIn = fixtures.ParentIn
	allowing = fixtures.Allowing
)
