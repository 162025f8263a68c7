package policygraph_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/contract/codes"
)

var (
	parent     = fixtures.Parent
	pool       = fixtures.Pool
	budget     = fixtures.BudgetRef
	critical   = fixtures.Critical
	service    = fixtures.Service
	perAttempt = fixtures.PerAttempt
)

// pol is a fixture policy in namespace ns with budget "b".
func pol(name, layer string, attempts int32, opts ...fixtures.Option) v1.RetryPolicy {
	return *fixtures.Policy("ns", name, layer, attempts, append([]fixtures.Option{fixtures.BudgetRef("b")}, opts...)...)
}

// polIn is a fixture policy in namespace ns with budget "b".
func polIn(ns, name, layer string, attempts int32, opts ...fixtures.Option) v1.RetryPolicy {
	return *fixtures.Policy(ns, name, layer, attempts, append([]fixtures.Option{fixtures.BudgetRef("b")}, opts...)...)
}

func codesOf(errs field.ErrorList) []string {
	var out []string
	for _, e := range errs {
		code, _, _ := strings.Cut(e.Detail, ":")
		out = append(out, e.Field+" "+code)
	}
	slices.Sort(out)
	return out
}

func TestValidateRetryPolicy(t *testing.T) {
	limit9 := policygraph.Limits{MaxLeafAttempts: 9, MaxRetryPercent: 10}
	for name, tc := range map[string]struct {
		stored   []v1.RetryPolicy
		budgets  []v1.RetryBudget
		labels   map[string]map[string]string // namespace labels
		incoming v1.RetryPolicy
		limits   *policygraph.Limits
		want     []string // "field code"
		warn     string   // a substring of one warning
		leaf     int64
		message  string // a substring of the first error
		// hides are words that no error or warning may hold: what the
		// request did not reference in another namespace (MayName).
		hides []string
	}{
		"a lone connector with 3 attempts": {
			incoming: pol("connector", "connector", 3), leaf: 3,
		},
		"seed [3,3,3]: 27 leaf attempts is refused": {
			stored:   []v1.RetryPolicy{pol("workflow", "workflow", 3), pol("job", "job", 3, parent("workflow"))},
			incoming: pol("connector", "connector", 3, parent("job")),
			want:     []string{"spec.maxAttempts ERR_LAYER_AMPLIFICATION"},
			message:  "workflow(3) × job(3) × connector(3) = 27 > 3",
			leaf:     27,
		},
		"seed [1,3,1]: 3 leaf attempts is accepted": {
			stored:   []v1.RetryPolicy{pol("workflow", "workflow", 1), pol("job", "job", 3, parent("workflow"))},
			incoming: pol("connector", "connector", 1, parent("job")),
			leaf:     3,
		},
		"seed, limit 9: connector 3 × job 3 = 9 is accepted": {
			stored:   []v1.RetryPolicy{pol("job", "job", 3)},
			incoming: pol("connector", "connector", 3, parent("job")),
			limits:   &limit9, leaf: 9,
		},
		"seed, limit 9: two workflow operations × 3 × 3 = 18 is refused": {
			stored:   []v1.RetryPolicy{pol("workflow", "workflow", 2), pol("job", "job", 3, parent("workflow"))},
			incoming: pol("connector", "connector", 3, parent("job")),
			limits:   &limit9,
			want:     []string{"spec.maxAttempts ERR_LAYER_AMPLIFICATION"},
			message:  "workflow(2) × job(3) × connector(3) = 18 > 9",
		},
		"limit 9: a connector whose SDK makes 3 attempts under a job of 3 makes 27 and is refused": {
			stored:   []v1.RetryPolicy{pol("job", "job", 3)},
			incoming: pol("connector", "connector", 3, parent("job"), fixtures.Hidden(3)),
			limits:   &limit9,
			want:     []string{"spec.maxAttempts ERR_LAYER_AMPLIFICATION"},
			message:  "job(3) × connector(3×3 hidden) = 27 > 9",
		},
		"limit 9: the same connector hiding nothing makes 9 and is accepted": {
			stored:   []v1.RetryPolicy{pol("job", "job", 3)},
			incoming: pol("connector", "connector", 3, parent("job"), fixtures.Hidden(1)),
			limits:   &limit9, leaf: 9,
		},
		"limit 9: a connector of 2 attempts that hedges, under a job of 3 in another namespace, makes 6 and is accepted": {
			stored:   []v1.RetryPolicy{polIn("jobs", "job", "job", 3, fixtures.Allowing(v1.NamespacesFromAll, nil))},
			incoming: pol("connector", "connector", 2, fixtures.ParentIn("jobs", "job"), fixtures.Hedge(50*time.Millisecond, 1)),
			limits:   &limit9, leaf: 6,
		},
		"limit 3: a hedge takes job 3 × connector 1 over the limit, across namespaces": {
			stored:   []v1.RetryPolicy{polIn("jobs", "job", "job", 3, fixtures.Allowing(v1.NamespacesFromAll, nil))},
			incoming: pol("connector", "connector", 1, fixtures.ParentIn("jobs", "job"), fixtures.Hedge(50*time.Millisecond, 1)),
			want:     []string{"spec.maxAttempts ERR_LAYER_AMPLIFICATION"},
			message:  "connector(2) = 6 > 3",
		},
		"limit 3: a stored child's hedges count against its parent's update": {
			stored:   []v1.RetryPolicy{pol("connector", "connector", 1, parent("job"), fixtures.Hedge(50*time.Millisecond, 1))},
			incoming: pol("job", "job", 3),
			want:     []string{"spec.maxAttempts ERR_LAYER_AMPLIFICATION"},
			message:  "job(3) × connector(2) = 6 > 3",
		},
		"a hidden layer in a stored child is charged to the child, not to its parent's update": {
			stored:   []v1.RetryPolicy{pol("connector", "connector", 1, parent("job"), fixtures.Hidden(3))},
			incoming: pol("job", "job", 3),
			leaf:     3,
		},
		"the child is refused for its own hidden layer under a parent of 3": {
			stored:   []v1.RetryPolicy{pol("job", "job", 3)},
			incoming: pol("connector", "connector", 1, parent("job"), fixtures.Hidden(3)),
			want:     []string{"spec.maxAttempts ERR_LAYER_AMPLIFICATION"},
			message:  "job(3) × connector(1×3 hidden) = 9 > 3",
		},
		"a parent created after its children counts their attempts": {
			stored:   []v1.RetryPolicy{pol("job", "job", 1, parent("workflow")), pol("connector", "connector", 3, parent("job"))},
			incoming: pol("workflow", "workflow", 3),
			want:     []string{"spec.maxAttempts ERR_LAYER_AMPLIFICATION"},
			message:  "workflow(3) × job(1) × connector(3) = 9 > 3",
		},
		"update raising a parent above the limit for an existing child is refused": {
			stored: []v1.RetryPolicy{
				pol("job", "job", 1), pol("connector", "connector", 3, parent("job")),
				pol("cache", "cache", 1, parent("job")),
			},
			incoming: pol("job", "job", 2),
			want:     []string{"spec.maxAttempts ERR_LAYER_AMPLIFICATION"},
			message:  "job(2) × connector(3) = 6 > 3",
		},
		"the worst of several children decides": {
			stored: []v1.RetryPolicy{
				pol("a", "fast", 1, parent("job")), pol("b", "slow", 2, parent("job")),
				pol("c", "leaf", 2, parent("b")),
			},
			incoming: pol("job", "job", 1),
			want:     []string{"spec.maxAttempts ERR_LAYER_AMPLIFICATION"},
			message:  "job(1) × slow(2) × leaf(2) = 4 > 3",
		},
		"a missing parent is accepted with a warning": {
			incoming: pol("connector", "connector", 3, parent("job")),
			warn:     `RetryPolicy "job" does not exist yet`, leaf: 3,
		},
		"a policy that is its own parent is a cycle": {
			incoming: pol("loop", "job", 1, parent("loop")),
			want:     []string{"spec.layer.parentRef.name ERR_LAYER_CYCLE"},
			message:  "loop → loop",
		},
		"an update closing a loop through stored policies is a cycle": {
			stored:   []v1.RetryPolicy{pol("b", "b", 1, parent("a")), pol("c", "c", 1, parent("b"))},
			incoming: pol("a", "a", 1, parent("c")),
			want:     []string{"spec.layer.parentRef.name ERR_LAYER_CYCLE"},
			message:  "a → b → c → a",
		},
		"cross-namespace [3,3,3] names the namespace of each layer it may name, and counts the others": {
			stored: []v1.RetryPolicy{
				polIn("gateway", "workflow", "workflow", 3, allow(v1.NamespacesFromAll, nil)),
				polIn("checkout", "job", "job", 3, parentIn("gateway", "workflow"), allow(v1.NamespacesFromAll, nil)),
			},
			incoming: polIn("payments", "connector", "connector", 3, parentIn("checkout", "job")),
			want:     []string{"spec.maxAttempts ERR_LAYER_AMPLIFICATION"},
			message: "1 layer in another namespace (×3) × checkout/job(3) × payments/connector(3) = 27 > 3: " +
				"attempts multiply across layers (1 policy in another namespace → checkout/job → payments/connector)",
			hides: []string{"gateway", "workflow"},
			leaf:  27,
		},
		"a run of layers the request did not reference reads as one count and its calls": {
			stored: []v1.RetryPolicy{
				polIn("gateway", "edge", "edge", 3, allow(v1.NamespacesFromAll, nil)),
				polIn("telephony", "sms-2fa-dispatch", "telephony-api", 3, parentIn("gateway", "edge"), critical,
					allow(v1.NamespacesFromAll, nil)),
				polIn("checkout", "job", "job", 1, parentIn("telephony", "sms-2fa-dispatch"), allow(v1.NamespacesFromAll, nil)),
				polIn("checkout", "local", "local", 1, parent("connector"), allow(v1.NamespacesFromAll, nil)),
				polIn("ledger", "writer", "writer", 1, parentIn("checkout", "local")),
			},
			incoming: polIn("checkout", "connector", "connector", 3, parent("job"), allow(v1.NamespacesFromAll, nil)),
			want:     []string{"spec.maxAttempts ERR_LAYER_AMPLIFICATION"},
			message: "2 layers in other namespaces (×9) × checkout/job(1) × checkout/connector(3) × checkout/local(1) × " +
				"1 layer in another namespace (×1) = 27 > 3: attempts multiply across layers " +
				"(2 policies in other namespaces → checkout/job → checkout/connector → checkout/local → 1 policy in another namespace)",
			hides: []string{"gateway", "edge", "telephony", "sms-2fa-dispatch", "Critical", "ledger", "writer"},
			leaf:  27,
		},
		"a parent in another namespace counts its foreign child on update": {
			stored:   []v1.RetryPolicy{polIn("payments", "connector", "connector", 3, parentIn("gateway", "job"))},
			incoming: polIn("gateway", "job", "job", 2, allow(v1.NamespacesFromAll, nil)),
			want:     []string{"spec.maxAttempts ERR_LAYER_AMPLIFICATION"},
			message:  "gateway/job(2) × 1 layer in another namespace (×3) = 6 > 3",
			hides:    []string{"payments", "connector"},
		},
		"parentRef.namespace set to the policy's own namespace needs no consent": {
			stored:   []v1.RetryPolicy{pol("job", "job", 1)},
			incoming: pol("connector", "connector", 3, parentIn("ns", "job")), leaf: 3,
		},
		"a parent with from Same (the default) refuses a child from another namespace": {
			stored:   []v1.RetryPolicy{polIn("gateway", "job", "job", 1)},
			incoming: polIn("payments", "connector", "connector", 3, parentIn("gateway", "job")),
			want:     []string{"spec.layer.parentRef.namespace ERR_PARENT_NOT_PERMITTED"},
			message:  `RetryPolicy "gateway/job" does not allow child layers from namespace "payments": its layer.allowedChildren.namespaces.from is Same`,
			leaf:     1, // published NoRetry: one call per call of the parent's chain
		},
		"a parent with from All admits a child from any namespace": {
			stored:   []v1.RetryPolicy{polIn("gateway", "job", "job", 1, allow(v1.NamespacesFromAll, nil))},
			incoming: polIn("payments", "connector", "connector", 3, parentIn("gateway", "job")), leaf: 3,
		},
		"a Selector parent admits a child whose namespace labels match": {
			stored:   []v1.RetryPolicy{polIn("gateway", "job", "job", 1, allow(v1.NamespacesFromSelector, map[string]string{"team": "pay"}))},
			labels:   map[string]map[string]string{"payments": {"team": "pay"}},
			incoming: polIn("payments", "connector", "connector", 3, parentIn("gateway", "job")), leaf: 3,
		},
		"a Selector parent refuses a child whose namespace labels do not match": {
			stored:   []v1.RetryPolicy{polIn("gateway", "job", "job", 1, allow(v1.NamespacesFromSelector, map[string]string{"team": "pay"}))},
			labels:   map[string]map[string]string{"payments": {"team": "ads"}},
			incoming: polIn("payments", "connector", "connector", 3, parentIn("gateway", "job")),
			want:     []string{"spec.layer.parentRef.namespace ERR_PARENT_NOT_PERMITTED"},
			message:  "the selector does not match namespace \"payments\"; ask the parent's owner to widen the selector, or label namespace",
		},
		"a Selector parent refuses a child whose namespace the lookup does not know": {
			stored:   []v1.RetryPolicy{polIn("gateway", "job", "job", 1, allow(v1.NamespacesFromSelector, map[string]string{"team": "pay"}))},
			incoming: polIn("payments", "connector", "connector", 3, parentIn("gateway", "job")),
			want:     []string{"spec.layer.parentRef.namespace ERR_PARENT_NOT_PERMITTED"},
		},
		"a Selector matches the namespace's name label every namespace carries": {
			stored: []v1.RetryPolicy{polIn("gateway", "job", "job", 1,
				allow(v1.NamespacesFromSelector, map[string]string{"kubernetes.io/metadata.name": "payments"}))},
			incoming: polIn("payments", "connector", "connector", 3, parentIn("gateway", "job")), leaf: 3,
		},
		"a refused child is not counted: its parent's update is admitted with a warning counting it": {
			stored:   []v1.RetryPolicy{polIn("payments", "connector", "connector", 3, parentIn("gateway", "job"))},
			incoming: polIn("gateway", "job", "job", 3),
			warn:     "namespaces.from Same does not allow 1 child layer in another namespace; they are not counted",
			hides:    []string{"payments", "connector"},
			leaf:     3,
		},
		"withdrawing consent drops only the foreign children": {
			stored: []v1.RetryPolicy{
				polIn("payments", "connector", "connector", 3, parentIn("gateway", "job")),
				polIn("gateway", "local", "local", 1, parent("job")),
			},
			incoming: polIn("gateway", "job", "job", 3, allow(v1.NamespacesFromSelector, map[string]string{"team": "pay"})),
			labels:   map[string]map[string]string{"payments": {"team": "ads"}},
			warn:     "namespaces.from Selector does not allow 1 child layer in another namespace",
			hides:    []string{"payments", "connector"},
		},
		"a refused child makes one attempt, yet the layers below it count every caller above it": {
			stored: []v1.RetryPolicy{
				polIn("gateway", "workflow", "workflow", 3),
				polIn("checkout", "job", "job", 1, parentIn("gateway", "workflow")),
			},
			incoming: polIn("checkout", "connector", "connector", 3, parent("job")),
			want:     []string{"spec.maxAttempts ERR_LAYER_AMPLIFICATION"},
			message:  "1 layer in another namespace (×3) × checkout/job(1) × checkout/connector(3) = 9 > 3",
			hides:    []string{"gateway", "workflow"},
			leaf:     9,
		},
		"below a refused child, a chain within the limit is admitted": {
			stored: []v1.RetryPolicy{
				polIn("gateway", "workflow", "workflow", 1),
				polIn("checkout", "job", "job", 3, parentIn("gateway", "workflow")),
			},
			incoming: polIn("checkout", "connector", "connector", 3, parent("job")), leaf: 3,
		},
		"a cycle across namespaces names the namespaces": {
			stored:   []v1.RetryPolicy{polIn("b", "y", "y", 1, parentIn("a", "x"), allow(v1.NamespacesFromAll, nil))},
			incoming: polIn("a", "x", "x", 1, parentIn("b", "y"), allow(v1.NamespacesFromAll, nil)),
			want:     []string{"spec.layer.parentRef.name ERR_LAYER_CYCLE"},
			message:  "x → b/y → x",
		},
		"a cycle through another tenant's policies counts them": {
			stored: []v1.RetryPolicy{
				polIn("b", "y", "y", 1, parentIn("c", "z"), allow(v1.NamespacesFromAll, nil)),
				polIn("c", "z", "z", 1, parentIn("d", "w"), allow(v1.NamespacesFromAll, nil)),
				polIn("d", "w", "w", 1, parentIn("a", "x"), allow(v1.NamespacesFromAll, nil)),
			},
			incoming: polIn("a", "x", "x", 1, parentIn("b", "y"), allow(v1.NamespacesFromAll, nil)),
			want:     []string{"spec.layer.parentRef.name ERR_LAYER_CYCLE"},
			message:  "x → 2 policies in other namespaces → b/y → x",
			hides:    []string{"c/z", "d/w"},
		},
		"pools and budgets stay within a namespace": {
			stored:   []v1.RetryPolicy{polIn("other", "sms-2fa", "connector", 3, pool("p"), budget("b"), critical)},
			incoming: polIn("ns", "marketing", "connector", 3, pool("p"), budget("b")), leaf: 3,
		},
		"a pool shared by the same criticality and service is accepted": {
			stored:   []v1.RetryPolicy{pol("sms-a", "connector", 1, pool("pool-sms-auth"), critical)},
			incoming: pol("sms-b", "connector", 1, pool("pool-sms-auth"), critical), leaf: 1,
		},
		"a Standard caller on a Critical pool is refused": {
			stored:   []v1.RetryPolicy{pol("sms-2fa", "connector", 1, pool("pool-sms-auth"), critical)},
			incoming: pol("marketing", "connector", 1, pool("pool-sms-auth"), budget("marketing")),
			want:     []string{"spec.connectionPool.name ERR_SHARED_FAILURE_DOMAIN_LEAK"},
			message:  "already used by 1 policy of another criticality or target.service",
		},
		"a pool shared across services is refused": {
			stored:   []v1.RetryPolicy{pol("sms", "connector", 1, pool("shared"))},
			incoming: pol("email", "connector", 1, pool("shared"), service("email-api")),
			want:     []string{"spec.connectionPool.name ERR_SHARED_FAILURE_DOMAIN_LEAK"},
		},
		"a budget shared across criticalities is refused": {
			stored:   []v1.RetryPolicy{pol("sms-2fa", "connector", 3, budget("telephony"), critical)},
			incoming: pol("marketing", "connector", 3, budget("telephony")),
			want:     []string{"spec.budgetRef.name ERR_SHARED_FAILURE_DOMAIN_LEAK"},
			message:  "must not share a retry quota",
		},
		"a budget of another namespace that admits no other namespace refuses the policy": {
			budgets:  []v1.RetryBudget{*fixtures.SharedBudget("platform", "fleet", nil)},
			incoming: pol("sms", "connector", 3, fixtures.BudgetIn("platform", "fleet")),
			want:     []string{"spec.budgetRef.namespace ERR_BUDGET_NOT_SHARED"},
			message:  `RetryBudget platform/fleet does not admit namespace "ns": its consumers.namespaces.from is Same`,
		},
		"a budget of another namespace that admits All is drawn on": {
			budgets:  []v1.RetryBudget{*fixtures.SharedBudget("platform", "fleet", &v1.AllowedNamespaces{From: ptr.To(v1.NamespacesFromAll)})},
			incoming: pol("sms", "connector", 3, fixtures.BudgetIn("platform", "fleet")), leaf: 3,
		},
		"a budget that admits namespaces by a selector admits a namespace whose labels match": {
			budgets: []v1.RetryBudget{*fixtures.SharedBudget("platform", "fleet", &v1.AllowedNamespaces{From: ptr.To(v1.NamespacesFromSelector),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "sms"}}})},
			labels:   map[string]map[string]string{"ns": {"fleet": "sms"}},
			incoming: pol("sms", "connector", 3, fixtures.BudgetIn("platform", "fleet")), leaf: 3,
		},
		"a budget that admits namespaces by a selector refuses a namespace whose labels do not match": {
			budgets: []v1.RetryBudget{*fixtures.SharedBudget("platform", "fleet", &v1.AllowedNamespaces{From: ptr.To(v1.NamespacesFromSelector),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"fleet": "sms"}}})},
			labels:   map[string]map[string]string{"ns": {"fleet": "email"}},
			incoming: pol("sms", "connector", 3, fixtures.BudgetIn("platform", "fleet")),
			want:     []string{"spec.budgetRef.namespace ERR_BUDGET_NOT_SHARED"},
			message:  `the selector does not match namespace "ns"`,
		},
		"a budget of another namespace that does not exist yet refuses nothing (the controller waits for it)": {
			incoming: pol("sms", "connector", 3, fixtures.BudgetIn("platform", "fleet")), leaf: 3,
		},
		"a budget shared across namespaces is shared across criticalities nowhere": {
			budgets:  []v1.RetryBudget{*fixtures.SharedBudget("platform", "fleet", &v1.AllowedNamespaces{From: ptr.To(v1.NamespacesFromAll)})},
			stored:   []v1.RetryPolicy{polIn("auth", "sms-2fa", "connector", 3, fixtures.BudgetIn("platform", "fleet"), critical)},
			incoming: pol("marketing", "connector", 3, fixtures.BudgetIn("platform", "fleet")),
			want:     []string{"spec.budgetRef.name ERR_SHARED_FAILURE_DOMAIN_LEAK"},
			message:  "must not share a retry quota",
		},
		"a policy of another namespace with the same name is not the policy's stored self": {
			budgets:  []v1.RetryBudget{*fixtures.SharedBudget("platform", "fleet", &v1.AllowedNamespaces{From: ptr.To(v1.NamespacesFromAll)})},
			stored:   []v1.RetryPolicy{polIn("auth", "sms", "connector", 3, fixtures.BudgetIn("platform", "fleet"), critical)},
			incoming: pol("sms", "connector", 3, fixtures.BudgetIn("platform", "fleet")),
			want:     []string{"spec.budgetRef.name ERR_SHARED_FAILURE_DOMAIN_LEAK"},
		},
		"updating a policy does not clash with its stored self": {
			stored:   []v1.RetryPolicy{pol("sms", "connector", 3, pool("p"), budget("b"))},
			incoming: pol("sms", "connector", 2, pool("p"), budget("b")), leaf: 2,
		},
		"a schedule that cannot fit warns how many attempts can run": {
			incoming: pol("slow", "connector", 3, perAttempt(4*time.Second)),
			warn:     "only 2 of 3 attempts can run", leaf: 3,
		},
	} {
		t.Run(name, func(t *testing.T) {
			limits := policygraph.DefaultLimits()
			if tc.limits != nil {
				limits = *tc.limits
			}
			lk := policygraph.NewStaticLookup(tc.stored...).WithBudget(tc.budgets...)
			for ns, l := range tc.labels {
				lk.WithNamespace(ns, l)
			}
			v, err := policygraph.ValidateRetryPolicy(context.Background(), lk, &tc.incoming, limits, field.NewPath("spec"),
				policygraph.AnsweringRequester())
			if err != nil {
				t.Fatal(err)
			}
			// A Lookup that visits children in place reaches the same verdict.
			inPlace, err := policygraph.ValidateRetryPolicy(context.Background(), visiting{lk}, &tc.incoming, limits, field.NewPath("spec"),
				policygraph.AnsweringRequester())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(inPlace.Errors, v.Errors) || !slices.Equal(inPlace.Warnings, v.Warnings) {
				t.Errorf("visiting in place: %v %q, listing: %v %q", inPlace.Errors, inPlace.Warnings, v.Errors, v.Warnings)
			}
			if got := codesOf(v.Errors); !slices.Equal(got, tc.want) {
				t.Fatalf("errors %q, want %q (%v)", got, tc.want, v.Errors)
			}
			if tc.message != "" && !strings.Contains(v.Errors.ToAggregate().Error(), tc.message) {
				t.Errorf("message %q lacks %q", v.Errors.ToAggregate(), tc.message)
			}
			for _, word := range tc.hides {
				said := slices.Clone(v.Warnings)
				for _, e := range v.Errors {
					said = append(said, e.Error())
				}
				if i := slices.IndexFunc(said, func(m string) bool { return strings.Contains(m, word) }); i >= 0 {
					t.Errorf("%q names %q, which the request did not reference", said[i], word)
				}
			}
			if tc.warn == "" && len(v.Warnings) > 0 {
				t.Errorf("unexpected warnings %q", v.Warnings)
			}
			if tc.warn != "" && !slices.ContainsFunc(v.Warnings, func(w string) bool { return strings.Contains(w, tc.warn) }) {
				t.Errorf("warnings %q lack %q", v.Warnings, tc.warn)
			}
			if tc.leaf != 0 && v.Analysis.LeafAttempts() != tc.leaf {
				t.Errorf("leaf attempts %d, want %d", v.Analysis.LeafAttempts(), tc.leaf)
			}
		})
	}
}

// A chain longer than MaxDepth is refused rather than followed forever.
func TestTooDeepAChainIsRefused(t *testing.T) {
	var stored []v1.RetryPolicy
	for i := range policygraph.MaxDepth + 5 {
		var opts []fixtures.Option
		if i > 0 {
			opts = append(opts, parent(fmt.Sprintf("p%d", i-1)))
		}
		stored = append(stored, pol(fmt.Sprintf("p%d", i), "layer", 1, opts...))
	}
	leaf := pol("leaf", "leaf", 1, parent(fmt.Sprintf("p%d", policygraph.MaxDepth+4)))
	v, err := policygraph.ValidateRetryPolicy(context.Background(), policygraph.NewStaticLookup(stored...), &leaf,
		policygraph.DefaultLimits(), field.NewPath("spec"))
	if err != nil {
		t.Fatal(err)
	}
	if got := codesOf(v.Errors); !slices.Equal(got, []string{"spec.layer.parentRef.name ERR_LAYER_CYCLE"}) ||
		!strings.Contains(v.Errors[0].Detail, "deeper than 32") {
		t.Fatalf("%v", v.Errors)
	}
}

func TestValidateRetryBudget(t *testing.T) {
	mk := func(percent int32, floor int32) *v1.RetryBudget {
		return &v1.RetryBudget{Spec: v1.RetryBudgetSpec{RetryPercent: percent, MinRetriesPerSecond: ptr.To(floor)}}
	}
	limits := policygraph.DefaultLimits()
	if v := policygraph.ValidateRetryBudget(mk(10, 0), limits, field.NewPath("spec")); len(v.Errors)+len(v.Warnings) > 0 {
		t.Errorf("10%% at the cap: %v %v", v.Errors, v.Warnings)
	}
	v := policygraph.ValidateRetryBudget(mk(11, 0), limits, field.NewPath("spec"))
	if got := codesOf(v.Errors); !slices.Equal(got, []string{"spec.retryPercent " + string(codes.BudgetAbovePlatformCap)}) {
		t.Errorf("11%%: %q", got)
	}
	v = policygraph.ValidateRetryBudget(mk(10, 5), limits, field.NewPath("spec"))
	if len(v.Errors) > 0 || len(v.Warnings) != 1 || !strings.Contains(v.Warnings[0], "below 50 primary requests/s") {
		t.Errorf("floor: %v %q", v.Errors, v.Warnings)
	}
	fleet := func(allowance, partitions int32, consumers bool) policygraph.Verdict {
		b := mk(10, 0)
		b.Spec.MaxRetriesPerSecond, b.Spec.Partitions = ptr.To(allowance), ptr.To(partitions)
		if consumers {
			b.Spec.Consumers = &v1.BudgetConsumers{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}}
		}
		return policygraph.ValidateRetryBudget(b, limits, field.NewPath("spec"))
	}
	for _, tc := range []struct {
		allowance, partitions int32
		consumers             bool
		want                  []string
	}{
		{20, 20, true, nil}, // RG-LOAD's toy: one retry/s each
		{0, 20, true, nil},  // no retry at all, on purpose
		{20, 50, false, []string{"maxRetriesPerSecond: 20 retries/s shared by up to 50 partitions is below one retry/s per pod", "does not retry at all"}},
		{20, 1, true, nil},  // with consumers only a fresh count that names a pod gives it a share: partitions cannot overshoot
		{20, 1, false, nil}, // one pod, by declaration: its share is the allowance
	} {
		v := fleet(tc.allowance, tc.partitions, tc.consumers)
		all := strings.Join(v.Warnings, "\n")
		if len(v.Errors) > 0 || (tc.want == nil) != (len(v.Warnings) == 0) {
			t.Errorf("%+v: %v %q", tc, v.Errors, v.Warnings)
		}
		for _, w := range tc.want {
			if !strings.Contains(all, w) {
				t.Errorf("%+v: warnings %q lack %q", tc, v.Warnings, w)
			}
		}
	}
	raised := policygraph.Limits{MaxLeafAttempts: 3, MaxRetryPercent: 20}
	if v := policygraph.ValidateRetryBudget(mk(20, 0), raised, field.NewPath("spec")); len(v.Errors) > 0 {
		t.Errorf("20%% under a raised cap: %v", v.Errors)
	}
}

func TestWorstCase(t *testing.T) {
	// The sample: 3 attempts of up to 1s, waits of at most 200ms and 400ms,
	// deadline 4s: everything fits, 3.6s in the worst case.
	p := pol("sms", "connector", 3, perAttempt(time.Second))
	p.Spec.Deadline = v1.DurationOf(4 * time.Second)
	s := policygraph.WorstCase(&p.Spec)
	if s.FeasibleAttempts != 3 || s.Duration != 3600*time.Millisecond {
		t.Errorf("sample: %d attempts in %v, want 3 in 3.6s", s.FeasibleAttempts, s.Duration)
	}
	if !slices.Equal(s.Backoffs, []time.Duration{200 * time.Millisecond, 400 * time.Millisecond}) {
		t.Errorf("backoffs %v", s.Backoffs)
	}
	// With no perAttemptTimeout one attempt may use the whole deadline.
	p.Spec.PerAttemptTimeout = nil
	if s := policygraph.WorstCase(&p.Spec); s.Duration != 4*time.Second || s.FeasibleAttempts != 3 {
		t.Errorf("unbounded attempts: %+v", s)
	}
	// The spec's rule at its edge: the third attempt needs remaining ≥ wait + cost.
	p.Spec.PerAttemptTimeout = ptr.To(v1.DurationOf(1500 * time.Millisecond))
	if s := policygraph.WorstCase(&p.Spec); s.FeasibleAttempts != 2 {
		t.Errorf("1.5s attempts: %d feasible, want 2 (1.5+0.2+1.5=3.2s, then 0.8s left < 0.4+1.5)", s.FeasibleAttempts)
	}
	// Admission predicts with the runtime's own rule (backoff.CanStart): the
	// reserve must still be there when the next attempt starts, after the
	// wait. 1.3s deadline, 100ms attempts, an 800ms reserve and a 600ms worst
	// wait: 1.2s is left after the first attempt, but only 600ms when the
	// second would start, below the reserve, so the pod never retries and
	// admission must not count that attempt either.
	q := pol("edge", "connector", 2, perAttempt(100*time.Millisecond))
	q.Spec.Deadline = v1.DurationOf(1300 * time.Millisecond)
	q.Spec.MinRemaining = ptr.To(v1.DurationOf(800 * time.Millisecond))
	q.Spec.Backoff.Base = ptr.To(v1.DurationOf(300 * time.Millisecond))
	if s := policygraph.WorstCase(&q.Spec); s.FeasibleAttempts != 1 || !slices.Equal(s.Backoffs, []time.Duration{600 * time.Millisecond}) {
		t.Errorf("reserve after the wait: %d feasible with waits %v, want 1 with [600ms]", s.FeasibleAttempts, s.Backoffs)
	}
	// RG-LOAD's boundary, as the runtime reads it: exactly the reserve left
	// when the attempt starts is allowed.
	q.Spec.Deadline = v1.DurationOf(1500 * time.Millisecond)
	q.Spec.MinRemaining = ptr.To(v1.DurationOf(800 * time.Millisecond))
	if s := policygraph.WorstCase(&q.Spec); s.FeasibleAttempts != 2 {
		t.Errorf("exactly the reserve left: %d feasible, want 2", s.FeasibleAttempts)
	}
}

var (
	parentIn = fixtures.ParentIn
	allow    = fixtures.Allowing
)

// A refusal names only what the request referenced: the pool or the budget,
// never the other policies that use it, which the requester may not be
// allowed to read (an unauthenticated review once learned
// "sms-2fa-dispatch (Critical, telephony-api)").
func TestRefusalsNameOnlyWhatTheRequestReferenced(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		stored, incoming v1.RetryPolicy
	}{
		"pool": {
			stored:   pol("sms-2fa-dispatch", "connector", 3, fixtures.Pool("pool-sms-auth"), fixtures.Critical, service("sms-gateway")),
			incoming: pol("probe", "connector", 1, fixtures.Pool("pool-sms-auth"), fixtures.BudgetRef("probe")),
		},
		"budget": {
			stored:   pol("sms-2fa-dispatch", "connector", 3, service("sms-gateway")),
			incoming: pol("probe", "connector", 1, fixtures.Critical),
		},
	} {
		t.Run(name, func(t *testing.T) {
			v, err := policygraph.ValidateRetryPolicy(ctx, policygraph.NewStaticLookup(tc.stored), &tc.incoming, policygraph.DefaultLimits(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(v.Errors) != 1 || v1.CodeOf(v.Errors[0]) != codes.SharedFailureDomainLeak {
				t.Fatalf("errors %v, want one %s", v.Errors, codes.SharedFailureDomainLeak)
			}
			if d := v.Errors[0].Detail; strings.Contains(d, "sms-2fa-dispatch") || strings.Contains(d, "sms-gateway") || !strings.Contains(d, "1 policy") {
				t.Errorf("the refusal names another policy, or not how many: %s", d)
			}
		})
	}
}

// Depth is charged where a chain is completed, as the product is: a
// tenant that builds a chain of MaxDepth layers below a root of its own,
// then attaches that root under another team's parent, is refused at the
// attach; before, the attach was admitted (each walk counted only its own
// direction) and the parent in the other namespace turned too deep, not
// Ready and NoRetry, and could not be updated.
func TestADescendantChainCannotMakeAnAncestorTooDeep(t *testing.T) {
	workflow := polIn("team-b", "workflow", "workflow", 1, allow(v1.NamespacesFromAll, nil))
	stored := []v1.RetryPolicy{workflow}
	for i := range policygraph.MaxDepth + 1 {
		var opts []fixtures.Option
		if i > 0 {
			opts = append(opts, parent(fmt.Sprintf("c%d", i-1)))
		}
		stored = append(stored, polIn("team-a", fmt.Sprintf("c%d", i), "layer", 1, opts...))
	}
	ctx := context.Background()
	attach := polIn("team-a", "c0", "layer", 1, parentIn("team-b", "workflow"))
	v, err := policygraph.ValidateRetryPolicy(ctx, policygraph.NewStaticLookup(stored...), &attach, policygraph.DefaultLimits(), field.NewPath("spec"))
	if err != nil {
		t.Fatal(err)
	}
	if got := codesOf(v.Errors); !slices.Equal(got, []string{"spec.layer.parentRef.name ERR_LAYER_CYCLE"}) {
		t.Fatalf("attaching a chain of %d layers under team-b/workflow: %v, want it refused as too deep", policygraph.MaxDepth+1, v.Errors)
	}
	// One layer less is admitted, and the parent stays within the depth.
	short := append([]v1.RetryPolicy{workflow, attach}, stored[2:len(stored)-1]...)
	if v, err := policygraph.ValidateRetryPolicy(ctx, policygraph.NewStaticLookup(short...), &attach, policygraph.DefaultLimits(), nil); err != nil ||
		len(v.Errors) > 0 {
		t.Fatalf("a chain of %d layers: %v %v", policygraph.MaxDepth, err, v.Errors)
	}
	if v, err := policygraph.ValidateRetryPolicy(ctx, policygraph.NewStaticLookup(short...), &workflow, policygraph.DefaultLimits(), nil); err != nil ||
		len(v.Errors) > 0 || v.Analysis.TooDeep {
		t.Fatalf("the parent above a chain of %d layers: %v %v", policygraph.MaxDepth, err, v.Errors)
	}
}

// The policy's own status and offline tools (lint, explain) name every
// layer: only an answer to a review's requester is redacted.
func TestMessagesNameEveryLayerUnlessAnsweringRequester(t *testing.T) {
	lk := policygraph.NewStaticLookup(
		polIn("gateway", "workflow", "workflow", 3, allow(v1.NamespacesFromAll, nil)),
		polIn("checkout", "job", "job", 3, parentIn("gateway", "workflow"), allow(v1.NamespacesFromAll, nil)))
	p := polIn("payments", "connector", "connector", 3, parentIn("checkout", "job"))
	for _, tc := range []struct {
		opts []policygraph.Option
		want string
	}{
		{nil, "gateway/workflow(3) × checkout/job(3) × payments/connector(3) = 27 > 3"},
		{[]policygraph.Option{policygraph.AnsweringRequester()}, "1 layer in another namespace (×3) × checkout/job(3) × payments/connector(3) = 27 > 3"},
	} {
		v, err := policygraph.ValidateRetryPolicy(context.Background(), lk, &p, policygraph.DefaultLimits(), field.NewPath("spec"), tc.opts...)
		if err != nil {
			t.Fatal(err)
		}
		if got := v.Errors.ToAggregate(); got == nil || !strings.Contains(got.Error(), tc.want) {
			t.Errorf("with %d options: %v, want %q", len(tc.opts), got, tc.want)
		}
	}
}

// visiting is a StaticLookup that visits children in place, as the
// manager's indexed cache does.
type visiting struct{ policygraph.StaticLookup }

func (v visiting) VisitChildren(ctx context.Context, parent types.NamespacedName, visit func(*v1.RetryPolicy) error) (bool, error) {
	children, err := v.Children(ctx, parent)
	if err != nil {
		return true, err
	}
	for i := range children {
		if err := visit(&children[i]); err != nil {
			return true, err
		}
	}
	return true, nil
}
