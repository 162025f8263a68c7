package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryguard/retryguard/api/policygraph"
	"github.com/retryguard/retryguard/api/policygraph/policyindex"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/contract/limits"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/clock"
)

// +kubebuilder:rbac:groups=policy.retryguard.io,resources=retrybudgets/status,verbs=patch
// Setting blockOwnerDeletion on the count's owner reference, as on a
// policy's (see RetryPolicyReconciler).
// +kubebuilder:rbac:groups=policy.retryguard.io,resources=retrybudgets/finalizers,verbs=update

// RetryBudgetReconciler counts the policies that draw on each budget and,
// for a fleet budget, the pods that share it, publishes that count once in
// the budget's own ConfigMap (retrybudget-<name>, which every pod of the
// budget joins to its payloads), and reports whether the budget is in
// force. Publishing the budget's figures is the RetryPolicyReconciler's,
// which inlines them in every payload; a count change rewrites no payload.
// It is safe for concurrent reconciles.
type RetryBudgetReconciler struct {
	client.Client
	Scheme *runtime.Scheme
	Limits policygraph.Limits
	// Recorder records the events of budgetEvents; nil records none.
	Recorder events.EventRecorder
	// Clock dates consumer counts; nil is the wall clock.
	Clock clock.Clock
	// ConsumerCountRefresh is how often a fleet budget's count is published
	// again with a new observedAt; 0 means policyconfig.ConsumerCountRefresh,
	// which the pods' staleness bound assumes.
	ConsumerCountRefresh time.Duration
	// APIReader reads the member shards from the API server before their
	// writes are decided: the cache may not yet hold a shard this
	// controller wrote, and a stale shard equal to the one wanted would
	// keep a removed pod named, with a share nobody counts. nil reads
	// through Client (tests without a cache).
	APIReader client.Reader

	leases consumerLeases
}

// Reconcile fetches the budget, counts its users, publishes a fleet
// budget's count, and patches status once.
func (r *RetryBudgetReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	var b v1.RetryBudget
	if err := r.Get(ctx, req.NamespacedName, &b); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		r.leases.forget(req.NamespacedName) // the garbage collector deletes its own ConfigMaps
		return ctrl.Result{}, deleteStaleCopies(ctx, r.Client, req.NamespacedName, nil)
	}
	before := b.DeepCopy()
	defer func() {
		r.reportStatus(before, &b)
		if !equality.Semantic.DeepEqual(before.Status, b.Status) {
			retErr = errors.Join(retErr, client.IgnoreNotFound(r.Status().Patch(ctx, &b, client.MergeFrom(before))))
		}
	}()

	var users v1.RetryPolicyList
	if err := r.List(ctx, &users, client.MatchingFields{policyindex.IndexBudgetRef: policyindex.BudgetRefKey(req.NamespacedName)}); err != nil {
		return ctrl.Result{}, err
	}
	b.Status.PolicyCount = int32(len(users.Items))
	// No count for a budget without consumers, nor for a selector that
	// escaped validation (evaluateBudget reports it): its payloads are not
	// Counted, and its pods take the conservative share. A failed count or
	// publication keeps the last one, which goes stale: no share.
	var consumers *int32
	var res ctrl.Result
	if sel, err := consumerSelector(&b); err == nil && sel != nil {
		now := r.now().UTC()
		all, namespaces, err := admittedNamespaces(ctx, r.Client, &b)
		if err != nil {
			return ctrl.Result{}, err
		}
		tally, err := countConsumers(ctx, r.Client, &b, sel, all, namespaces)
		if err != nil {
			return ctrl.Result{}, err
		}
		consumers = &tally.Count
		refresh := r.ConsumerCountRefresh
		if refresh <= 0 {
			refresh = policyconfig.ConsumerCountRefresh
		}
		targets := countTargets(ctx, r.Client, &b, users.Items)
		live := make([]map[string]*policyconfig.MemberShard, len(targets))
		for i, t := range targets {
			if live[i], err = r.liveMembers(ctx, &b, t); err != nil {
				return ctrl.Result{}, err
			}
		}
		c, due := r.leases.renew(req.NamespacedName, b.UID, tally, now, refresh)
		if err := r.publishMembers(ctx, &b, targets, live, tally, c, r.leases.published(req.NamespacedName)); err != nil {
			return ctrl.Result{}, err
		}
		res.RequeueAfter = due // the count's lease
	} else if err := deleteStaleCopies(ctx, r.Client, req.NamespacedName, nil); err != nil {
		return ctrl.Result{}, err
	}
	b.Status.Consumers = consumers
	meta.SetStatusCondition(&b.Status.Conditions, evaluateBudget(&b, b.Status.PolicyCount, r.Limits))
	b.Status.ObservedGeneration = b.Generation
	return res, nil
}

// liveMembers reads from the API server the budget's published shards of its
// members in t's namespace (those of this budget's UID; shard → shard), and
// raises the lease's generations above every one published, the count's
// included, so that a restarted controller never publishes a generation
// again.
func (r *RetryBudgetReconciler) liveMembers(ctx context.Context, b *v1.RetryBudget, t countTarget) (map[string]*policyconfig.MemberShard, error) {
	var cms corev1.ConfigMapList
	if err := r.shardReader().List(ctx, &cms, client.InNamespace(t.Namespace), client.MatchingLabels{
		policyconfig.ManagedByLabel: policyconfig.ManagedByValue, policyconfig.MembersLabel: labelValue(b.Name)}); err != nil {
		return nil, fmt.Errorf("reading the member shards of RetryBudget %s in namespace %s: %w", b.Name, t.Namespace, err)
	}
	key := client.ObjectKeyFromObject(b)
	live := map[string]*policyconfig.MemberShard{}
	for i := range cms.Items {
		s, err := policyconfig.ParseMemberShard([]byte(cms.Items[i].Data[policyconfig.MembersDataKey]))
		if err != nil || s.UID != string(b.UID) || s.Budget != b.Name || s.Namespace != b.Namespace ||
			cms.Items[i].Name != policyconfig.MemberShardConfigMapNameIn(t.Namespace, s.Shard, b.Namespace, b.Name) {
			continue // rewritten below if its shard names anyone
		}
		live[s.Shard] = s
		r.leases.raise(key, s.Generation)
	}
	var cm corev1.ConfigMap
	if err := r.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: policyconfig.BudgetConfigMapNameIn(t.Namespace, b.Namespace, b.Name)}, &cm); err == nil {
		if c, err := policyconfig.ParseCount([]byte(cm.Data[policyconfig.CountDataKey])); err == nil && c.UID == string(b.UID) {
			r.leases.raise(key, c.MembersGeneration)
		}
	}
	return live, nil
}

// publishMembers publishes the count in force (c, of membership generation
// gen) and the shards of its members in every target namespace, in the
// order that keeps the delivery bound across all of them: first, in every
// namespace, the shards that lose members (the pods gone from counted,
// each shard keeping its generation); then the stale copies go (a
// namespace no longer admitted, or with no policy on the budget, names no
// one); then the count, everywhere; then, everywhere, the shards that gain
// members, at the count's generation. A pod therefore never reads more pods
// named, in any namespace, than a count it may read counts, and a pod added
// to a shard before its count arrives is named by a shard newer than its
// count, which gives no share. A failure before the counts stops there
// (the last counts stay, and go stale: fewer shares, never more); a
// failure after them is joined, and the other namespaces still get theirs.
// Each shard is written only when its own members change; the pods of the
// others receive nothing.
func (r *RetryBudgetReconciler) publishMembers(ctx context.Context, b *v1.RetryBudget, targets []countTarget,
	live []map[string]*policyconfig.MemberShard, counted consumerTally, c policyconfig.Consumers, gen int64) error {
	desired, inForce := policyconfig.ShardMembers(counted.Members), policyconfig.ShardMembers(c.Members)
	fits := shardNamesFit(b.Name) // else evaluateBudget reports NameTooLongToCount
	currents := make([]map[string]string, len(targets))
	shardSets := make([]map[string]bool, len(targets))
	for i, t := range targets {
		shards := map[string]bool{}
		for _, m := range []map[string]string{desired, inForce} {
			for s := range m {
				shards[s] = true
			}
		}
		current := map[string]string{}
		for s, l := range live[i] {
			shards[s], current[s] = true, l.Members
		}
		for s := range shards {
			if keep := policyconfig.IntersectMembers(current[s], desired[s]); live[i][s] != nil && keep != current[s] && fits {
				if err := r.publishShard(ctx, b, t, s, live[i][s].Generation, keep); err != nil {
					return err
				}
				current[s] = keep
			}
		}
		currents[i], shardSets[i] = current, shards
	}
	keep := map[string]bool{}
	for _, t := range targets {
		keep[t.Namespace] = true
	}
	if err := deleteStaleCopies(ctx, r.Client, client.ObjectKeyFromObject(b), keep); err != nil {
		return err
	}
	c.Members = "" // in the shards
	var errs []error
	published := make([]bool, len(targets))
	for i, t := range targets {
		if err := r.publishCount(ctx, b, t, c, gen); err != nil {
			errs = append(errs, err)
			continue
		}
		published[i] = true
	}
	for i, t := range targets {
		if !published[i] {
			continue // its shards wait for its count
		}
		for s := range shardSets[i] {
			target := policyconfig.IntersectMembers(inForce[s], desired[s])
			if target != currents[i][s] && fits {
				if err := r.publishShard(ctx, b, t, s, gen, target); err != nil {
					errs = append(errs, err)
					break
				}
			}
		}
	}
	return errors.Join(errs...)
}

// maxCountedBudgetName is the longest name of a fleet budget whose member
// shards' ConfigMap names stay within the object name limit.
var maxCountedBudgetName = limits.MaxObjectNameLength - len(policyconfig.MemberShardConfigMapName("00", ""))

// shardNamesFit reports whether a budget named name can publish its member shards.
func shardNamesFit(name string) bool { return len(name) <= maxCountedBudgetName }

// publishShard makes the budget's shard s in t's namespace name members, as
// written for membership generation gen.
func (r *RetryBudgetReconciler) publishShard(ctx context.Context, b *v1.RetryBudget, t countTarget, s string, gen int64, members string) error {
	data, err := policyconfig.MarshalMemberShard(&policyconfig.MemberShard{SchemaVersion: policyconfig.MembersSchemaVersion,
		Namespace: b.Namespace, Budget: b.Name, UID: string(b.UID), Shard: s, Generation: gen, Members: members})
	if err != nil {
		return fmt.Errorf("encoding the member shard %s: %w", s, err)
	}
	return publishConfigMap(ctx, r.Client, t.Owner, r.scheme(), publishedConfigMap{
		Name: policyconfig.MemberShardConfigMapNameIn(t.Namespace, s, b.Namespace, b.Name),
		Labels: map[string]string{policyconfig.ManagedByLabel: policyconfig.ManagedByValue, policyconfig.MembersLabel: labelValue(b.Name),
			policyconfig.ShardLabel: s},
		DataKey: policyconfig.MembersDataKey, Data: data, Unhashed: true, Reader: r.shardReader(),
	})
}

// shardReader is where the shards are read before a write is decided.
func (r *RetryBudgetReconciler) shardReader() client.Reader {
	if r.APIReader == nil {
		return r.Client
	}
	return r.APIReader
}

// publishCount makes the budget's ConfigMap in t's namespace hold its
// count, of membership generation gen, its members being in the shards.
func (r *RetryBudgetReconciler) publishCount(ctx context.Context, b *v1.RetryBudget, t countTarget, c policyconfig.Consumers, gen int64) error {
	data, err := policyconfig.MarshalCount(&policyconfig.Count{SchemaVersion: policyconfig.CountSchemaVersion,
		Namespace: b.Namespace, Budget: b.Name, UID: string(b.UID), MembersGeneration: gen, Consumers: c})
	if err != nil {
		return fmt.Errorf("encoding the consumer count: %w", err)
	}
	return publishConfigMap(ctx, r.Client, t.Owner, r.scheme(), publishedConfigMap{
		Name:    policyconfig.BudgetConfigMapNameIn(t.Namespace, b.Namespace, b.Name),
		Labels:  map[string]string{policyconfig.ManagedByLabel: policyconfig.ManagedByValue, policyconfig.BudgetLabel: labelValue(b.Name)},
		DataKey: policyconfig.CountDataKey, Data: data, Unhashed: true,
	})
}

func (r *RetryBudgetReconciler) scheme() *runtime.Scheme {
	if r.Scheme == nil {
		return r.Client.Scheme()
	}
	return r.Scheme
}

func (r *RetryBudgetReconciler) now() time.Time {
	if r.Clock == nil {
		return clock.Real{}.Now()
	}
	return r.Clock.Now()
}
