package controllers

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/retryguard/retryguard/api/policygraph/policyindex"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/contract/policyconfig"
)

// Consumers of a fleet budget are counted from a metadata-only watch of
// pods: every pod object that matches spec.consumers.podSelector in the
// budget's namespace, pending, running and terminating alike. A pod object
// exists before its process starts and until after it stops, so counting
// objects never undercounts running processes; metadata cannot show
// readiness, and counting a pod that is not Ready yet only lowers every
// pod's share.
//
// Pods: list and watch feed the metadata cache; nothing reads a pod by name.
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch

// podGVK is the kind the metadata-only watch and cache hold.
var podGVK = corev1.SchemeGroupVersion.WithKind("Pod")

// podMetadataList is an empty list of pods in their metadata-only form.
func podMetadataList() *metav1.PartialObjectMetadataList {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	return l
}

// keepCountedPodFields keeps in the metadata cache only what counting reads
// (namespace, name, UID, labels, timestamps): a pod's managed fields,
// annotations and owner references are most of its metadata.
func keepCountedPodFields(obj any) (any, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		m.ManagedFields, m.Annotations, m.OwnerReferences = nil, nil, nil
	}
	return obj, nil
}

// consumerSelector is a budget's pod selector; nil when the budget selects
// no consumers. An error means a selector that escaped CEL and the Go
// validator (admission bypassed).
func consumerSelector(b *v1.RetryBudget) (labels.Selector, error) {
	if b.Spec.Consumers == nil {
		return nil, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(b.Spec.Consumers.PodSelector)
	if err != nil {
		return nil, fmt.Errorf("consumers.podSelector is not a valid label selector: %w", err)
	}
	return sel, nil
}

// consumerTally is one count of a budget's consumers.
type consumerTally struct {
	Count int32
	// Members names the pods counted (policyconfig.EncodeMembers of their
	// UIDs): a pod takes a share only when a count names it, and one pod
	// replacing another, which keeps the count, changes the members.
	Members string
}

// countConsumers counts the pods that match b's selector in the namespaces
// it admits (every namespace when all is set, else namespaces), reading the
// manager's cache, which serves a list only once the pod informer has
// synced, and names them by UID. The cost follows the pods of those
// namespaces.
func countConsumers(ctx context.Context, r client.Reader, b *v1.RetryBudget, sel labels.Selector, all bool, namespaces []string) (consumerTally, error) {
	if all {
		namespaces = []string{metav1.NamespaceAll}
	}
	var uids []string
	for _, ns := range namespaces {
		pods := podMetadataList()
		if err := r.List(ctx, pods, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel},
			client.UnsafeDisableDeepCopy); err != nil {
			return consumerTally{}, fmt.Errorf("counting the consumers of RetryBudget %s: %w", b.Name, err)
		}
		for i := range pods.Items {
			uids = append(uids, string(pods.Items[i].UID))
		}
	}
	return consumerTally{Count: int32(min(len(uids), int(policyconfig.MaxConsumerCount))), Members: policyconfig.EncodeMembers(uids)}, nil
}

// budgetsSelecting returns the fleet budgets whose selector matches pod's
// labels and that admit pod's namespace: those of its namespace, and those
// of others shared with it.
func budgetsSelecting(ctx context.Context, r client.Reader, pod client.Object) []v1.RetryBudget {
	var own v1.RetryBudgetList
	if err := r.List(ctx, &own, client.InNamespace(pod.GetNamespace())); err != nil {
		return nil
	}
	candidates := own.Items
	for _, from := range []string{policyindex.SharedByAll, policyindex.SharedBySelector} {
		var shared v1.RetryBudgetList
		if err := r.List(ctx, &shared, client.MatchingFields{policyindex.IndexSharedBudget: from}); err != nil {
			return nil // a count missing a pod would give the others more
		}
		for _, b := range shared.Items {
			if b.Namespace != pod.GetNamespace() {
				candidates = append(candidates, b)
			}
		}
	}
	set := labels.Set(pod.GetLabels())
	var out []v1.RetryBudget
	for _, b := range candidates {
		if sel, err := consumerSelector(&b); err == nil && sel != nil && sel.Matches(set) && admits(ctx, r, &b, pod.GetNamespace()) {
			out = append(out, b)
		}
	}
	return out
}

// budgetsOfPod maps a pod event to the budgets that count it. On an update
// it is called with the old and the new pod, so a relabel reaches both the
// budget it left and the one it joined.
func budgetsOfPod(r client.Reader) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, pod client.Object) []reconcile.Request {
		var out []reconcile.Request
		for _, b := range budgetsSelecting(ctx, r, pod) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&b)})
		}
		return out
	}
}

// podMembershipChanged passes the pod events that can change a count:
// creations, deletions and label changes. A pod's status and its other
// metadata change often and count for nothing.
var podMembershipChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld == nil || e.ObjectNew == nil || !maps.Equal(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels())
	},
}

// consumerLeases remembers, per budget, the count its ConfigMap last
// carried, so that a reconcile that finds the same pods keeps the published
// observedAt (and writes nothing), and the count is renewed with a new
// observedAt when the pods change or the lease is due. Each change of the
// pods is a new membership generation, which the count and the shards
// written for it carry. It is safe for concurrent use; its zero value is
// ready.
type consumerLeases struct {
	mu       sync.Mutex
	byBudget map[types.NamespacedName]consumerLease
	// floor is, per budget, the highest membership generation published
	// before this lease began (read from the live ConfigMaps): a restarted
	// controller's generations go on from there, never back.
	floor map[types.NamespacedName]int64
}

type consumerLease struct {
	budget     types.UID
	tally      consumerTally
	observedAt time.Time
	generation int64
}

// countSpacingPerPod spaces a changed count's publications: every
// publication is one watch event to each counted pod, so a count of n pods
// is published again at most every n×2 ms (capped at the refresh), which
// bounds the count's egress to its size per 2 ms (about 410 KB/s for its
// 820 bytes) however large the fleet and fast the churn. Meanwhile the
// pods that left are removed from their shards at once and the pods that
// joined wait for the next count: fewer shares, never more.
const countSpacingPerPod = 2 * time.Millisecond

// countSpacing is how long after a publication a changed count of n pods
// waits to be published.
func countSpacing(n int32, refresh time.Duration) time.Duration {
	return min(time.Duration(n)*countSpacingPerPod, refresh)
}

// renew returns the count to publish for budget (whose UID is uid) and
// when it must be renewed: after refresh, or sooner when a changed count
// waits its spacing. countedAt is when the count began, read before
// listing, so that every pod object created before it is in the count: a
// published observedAt never claims more than the count covers. A count
// names its pods, so a pod whose object was counted before its process
// started is covered by that count: no renewal waits for young pods.
func (l *consumerLeases) renew(
	budget types.NamespacedName,
	uid types.UID,
	tally consumerTally,
	countedAt time.Time,
	refresh time.Duration,
) (policyconfig.Consumers, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	last, ok := l.byBudget[budget]
	age := countedAt.Sub(last.observedAt)
	changed := !ok || last.budget != uid || last.tally != tally
	spaced := ok && last.budget == uid && age >= 0 && age < countSpacing(max(tally.Count, last.tally.Count), refresh)
	switch {
	case changed && spaced:
		// The last count stays in force until its spacing has passed.
		return last.consumers(), countSpacing(max(tally.Count, last.tally.Count), refresh) - age
	case changed || age < 0 || age >= refresh:
		gen := last.generation
		if changed {
			gen = max(gen, l.floor[budget]) + 1
		}
		last = consumerLease{budget: uid, tally: tally, observedAt: countedAt, generation: gen}
		if l.byBudget == nil {
			l.byBudget = map[types.NamespacedName]consumerLease{}
		}
		l.byBudget[budget] = last
		age = 0
	}
	return last.consumers(), refresh - age
}

func (c consumerLease) consumers() policyconfig.Consumers {
	return policyconfig.Consumers{Count: c.tally.Count, ObservedAt: c.observedAt, Members: c.tally.Members}
}

// published is the membership generation of budget's count in force (0:
// none yet).
func (l *consumerLeases) published(budget types.NamespacedName) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byBudget[budget].generation
}

// raise makes budget's next generation at least gen+1: gen was published
// before this lease (the live count's and shards' highest).
func (l *consumerLeases) raise(budget types.NamespacedName, gen int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.floor == nil {
		l.floor = map[types.NamespacedName]int64{}
	}
	l.floor[budget] = max(l.floor[budget], gen)
}

// forget drops a deleted budget's lease.
func (l *consumerLeases) forget(budget types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.byBudget, budget)
	delete(l.floor, budget)
}
