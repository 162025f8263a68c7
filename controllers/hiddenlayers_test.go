package controllers

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/contract/codes"
)

func TestServedVirtualServicePrefersTheNewestVersion(t *testing.T) {
	gk := schema.GroupKind{Group: IstioNetworkingGroup, Kind: VirtualServiceKind}
	mapper := func(versions ...string) meta.RESTMapper {
		var gvs []schema.GroupVersion
		for _, v := range versions {
			gvs = append(gvs, schema.GroupVersion{Group: gk.Group, Version: v})
		}
		m := meta.NewDefaultRESTMapper(gvs)
		for _, gv := range gvs {
			m.Add(gv.WithKind(gk.Kind), meta.RESTScopeNamespace)
		}
		return m
	}
	for _, tc := range []struct {
		served []string
		want   string
	}{
		{nil, ""},
		{[]string{"v1alpha3"}, "v1alpha3"},
		{[]string{"v1alpha3", "v1beta1"}, "v1beta1"},
		{[]string{"v1alpha3", "v1", "v1beta1"}, "v1"},
		{[]string{"v2"}, ""}, // a version whose content the controller does not know
	} {
		gvk, err := servedVirtualService(mapper(tc.served...))
		if err != nil {
			t.Fatalf("%v: %v", tc.served, err)
		}
		got := ""
		if gvk != nil {
			got = gvk.Version
			if gvk.GroupKind() != gk {
				t.Errorf("%v: %v", tc.served, gvk)
			}
		}
		if got != tc.want {
			t.Errorf("served %v: read %q, want %q", tc.served, got, tc.want)
		}
	}
}

// listReader serves a fixed list of VirtualServices, or an error.
type listReader struct {
	client.Reader
	items []unstructured.Unstructured
	err   error
	lists int
}

func (r *listReader) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	r.lists++
	if r.err != nil {
		return r.err
	}
	list.(*unstructured.UnstructuredList).Items = r.items
	return nil
}

func TestVirtualServiceFinder(t *testing.T) {
	ctx := context.Background()
	item := func(name, doc string) unstructured.Unstructured {
		u := unstructured.Unstructured{Object: vs(t, doc)}
		u.SetName(name)
		u.SetNamespace("shop")
		return u
	}
	reader := &listReader{items: []unstructured.Unstructured{
		item("b-default", "spec: {hosts: [payments], http: [{}]}"),
		item("a-default", "spec: {hosts: [payments], http: [{}]}"),
		item("off", "spec: {hosts: [payments], http: [{retries: {attempts: 0}}]}"),
		item("elsewhere", "spec: {hosts: [ledger], http: [{retries: {attempts: 9}}]}"),
	}}
	f := &VirtualServiceFinder{Reader: reader}
	p := fixtures.Policy("shop", "p", "connector", 3, fixtures.Service("payments"))

	if got, err := f.DetectedLayers(ctx, p); err != nil || got != nil || reader.lists != 0 {
		t.Fatalf("nothing served: %v, %v, %d lists; want no layer and no list", got, err, reader.lists)
	}
	f.Serve(&schema.GroupVersionKind{Group: IstioNetworkingGroup, Version: "v1", Kind: VirtualServiceKind})
	got, err := f.DetectedLayers(ctx, p)
	want := []v1.HiddenLayer{{Source: "VirtualService/a-default", Attempts: 3}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("DetectedLayers = %+v, %v; want the worst, the first by name on a tie: %+v", got, err, want)
	}
	ledger := fixtures.Policy("shop", "l", "connector", 1, fixtures.Service("ledger"))
	if got, _ := f.DetectedLayers(ctx, ledger); !reflect.DeepEqual(got, []v1.HiddenLayer{{Source: "VirtualService/elsewhere", Attempts: 10}}) {
		t.Errorf("ledger: %+v", got)
	}
	other := fixtures.Policy("shop", "o", "connector", 1, fixtures.Service("inventory"))
	if got, _ := f.DetectedLayers(ctx, other); got != nil {
		t.Errorf("a service no VirtualService routes: %+v", got)
	}

	reader.err = &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: IstioNetworkingGroup, Kind: VirtualServiceKind}}
	if got, err := f.DetectedLayers(ctx, p); err != nil || got != nil {
		t.Errorf("uninstalled under the finder's feet: %v, %v", got, err)
	}
	boom := errors.New("cache not synced")
	reader.err = boom
	if _, err := f.DetectedLayers(ctx, p); !errors.Is(err, boom) {
		t.Errorf("a list error is returned: %v", err)
	}

	var nilFinder *VirtualServiceFinder
	if got, err := nilFinder.DetectedLayers(ctx, p); got != nil || err != nil {
		t.Errorf("a nil finder: %v, %v", got, err)
	}
}

func TestReconcilerDetectsOnlyWithAFinder(t *testing.T) {
	lk := policygraph.NewStaticLookup()
	if _, ok := (&RetryPolicyReconciler{}).detecting(lk).(policygraph.LayerDetector); ok {
		t.Error("a reconciler without a finder detects layers")
	}
	r := &RetryPolicyReconciler{VirtualServices: &VirtualServiceFinder{}}
	if _, ok := r.detecting(lk).(policygraph.LayerDetector); !ok {
		t.Error("a reconciler with a finder does not detect layers")
	}
}

// The hidden layers are an input of the one verdict: a policy refused for
// its product names them in both messages, any other verdict ignores them.
func TestNameHiddenLayers(t *testing.T) {
	hidden := []v1.HiddenLayer{{Source: "VirtualService/x", Attempts: 3}}
	tooMany := field.ErrorList{v1.Invalid(field.NewPath("spec", "maxAttempts"), 27, codes.LayerAmplification, "too many")}
	enf, cond := evaluatePolicy(policyFacts{Verdict: policygraph.Verdict{Errors: tooMany}, HiddenLayers: hidden}, 1)
	if cond.Reason != v1.ReasonAmplificationExceeded {
		t.Fatalf("reason %q", cond.Reason)
	}
	for _, msg := range []string{enf.Message, cond.Message} {
		if !strings.Contains(msg, "VirtualService/x makes 3 attempts per call") {
			t.Errorf("message %q does not name the VirtualService", msg)
		}
	}
	_, other := evaluatePolicy(policyFacts{BudgetRef: "b", HiddenLayers: hidden}, 1)
	if want := `budgetRef: RetryBudget "b" does not exist; pods make a single attempt until this is fixed`; other.Message != want {
		t.Errorf("another reason's message changed: %q", other.Message)
	}
}
