package graph_test

import (
	"bytes"
	"strings"
	"testing"

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
