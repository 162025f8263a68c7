package policygraph_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/contract/codes"
)

// detecting is a Lookup that also detects hidden layers by target.service,
// as the controller's VirtualService finder does.
type detecting struct {
	policygraph.StaticLookup
	byService map[string][]v1.HiddenLayer
	err       error
}

func (d detecting) DetectedLayers(_ context.Context, p *v1.RetryPolicy) ([]v1.HiddenLayer, error) {
	return d.byService[p.Spec.Target.Service], d.err
}

func TestHiddenLayers(t *testing.T) {
	ctx := context.Background()
	vs := func(name string, n int32) v1.HiddenLayer {
		return v1.HiddenLayer{Source: "VirtualService/" + name, Attempts: n}
	}
	p := pol("connector", "connector", 3, fixtures.Hidden(2), service("payments"))
	lk := detecting{StaticLookup: policygraph.NewStaticLookup(),
		byService: map[string][]v1.HiddenLayer{"payments": {vs("payments", 3), vs("noop", 1)}}}

	got, err := policygraph.HiddenLayers(ctx, lk, &p)
	if err != nil {
		t.Fatal(err)
	}
	want := []v1.HiddenLayer{{Source: policygraph.HiddenAttemptsSource, Attempts: 2}, vs("payments", 3)}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("HiddenLayers = %+v, want %+v (a layer of one attempt hides nothing)", got, want)
	}
	if l, err := policygraph.LayerIn(ctx, lk, &p); err != nil || l.Hidden != 6 || l.Calls() != 18 {
		t.Errorf("LayerIn = %+v, %v; want 2×3 hidden, 18 calls", l, err)
	}

	plain := pol("connector", "connector", 3, service("payments"))
	if got, _ := policygraph.HiddenLayers(ctx, nil, &plain); len(got) != 0 {
		t.Errorf("no hidden attempts and no detector: %+v", got)
	}
	if got, _ := policygraph.HiddenLayers(ctx, nil, &p); !reflect.DeepEqual(got, want[:1]) {
		t.Errorf("hidden attempts and no detector: %+v", got)
	}
	if l, _ := policygraph.LayerIn(ctx, policygraph.NewStaticLookup(), &p); l != policygraph.LayerOf(&p) {
		t.Errorf("a Lookup without a detector: %+v, want LayerOf's %+v", l, policygraph.LayerOf(&p))
	}

	huge := detecting{StaticLookup: lk.StaticLookup, byService: map[string][]v1.HiddenLayer{
		"payments": {vs("a", math.MaxInt32), vs("b", math.MaxInt32)}}}
	if l, err := policygraph.LayerIn(ctx, huge, &p); err != nil || l.Hidden != math.MaxInt32 {
		t.Errorf("hidden attempts saturate: %+v, %v", l, err)
	}

	boom := errors.New("cache not synced")
	failing := detecting{StaticLookup: lk.StaticLookup, err: boom}
	if _, err := policygraph.LayerIn(ctx, failing, &p); !errors.Is(err, boom) {
		t.Errorf("a detector's error is returned: %v", err)
	}
	if _, err := policygraph.Analyze(ctx, failing, &p); !errors.Is(err, boom) {
		t.Errorf("Analyze returns a detector's error: %v", err)
	}
}

// A detected layer multiplies every call below it, so it counts in the
// verdict of its own policy and of the policies below, never in a caller's:
// a child's VirtualService in team-a never refuses team-b's parent, and the
// message shows the layer.
func TestDetectedLayersAreChargedToTheirOwnPolicy(t *testing.T) {
	ctx := context.Background()
	istio := []v1.HiddenLayer{{Source: "VirtualService/x", Attempts: 3}}
	workflow := polIn("team-b", "workflow", "workflow", 3, service("jobs"), fixtures.Allowing(v1.NamespacesFromAll, nil))
	connector := polIn("team-a", "connector", "connector", 1, fixtures.ParentIn("team-b", "workflow"), service("payments"))
	store := policygraph.NewStaticLookup(workflow, connector)

	for name, tc := range map[string]struct {
		service  string
		policy   v1.RetryPolicy
		leaf     int64
		charged  string
		exceeded bool
	}{
		"at the child, seen from the child": {service: "payments", policy: connector, leaf: 9, exceeded: true,
			charged: "team-b/workflow(3) × team-a/connector(1×3 hidden) = 9"},
		"at the child, seen from the parent in another namespace": {service: "payments", policy: workflow, leaf: 3,
			charged: "team-b/workflow(3) × team-a/connector(1) = 3"},
		"at the parent, seen from the parent": {service: "jobs", policy: workflow, leaf: 9, exceeded: true,
			charged: "team-b/workflow(3×3 hidden) × team-a/connector(1) = 9"},
		"at the parent, seen from the child": {service: "jobs", policy: connector, leaf: 9, exceeded: true,
			charged: "team-b/workflow(3×3 hidden) × team-a/connector(1) = 9"},
		"nowhere on the chain": {service: "ledger", policy: connector, leaf: 3,
			charged: "team-b/workflow(3) × team-a/connector(1) = 3"},
	} {
		t.Run(name, func(t *testing.T) {
			lk := detecting{StaticLookup: store, byService: map[string][]v1.HiddenLayer{tc.service: istio}}
			v, err := policygraph.ValidateRetryPolicy(ctx, lk, &tc.policy, policygraph.DefaultLimits(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := v.Analysis.LeafAttempts(); got != tc.leaf {
				t.Errorf("leaf attempts %d, want %d", got, tc.leaf)
			}
			if got := v.Analysis.Worst().String(); got != tc.charged {
				t.Errorf("worst chain %q, want %q", got, tc.charged)
			}
			exceeded := len(v.Errors) == 1 && v1.CodeOf(v.Errors[0]) == codes.LayerAmplification &&
				strings.Contains(v.Errors[0].Detail, tc.charged)
			if exceeded != tc.exceeded || (!tc.exceeded && len(v.Errors) != 0) {
				t.Errorf("against a limit of 3, exceeded %v: %v", tc.exceeded, v.Errors)
			}
		})
	}
}

// A review whose context ends stops walking the children: the work of one
// review is bounded by its deadline, however many children a root has.
func TestAnalyzeStopsWhenTheReviewEnds(t *testing.T) {
	root := pol("root", "root", 1)
	stored := []v1.RetryPolicy{root}
	for i := range 100 {
		stored = append(stored, pol(fmt.Sprintf("child-%d", i), "child", 1, parent("root")))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := policygraph.Analyze(ctx, policygraph.NewStaticLookup(stored...), &root); !errors.Is(err, context.Canceled) {
		t.Fatalf("Analyze under an ended review: %v, want context.Canceled", err)
	}
}
