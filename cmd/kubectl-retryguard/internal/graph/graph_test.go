package graph_test

import (
	"bytes"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/graph"
)

func pol(ns, name string, attempts int32, opts ...fixtures.Option) v1.RetryPolicy {
	return *fixtures.Policy(ns, name, name, attempts, opts...)
}

func TestTheSeedChainMultipliesTo27(t *testing.T) {
	f := graph.Build([]v1.RetryPolicy{
		pol("ns", "connector", 3, fixtures.Parent("job")),
		pol("ns", "workflow", 3),
		pol("ns", "job", 3, fixtures.Parent("workflow")),
	}, nil)
	if len(f.Roots) != 1 || f.Roots[0].Name != "workflow" {
		t.Fatalf("roots %v", f.Roots)
	}
	leaf := f.Nodes[graph.Key{Namespace: "ns", Name: "connector"}]
	if got := leaf.Chain(); got.Product() != 27 || got.String() != "workflow(3) × job(3) × connector(3) = 27" {
		t.Fatalf("chain %s", got)
	}
	if got := f.Nodes[graph.Key{Namespace: "ns", Name: "job"}].Chain().Product(); got != 9 {
		t.Errorf("job's product %d, want 9", got)
	}
}

// A layer's hidden attempts multiply into every path through it, and both
// renderings show where the factor comes from.
func TestHiddenAttemptsMultiplyAndShow(t *testing.T) {
	f := graph.Build([]v1.RetryPolicy{
		pol("ns", "job", 3),
		pol("ns", "connector", 1, fixtures.Parent("job"), fixtures.Hidden(3)),
	}, nil)
	leaf := f.Nodes[graph.Key{Namespace: "ns", Name: "connector"}]
	if got := leaf.Chain(); got.Product() != 9 || got.String() != "job(3) × connector(1×3 hidden) = 9" {
		t.Fatalf("chain %s", got)
	}
	var text, dot bytes.Buffer
	f.WriteText(&text, graph.Options{MaxLeafAttempts: 3})
	if !strings.Contains(text.String(), "layer connector ×1 ×3 hidden  product 9 > 3") {
		t.Errorf("text does not show the hidden factor:\n%s", text.String())
	}
	f.WriteDot(&dot, graph.Options{MaxLeafAttempts: 3})
	if !strings.Contains(dot.String(), `layer connector ×1 ×3 hidden\nproduct 9`) {
		t.Errorf("dot does not show the hidden factor:\n%s", dot.String())
	}
}

func TestCyclesAndMissingParentsAreReported(t *testing.T) {
	f := graph.Build([]v1.RetryPolicy{
		pol("ns", "b", 1, fixtures.Parent("a")),
		pol("ns", "a", 1, fixtures.Parent("c")),
		pol("ns", "c", 1, fixtures.Parent("b")),
		pol("ns", "under", 2, fixtures.Parent("b")),
		pol("ns", "orphan", 3, fixtures.Parent("gone")),
	}, nil)
	if len(f.Cycles) != 1 {
		t.Fatalf("cycles %v", f.Cycles)
	}
	var got []string
	for _, k := range f.Cycles[0] {
		got = append(got, k.Name)
	}
	// A parent calls its child: a calls b, b calls c, c calls a. The loop is
	// reported once, in call order, from its smallest name.
	if strings.Join(got, ",") != "a,b,c,a" {
		t.Errorf("cycle %v", got)
	}
	if len(f.Roots) != 1 || f.Roots[0].Name != "orphan" || f.Roots[0].MissingParent == nil || f.Roots[0].MissingParent.Name != "gone" {
		t.Errorf("roots %+v", f.Roots)
	}
	var out bytes.Buffer
	f.WriteText(&out, graph.Options{MaxLeafAttempts: 3})
	for _, want := range []string{"parentRef cycle", "ns/a → ns/b → ns/c → ns/a", "(parent ns/gone not found)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, out.String())
		}
	}
}

func TestBudgetsListTheirUsersAndMissingOnes(t *testing.T) {
	f := graph.Build([]v1.RetryPolicy{
		pol("ns", "sms", 3, fixtures.BudgetRef("telephony")),
		pol("ns", "resend", 2, fixtures.BudgetRef("telephony")),
		pol("ns", "mail", 2, fixtures.BudgetRef("absent")),
	}, []v1.RetryBudget{*fixtures.Budget("ns", "telephony", 10), *fixtures.Budget("ns", "idle", 5)})
	var out bytes.Buffer
	f.WriteText(&out, graph.Options{MaxLeafAttempts: 3})
	for _, want := range []string{
		"ns/telephony: 10% of primaries over 1m0s, maxTokens 10, partitions 1, Ready=Unknown (not reconciled yet); used by resend, sms",
		"ns/absent: MISSING, named by mail",
		"ns/idle: 5% of primaries over 1m0s, maxTokens 10, partitions 1, Ready=Unknown (not reconciled yet); used by no policy",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, out.String())
		}
	}
}

// A chain across namespaces multiplies through every consenting parent and
// names each layer's namespace; seen from any of its namespaces the tree
// stays whole.
func TestAChainAcrossNamespaces(t *testing.T) {
	all := fixtures.Allowing(v1.NamespacesFromAll, nil)
	f := graph.Build([]v1.RetryPolicy{
		pol("gateway", "workflow", 3, all),
		pol("checkout", "job", 3, fixtures.ParentIn("gateway", "workflow"), all),
		pol("payments", "connector", 3, fixtures.ParentIn("checkout", "job")),
	}, nil)
	leaf := f.Nodes[graph.Key{Namespace: "payments", Name: "connector"}]
	if got := leaf.Chain().String(); got != "gateway/workflow(3) × checkout/job(3) × payments/connector(3) = 27" {
		t.Fatalf("chain %s", got)
	}
	f.Touching("payments")
	var out bytes.Buffer
	f.WriteText(&out, graph.Options{MaxLeafAttempts: 3})
	for _, want := range []string{"Namespace gateway", "└─ checkout/job", "└─ payments/connector", "product 27 > 3"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, out.String())
		}
	}
}

// A child its parent does not allow is shown under the parent but starts
// its own product, as admission and the controller count it.
func TestAChildWithoutConsentIsNotCounted(t *testing.T) {
	payments := map[string]string{"team": "payments"}
	child := pol("ads", "connector", 3, fixtures.ParentIn("gateway", "job"))
	f := graph.BuildIn([]v1.RetryPolicy{
		pol("gateway", "job", 3, fixtures.Allowing(v1.NamespacesFromSelector, payments)),
		child,
		pol("payments", "sms", 1, fixtures.ParentIn("gateway", "job")),
	}, nil, graph.Namespaces{"ads": {"team": "ads"}, "payments": payments})
	ads := f.Nodes[graph.Key{Namespace: "ads", Name: "connector"}]
	if ads.NotPermitted == nil || ads.Chain().Product() != 3 {
		t.Fatalf("refused child: not permitted %v, chain %s", ads.NotPermitted, ads.Chain())
	}
	if sms := f.Nodes[graph.Key{Namespace: "payments", Name: "sms"}]; sms.NotPermitted != nil || sms.Chain().Product() != 3 {
		t.Errorf("consented child: not permitted %v, chain %s", sms.NotPermitted, sms.Chain())
	}
	var out bytes.Buffer
	f.WriteText(&out, graph.Options{MaxLeafAttempts: 3})
	if !strings.Contains(out.String(), "(not permitted: gateway/job allows children from namespaces matching its selector only") {
		t.Errorf("text does not show the refusal:\n%s", out.String())
	}
	// Without the namespaces' labels, the controller's verdict decides.
	child.Status.Conditions = []metav1.Condition{{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1.ReasonParentNotPermitted}}
	f = graph.Build([]v1.RetryPolicy{pol("gateway", "job", 3, fixtures.Allowing(v1.NamespacesFromSelector, payments)), child}, nil)
	if f.Nodes[graph.Key{Namespace: "ads", Name: "connector"}].NotPermitted == nil {
		t.Error("a child the controller reports ParentNotPermitted is counted")
	}
}

// status.hiddenLayers, filled by the controller, is shown under the policy.
func TestHiddenLayersFromStatusShow(t *testing.T) {
	p := pol("ns", "sms", 1)
	p.Status.HiddenLayers = []v1.HiddenLayer{{Source: "VirtualService/telephony", Attempts: 3}}
	p.Status.LeafAttempts = 3
	var text, dot bytes.Buffer
	f := graph.Build([]v1.RetryPolicy{p}, nil)
	f.WriteText(&text, graph.Options{MaxLeafAttempts: 3})
	f.WriteDot(&dot, graph.Options{MaxLeafAttempts: 3})
	for _, want := range []string{"hidden layers: VirtualService/telephony ×3", "(status: leafAttempts 3)"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	if !strings.Contains(dot.String(), `hidden: VirtualService/telephony ×3`) {
		t.Errorf("dot lacks the hidden layer:\n%s", dot.String())
	}
}
