package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/kube"
)

// withCluster points the cluster commands at a fake cluster holding objs,
// whose kubeconfig context namespace is ns (unless -n says otherwise).
func withCluster(t *testing.T, ns string, objs ...client.Object) {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(kube.Scheme()).WithObjects(objs...).Build()
	orig := connect
	connect = func(f genericclioptions.RESTClientGetter) (client.Client, string, error) {
		if n := *f.(*genericclioptions.ConfigFlags).Namespace; n != "" {
			return c, n, nil
		}
		return c, ns, nil
	}
	t.Cleanup(func() { connect = orig })
}

func ready(status metav1.ConditionStatus, reason, msg string) fixtures.Option {
	return func(p *v1.RetryPolicy) {
		p.Status.Conditions = []metav1.Condition{{Type: v1.ConditionReady, Status: status, Reason: reason, Message: msg}}
	}
}

func seedChain(ns string) []client.Object {
	return []client.Object{
		fixtures.Policy(ns, "workflow", "workflow", 3, ready(metav1.ConditionTrue, "Published", "")),
		fixtures.Policy(ns, "job", "job", 3, fixtures.Parent("workflow"), ready(metav1.ConditionFalse, "AmplificationExceeded", "")),
		fixtures.Policy(ns, "connector", "connector", 3, fixtures.Parent("job"),
			ready(metav1.ConditionFalse, "AmplificationExceeded", "workflow(3) × job(3) × connector(3) = 27 > 3")),
		fixtures.Budget(ns, fixtures.DefaultBudget, 10),
	}
}

func TestGraphShowsWhereThe27ComesFrom(t *testing.T) {
	withCluster(t, "checkout", append(seedChain("checkout"), seedChain("gateway")...)...)
	out := runOK(t, "graph")
	assertContains(t, out,
		"Namespace checkout",
		"  workflow  layer workflow ×3  product 3  budget telephony  Ready=True (Published)",
		"  └─ job  layer job ×3  product 9 > 3",
		"     └─ connector  layer connector ×3  product 27 > 3  budget telephony  Ready=False (AmplificationExceeded)",
		"= workflow(3) × job(3) × connector(3) = 27",
		"checkout/telephony: 10% of primaries over 1m0s",
		"used by connector, job, workflow",
	)
	if strings.Contains(out, "gateway") {
		t.Errorf("graph without -A shows another namespace:\n%s", out)
	}
	_, all, _ := runCLI(t, "", "graph", "-A")
	if !strings.Contains(all, "Namespace checkout") || !strings.Contains(all, "Namespace gateway") {
		t.Errorf("graph -A:\n%s", all)
	}
	_, raised, _ := runCLI(t, "", "graph", "--max-leaf-attempts", "27")
	if strings.Contains(raised, "> 27") || !strings.Contains(raised, "product 27  budget") {
		t.Errorf("with a limit of 27 nothing is over it:\n%s", raised)
	}
}

func TestGraphDot(t *testing.T) {
	withCluster(t, "checkout", seedChain("checkout")...)
	out := runOK(t, "graph", "-o", "dot", "-n", "checkout")
	assertContains(t, out,
		"digraph retryguard {", `subgraph "cluster_checkout"`,
		`"checkout/workflow" -> "checkout/job";`, `"checkout/job" -> "checkout/connector";`,
		`product 27`, `"checkout/connector" -> "budget:checkout/telephony" [style=dashed`,
	)
	if !strings.Contains(out, `"checkout/connector" [label="connector\nlayer connector ×3\nproduct 27\nReady=False (AmplificationExceeded)", color=red]`) {
		t.Errorf("the 27 is not red:\n%s", out)
	}
	if code, _, _ := runCLI(t, "", "graph", "-o", "svg"); code != 2 {
		t.Errorf("-o svg: exit %d, want 2", code)
	}
	if code, _, _ := runCLI(t, "", "graph", "-A", "-n", "x"); code != 2 {
		t.Errorf("-A with -n: exit %d, want 2", code)
	}
}

// A connector whose SDK makes 3 attempts under a job of 3: graph and explain
// both show the hidden factor and the 9 it makes.
func TestGraphAndExplainShowHiddenAttempts(t *testing.T) {
	withCluster(t, "checkout",
		fixtures.Policy("checkout", "job", "job", 3),
		fixtures.Policy("checkout", "connector", "connector", 1, fixtures.Parent("job"), fixtures.Hidden(3)),
		fixtures.Budget("checkout", fixtures.DefaultBudget, 10))
	out := runOK(t, "graph")
	assertContains(t, out, "└─ connector  layer connector ×1 ×3 hidden  product 9 > 3", "= job(3) × connector(1×3 hidden) = 9")
	out = runOK(t, "explain", "rp/connector")
	assertContains(t, out,
		"layer connector, 1 total attempts (×3 hidden, made by an SDK or a proxy), calling telephony-api",
		"calls per top-level operation through this policy: job(3) × connector(1×3 hidden) = 9 (limit 3)")
}

func TestExplainANotReadyPolicy(t *testing.T) {
	objs := seedChain("checkout")
	withCluster(t, "checkout", objs...)
	out := runOK(t, "explain", "rp/connector")
	assertContains(t, out,
		"RetryPolicy checkout/connector: layer connector, 3 total attempts, calling telephony-api (POST /v1/messages)",
		"no: Ready=False, reason AmplificationExceeded: workflow(3) × job(3) × connector(3) = 27 > 3",
		"calls per top-level operation through this policy: workflow(3) × job(3) × connector(3) = 27 (limit 3)",
		"policies: workflow → job → connector",
		"shared by 3 policies: connector, job, workflow",
	)
	_, top, _ := runCLI(t, "", "explain", "workflow")
	if !strings.Contains(top, "worst path through it, down to its deepest layer: workflow(3) × job(3) × connector(3) = 27 (ABOVE the limit of 3)") {
		t.Errorf("explain workflow:\n%s", top)
	}
	if code, _, errOut := runCLI(t, "", "explain", "rp/absent"); code != exitUnreadable || !strings.Contains(errOut, "checkout/absent not found") {
		t.Errorf("absent: exit %d %s", code, errOut)
	}
	if code, _, _ := runCLI(t, "", "explain", "rb/telephony"); code != 2 {
		t.Errorf("rb/: exit %d, want 2", code)
	}
}

// The sample 2FA schedule: three attempts of up to 1s, waits of up to 200ms
// and 400ms (at least the runtime's 1ms floor under Full jitter), deadline 4s.
func TestExplainTheWorstCaseSchedule(t *testing.T) {
	sms := fixtures.Policy("auth", "sms", "connector", 3, fixtures.Deadline(4*time.Second), fixtures.PerAttempt(time.Second),
		ready(metav1.ConditionTrue, "Published", "published in retryguard-sms"))
	budget := fixtures.Budget("auth", fixtures.DefaultBudget, 10)
	budget.Spec.MaxTokens = ptr.To[int32](10)
	budget.Spec.Partitions = ptr.To[int32](4)
	slow := fixtures.Policy("auth", "slow", "connector", 3, fixtures.Deadline(4*time.Second), fixtures.PerAttempt(1500*time.Millisecond))
	withCluster(t, "default", sms, slow, budget)
	out := runOK(t, "explain", "-n", "auth", "rp/sms")
	assertContains(t, out,
		"yes: Ready=True, reason Published",
		"Worst-case schedule: deadline 4s, minRemaining 500ms, each attempt 1s (perAttemptTimeout), jitter Full",
		"ATTEMPT  SLEEP BEFORE  REMAINING BEFORE SLEEP  STARTS AT  ENDS BY  RUNS",
		"1        -             -                       0s         1s       yes",
		"2        1ms..200ms    3s                      1.2s       2.2s     yes",
		"3        1ms..400ms    1.8s                    2.6s       3.6s     yes",
		"worst case: 3 of 3 attempts run, 3.6s of the 4s deadline",
		"split over 4 partition(s): each pod holds 2 token(s) and a floor of 0 retries/s (each rounded down)",
		"shared by 2 policies: slow, sms",
	)
	// 1.5 + 0.2 + 1.5 = 3.2s, then 0.8s left cannot hold 0.4s + 1.5s.
	_, slowOut, _ := runCLI(t, "", "explain", "rp/slow", "-n", "auth")
	assertContains(t, slowOut,
		"3        1ms..400ms    800ms                   -          -        no",
		"worst case: 2 of 3 attempts run",
		"only 2 of 3 attempts can run in the worst case",
		"unknown: no Ready condition yet",
	)
}

// A fleet budget: RG-LOAD's total 20/s allowance over the pods the
// controller counted, each named pod's share as the runtime rounds it and
// when it takes it, the pods that hold nothing, and the nothing a named
// pod falls back to when the count goes stale.
func TestExplainAFleetBudget(t *testing.T) {
	sms := fixtures.Policy("auth", "sms", "connector", 3)
	fleet := fixtures.Budget("auth", fixtures.DefaultBudget, 10)
	fleet.Spec.MaxRetriesPerSecond = ptr.To[int32](20)
	fleet.Spec.MinRetriesPerSecond = ptr.To[int32](20)
	fleet.Spec.Partitions = ptr.To[int32](20)
	fleet.Spec.Consumers = &v1.BudgetConsumers{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "sms"}}}
	fleet.Status.Consumers = ptr.To[int32](8)
	withCluster(t, "auth", sms, fleet)
	out := runOK(t, "explain", "rp/sms")
	assertContains(t, out,
		"fleet allowance: at most 20 retries/s across every pod that shares it",
		"shared by the pods matching app=sms: 8 counted (status.consumers)",
		"the pods read the count from ConfigMap retrybudget-"+fixtures.DefaultBudget+", joined to this budget by its UID",
		"and each pod its own shard of the members, retrymembers-xx-"+fixtures.DefaultBudget,
		"each pod the count names (by its POD_UID) holds 1 token(s) and a floor of 2 retries/s, at most 2 retries/s (each rounded down), 2s after it reads the count",
		"a pod no count names holds nothing, whatever the count's age",
		"one started while the controller is down",
		"a pod whose policy source states no delivery bound within it holds nothing: one that reads its policy from a mounted volume",
		"with the count stale (controller down or the pod's watch cut off, 1m0s) each pod it named holds nothing, no retry at all",
	)
	_, graphOut, _ := runCLI(t, "", "graph")
	assertContains(t, graphOut, "partitions 20, at most 20 retries/s in all, shared by pods app=sms (8 counted)")
}

// assertContains reports each wanted substring that out lacks.
func assertContains(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

// crossChain is the spec's 3×3×3 across three namespaces: gateway consents
// to every namespace, checkout to the namespaces labelled team=payments,
// and one more child in namespace ads, which checkout does not allow.
func crossChain() []client.Object {
	payments := map[string]string{"team": "payments"}
	return []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "payments", Labels: payments}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ads", Labels: map[string]string{"team": "ads"}}},
		fixtures.Policy("gateway", "workflow", "workflow", 3, fixtures.Allowing(v1.NamespacesFromAll, nil)),
		fixtures.Policy("checkout", "job", "job", 3, fixtures.ParentIn("gateway", "workflow"),
			fixtures.Allowing(v1.NamespacesFromSelector, payments)),
		fixtures.Policy("payments", "connector", "connector", 3, fixtures.ParentIn("checkout", "job"),
			ready(metav1.ConditionFalse, "AmplificationExceeded", "")),
		fixtures.Policy("ads", "banner", "banner", 1, fixtures.ParentIn("checkout", "job")),
		fixtures.Budget("payments", fixtures.DefaultBudget, 10),
	}
}

func TestGraphAndExplainFollowParentsAcrossNamespaces(t *testing.T) {
	withCluster(t, "payments", crossChain()...)
	out := runOK(t, "graph")
	assertContains(t, out,
		"Namespace gateway",
		"  └─ checkout/job  layer job ×3  product 9 > 3",
		"     ├─ ads/banner  layer banner ×1  product 1",
		"(not permitted: checkout/job allows children from namespaces matching its selector only; not counted, a single attempt)",
		"     └─ payments/connector  layer connector ×3  product 27 > 3",
		"= gateway/workflow(3) × checkout/job(3) × payments/connector(3) = 27",
		"payments/telephony: 10% of primaries",
	)
	out = runOK(t, "explain", "rp/connector")
	assertContains(t, out,
		"calls per top-level operation through this policy: gateway/workflow(3) × checkout/job(3) × payments/connector(3) = 27 (limit 3)",
		"policies: gateway/workflow → checkout/job → payments/connector")
	_, out, _ = runCLI(t, "", "explain", "rp/banner", "-n", "ads")
	assertContains(t, out,
		"calls per top-level operation through this policy: banner(1) = 1",
		`RetryPolicy "checkout/job" does not allow child layers from namespace "ads"`)
}

// A user who may read RetryPolicies only in their own namespace still sees
// the parents their chains name elsewhere, fetched one by one.
func TestGraphFollowsParentsWithoutClusterWideList(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(kube.Scheme()).WithObjects(crossChain()...).
		WithInterceptorFuncs(interceptor.Funcs{List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if (&client.ListOptions{}).ApplyOptions(opts).Namespace == "" {
				return apierrors.NewForbidden(schema.GroupResource{Resource: "retrypolicies"}, "", errors.New("cluster-wide"))
			}
			return c.List(ctx, list, opts...)
		}}).Build()
	orig := connect
	connect = func(genericclioptions.RESTClientGetter) (client.Client, string, error) { return c, "payments", nil }
	t.Cleanup(func() { connect = orig })
	out := runOK(t, "graph")
	assertContains(t, out, "Namespace gateway", "= gateway/workflow(3) × checkout/job(3) × payments/connector(3) = 27")
	if strings.Contains(out, "ads/banner") {
		t.Errorf("a child in a namespace the user cannot list is shown:\n%s", out)
	}
}
