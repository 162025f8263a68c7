package controllers

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	rlimits "github.com/retryguard/retryguard/contract/limits"
	"github.com/retryguard/retryguard/contract/policyconfig"
)

func TestConsumerLeaseRenewal(t *testing.T) {
	const refresh = policyconfig.ConsumerCountRefresh
	policy := types.NamespacedName{Namespace: "shop", Name: "cart"}
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	two := consumerTally{Count: 2, Members: policyconfig.EncodeMembers([]string{"u1", "u2"})}
	three := consumerTally{Count: 3, Members: policyconfig.EncodeMembers([]string{"u1", "u2", "u3"})}
	replaced := consumerTally{Count: 3, Members: policyconfig.EncodeMembers([]string{"u1", "u2", "u4"})}
	var l consumerLeases

	expect := func(at time.Duration, tally consumerTally, budget types.UID, wantAt, wantDue time.Duration) {
		t.Helper()
		c, due := l.renew(policy, budget, tally, start.Add(at), refresh)
		if c.Count != tally.Count || c.Members != tally.Members || !c.ObservedAt.Equal(start.Add(wantAt)) || due != wantDue {
			t.Fatalf("at +%s: %+v due in %s, want observedAt +%s due in %s", at, c, due, wantAt, wantDue)
		}
	}
	expect(0, two, "b1", 0, refresh)                                              // the first count
	expect(5*time.Second, two, "b1", 0, refresh-5*time.Second)                    // same pods: kept
	expect(refresh, two, "b1", refresh, refresh)                                  // due: renewed
	expect(refresh+time.Second, three, "b1", refresh+time.Second, refresh)        // a pod more
	expect(refresh+2*time.Second, replaced, "b1", refresh+2*time.Second, refresh) // one replaced: the same count, other members
	expect(refresh+3*time.Second, replaced, "b2", refresh+3*time.Second, refresh) // another budget
	expect(time.Second, replaced, "b2", time.Second, refresh)                     // the clock went back
	l.forget(policy)
	expect(2*time.Second, replaced, "b2", 2*time.Second, refresh) // forgotten
}

func TestPodMembershipChanged(t *testing.T) {
	pod := func(labels map[string]string, rv string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Labels: labels, ResourceVersion: rv}}
	}
	a := map[string]string{"app": "a"}
	if podMembershipChanged.Update(event.UpdateEvent{ObjectOld: pod(a, "1"), ObjectNew: pod(map[string]string{"app": "a"}, "2")}) {
		t.Error("a status change passed")
	}
	if !podMembershipChanged.Update(event.UpdateEvent{ObjectOld: pod(a, "1"), ObjectNew: pod(map[string]string{"app": "b"}, "2")}) {
		t.Error("a relabel was dropped")
	}
	if !podMembershipChanged.Create(event.CreateEvent{Object: pod(a, "1")}) || !podMembershipChanged.Delete(event.DeleteEvent{Object: pod(a, "1")}) {
		t.Error("a creation or deletion was dropped")
	}
}

func TestKeepCountedPodFields(t *testing.T) {
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"app": "a"},
		Annotations: map[string]string{"big": strings.Repeat("x", 1000)}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}},
		OwnerReferences: []metav1.OwnerReference{{Name: "rs"}}, UID: "u", DeletionTimestamp: &metav1.Time{}}}
	out, err := keepCountedPodFields(m)
	got := out.(*metav1.PartialObjectMetadata)
	if err != nil || got.Annotations != nil || got.ManagedFields != nil || got.OwnerReferences != nil ||
		got.Labels["app"] != "a" || got.UID != "u" || got.DeletionTimestamp == nil {
		t.Fatalf("%+v %v", got, err)
	}
}

func TestEvaluateFleetBudget(t *testing.T) {
	limits := policygraph.DefaultLimits()
	b := fixtures.Budget("ns", "b", 10)
	b.Spec.Partitions = ptr.To[int32](4)
	b.Spec.Consumers = &v1.BudgetConsumers{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}}
	b.Status.Consumers = ptr.To[int32](4)
	if c := evaluateBudget(b, 1, limits); c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "4 consumers") ||
		strings.Contains(c.Message, "above partitions") {
		t.Errorf("at partitions: %+v", c)
	}
	b.Status.Consumers = ptr.To[int32](5)
	if c := evaluateBudget(b, 1, limits); c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "above partitions (4)") {
		t.Errorf("above partitions: %+v", c)
	}
	b.Spec.MaxRetriesPerSecond = ptr.To[int32](5)
	if c := evaluateBudget(b, 1, limits); strings.Contains(c.Message, "no pod retries") {
		t.Errorf("5 consumers of 5 retries a second hold one each: %+v", c)
	}
	b.Spec.MaxRetriesPerSecond = ptr.To[int32](4)
	if c := evaluateBudget(b, 1, limits); !strings.Contains(
		c.Message,
		"5 consumers share maxRetriesPerSecond 4: below one retry a second each, so no pod retries",
	) {
		t.Errorf("more consumers than retries a second: %+v", c)
	}
	b.Spec.Consumers.PodSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Near"}}}
	if c := evaluateBudget(b, 1, limits); c.Status != metav1.ConditionFalse || c.Reason != v1.ReasonInvalidSpec ||
		!strings.Contains(c.Message, "consumers.podSelector") || !strings.Contains(c.Message, "conservative share") {
		t.Errorf("an invalid selector: %+v", c)
	}
}

// The platform cap has one judge and one wording: a budget above it (where
// admission was bypassed) is not Ready with the webhook's own refusal.
func TestBudgetAboveThePlatformCapSaysWhatAdmissionSays(t *testing.T) {
	limits := policygraph.DefaultLimits()
	b := fixtures.Budget("ns", "greedy", limits.MaxRetryPercent+1)
	refusal := policygraph.ValidateRetryBudget(b, limits, nil).Errors
	if len(refusal) != 1 {
		t.Fatalf("admission: %v", refusal)
	}
	c := evaluateBudget(b, 0, limits)
	if c.Reason != v1.ReasonAbovePlatformCap || c.Message != limits.AboveRetryPercentCap(b) || !strings.Contains(refusal[0].Detail, c.Message) {
		t.Errorf("status %+v, admission %q", c, refusal[0].Detail)
	}
	b.Spec.RetryPercent = limits.MaxRetryPercent
	if c := evaluateBudget(b, 0, limits); c.Reason == v1.ReasonAbovePlatformCap || limits.AboveRetryPercentCap(b) != "" {
		t.Errorf("at the cap: %+v", c)
	}
}

// A fleet budget whose name leaves no room for its member shards' names is
// not Ready: no shard is written, so no pod holds a share, whatever the
// count. The longest name that fits is Ready; an uncounted budget of any
// admitted name does not need shards.
func TestFleetBudgetNameTooLongToCount(t *testing.T) {
	limits := policygraph.DefaultLimits()
	counted := func(name string) *v1.RetryBudget {
		b := fixtures.Budget("ns", name, 10)
		b.Spec.Consumers = &v1.BudgetConsumers{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}}
		b.Status.Consumers = ptr.To[int32](3)
		return b
	}
	longest := strings.Repeat("b", maxCountedBudgetName)
	if n := len(policyconfig.MemberShardConfigMapName("00", longest)); n != rlimits.MaxObjectNameLength {
		t.Fatalf("the longest counted name gives shard names of %d characters, want %d", n, rlimits.MaxObjectNameLength)
	}
	for name, tc := range map[string]struct {
		b      *v1.RetryBudget
		status metav1.ConditionStatus
		reason string
	}{
		"the longest name that fits":    {counted(longest), metav1.ConditionTrue, v1.ReasonAccepted},
		"one character more":            {counted(longest + "b"), metav1.ConditionFalse, v1.ReasonNameTooLongToCount},
		"238 characters":                {counted(strings.Repeat("c", 238)), metav1.ConditionFalse, v1.ReasonNameTooLongToCount},
		"an uncounted budget that long": {fixtures.Budget("ns", strings.Repeat("c", 240), 10), metav1.ConditionTrue, v1.ReasonAccepted},
	} {
		c := evaluateBudget(tc.b, 1, limits)
		if c.Status != tc.status || c.Reason != tc.reason {
			t.Errorf("%s: %+v, want %s %s", name, c, tc.status, tc.reason)
		}
		if c.Reason == v1.ReasonNameTooLongToCount && !strings.Contains(c.Message, "no pod holds a share") {
			t.Errorf("%s: the message tells better than the truth: %q", name, c.Message)
		}
	}
}
