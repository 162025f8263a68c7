// Package informer serves published policies to a pod from a client-go
// ConfigMap informer over the pod's own namespace. It lives in a module of
// its own so that only applications that watch the API server take
// client-go into their module graph; the file watcher (runtime/watch.Files)
// needs nothing beyond the standard library.
package informer

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/runtime/budget"
	"github.com/retryguard/retryguard/runtime/watch"
)

// Informer watches the published ConfigMaps of one namespace (the pod's)
// through a client-go informer that selects, on the API server, what the
// operator publishes: the managed-by label with the operator's value and
// policyconfig.PolicyLabel (managedSelector). A ConfigMap without both never
// reaches the pod, so a tenant's unmanaged ConfigMaps cost it neither memory
// nor log lines (docs/security.md, tenant boundaries). The pod needs get,
// list and watch on ConfigMaps in its namespace only.
//
// It serves a ConfigMap only when the operator published it: the managed-by
// label with the operator's value, a controller owner reference to a
// RetryPolicy, the name retrypolicy-<policy.name> and a payload of the
// ConfigMap's own namespace. Anything else is ignored, logged and counted
// (Ignored); a deletion removes only the policy that ConfigMap supplied.
//
// A fleet budget's consumer count comes from a second informer, over the
// budgets' ConfigMaps (retrybudget-<name>, managedSelector of
// policyconfig.BudgetLabel), trusted the same way (controlled by the
// RetryBudget it counts for, by name and UID), and joined to every payload
// of that budget (policyconfig.Payload.Join): one count change is one watch
// event, whatever the number of policies on the budget. A payload of a
// counted budget whose count is missing, of another UID, or not trusted
// gives no share.
//
// A budget of another namespace B (budgetRef.namespace) is read from the
// copy the controller publishes here (retrysharedbudget-<B>.<name>): it is
// trusted by the managed-by label, a controller owner reference to a
// RetryPolicy (an owner reference cannot cross namespaces, so the budget's
// name and UID are checked in the count instead) and its name, which the
// ValidatingAdmissionPolicy reserves with the label for the operator. Any
// other count, a copy controlled by a RetryBudget or one named for another
// budget included, is ignored. Counts are held by budget key (B/name), so
// a local budget and a shared one of the same name stay apart.
//
// The count carries no members: they are in the budget's shards
// (retrymembers-<xx>-<name>, copies retrysharedmembers-<xx>-<B>.<name>,
// trusted as counts are), and a third informer watches, selected on the
// API server by policyconfig.ShardLabel, only the shard of this pod
// (PodUID), joined to the count by policyconfig.Count.WithShards: what a
// pod receives stays the same size however large the fleet. A pod without
// a UID watches no shard, and no count names it.
type Informer struct {
	store     *watch.Store
	Client    kubernetes.Interface
	Namespace string
	Logger    *slog.Logger
	// PodUID is this pod's UID ($POD_UID unless set before Start): the
	// shard of the members that may name it is the only one watched.
	PodUID string

	// mu orders every Set, so that a count and a payload applied at once
	// never leave a policy joined to an older count than the last one read.
	mu       sync.Mutex
	supplied map[string]string                    // ConfigMap name → the policy it supplies
	raw      map[string]*policyconfig.Payload     // policy → its payload as published
	counts   map[string]*policyconfig.Count       // budget key (namespace/name) → its count
	shards   map[string]*policyconfig.MemberShard // budget key → this pod's shard of its members
}

// New watches namespace through client.
func New(client kubernetes.Interface, namespace string) *Informer {
	return &Informer{store: watch.NewStore(), Client: client, Namespace: namespace, Logger: slog.Default(),
		supplied: map[string]string{}, raw: map[string]*policyconfig.Payload{}, counts: map[string]*policyconfig.Count{},
		shards: map[string]*policyconfig.MemberShard{}, PodUID: os.Getenv(budget.PodUIDEnv)}
}

var _ watch.Watcher = (*Informer)(nil)

// Policy returns the last good payload published under name.
func (i *Informer) Policy(name string) (*policyconfig.Payload, bool) { return i.store.Policy(name) }

// DeliveryBound is how late the informer may deliver a change: the consumer
// count's delivery bound, policyconfig.ConsumerCountDelivery, which its
// measured spread (BenchmarkInformerDeliverySpread, docs/benchmarks.md)
// stays well below. retry.New reads it: a Source that states no bound takes
// no share of a counted budget.
func (*Informer) DeliveryBound() time.Duration { return policyconfig.ConsumerCountDelivery }

// OnChange registers f to run after every applied change.
func (i *Informer) OnChange(f func(name string)) { i.store.OnChange(f) }

// Rejected counts payloads that did not parse since start.
func (i *Informer) Rejected() uint64 { return i.store.Rejected() }

// Ignored counts ConfigMaps that were not trusted since start.
func (i *Informer) Ignored() uint64 { return i.store.Ignored() }

// Start runs the informer until ctx ends and returns after its first sync.
// An unknown namespace ("") is refused: an informer reads it as every
// namespace, and a policy is served by its name alone, so another
// namespace's policy of the same name would be enforced (docs/security.md,
// tenant boundaries).
func (i *Informer) Start(ctx context.Context) error {
	if i.Namespace == "" {
		return fmt.Errorf("watch: the pod's namespace is unknown; set POD_NAMESPACE from the downward API (fieldRef metadata.namespace)")
	}
	// The shard and the counts first, so that the first view of a counted
	// budget's policies already has the count joined.
	type kind struct {
		label, selector string
		upsert, remove  func(*corev1.ConfigMap)
	}
	var kinds []kind
	if i.PodUID != "" {
		kinds = append(kinds, kind{policyconfig.MembersLabel, managedSelector(policyconfig.MembersLabel) + "," +
			policyconfig.ShardLabel + "=" + policyconfig.ShardOf(i.PodUID), i.upsertShard, i.removeShard})
	}
	kinds = append(kinds, kind{policyconfig.BudgetLabel, managedSelector(policyconfig.BudgetLabel), i.upsertCount, i.removeCount},
		kind{policyconfig.PolicyLabel, managedSelector(policyconfig.PolicyLabel), i.upsert, i.remove})
	var synced []cache.InformerSynced
	for _, w := range kinds {
		factory := informers.NewSharedInformerFactoryWithOptions(i.Client, 0,
			informers.WithNamespace(i.Namespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = w.selector }))
		inf := factory.Core().V1().ConfigMaps().Informer()
		reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { withConfigMap(o, w.label, w.upsert) },
			UpdateFunc: func(_, o any) { withConfigMap(o, w.label, w.upsert) },
			DeleteFunc: func(o any) {
				if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
					o = t.Obj
				}
				withConfigMap(o, w.label, w.remove)
			},
		})
		if err != nil {
			return err
		}
		factory.Start(ctx.Done())
		// The handler's own sync, not only the informer's: Start returns
		// once every initial ConfigMap has been applied.
		synced = append(synced, inf.HasSynced, reg.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("watch: the ConfigMap informers for %s did not sync", i.Namespace)
	}
	return nil
}

// withConfigMap passes o to f when it is a ConfigMap of the informer's
// kind (kindLabel): the API server selects no other, and a client that does
// not select (a fake) must not make one informer judge the other's.
func withConfigMap(o any, kindLabel string, f func(*corev1.ConfigMap)) {
	if cm, ok := o.(*corev1.ConfigMap); ok {
		if _, kind := cm.Labels[kindLabel]; kind {
			f(cm)
		}
	}
}

// managedSelector selects the ConfigMaps the operator publishes that carry
// kindLabel (policyconfig.PolicyLabel here; an informer over another kind of
// published ConfigMap passes that kind's label). The ValidatingAdmissionPolicy
// reserves the managed-by label for the operator, so the API server, not the
// pod, drops everything else.
func managedSelector(kindLabel string) string {
	return labels.SelectorFromSet(labels.Set{policyconfig.ManagedByLabel: policyconfig.ManagedByValue}).String() + "," + kindLabel
}

func (i *Informer) upsert(cm *corev1.ConfigMap) {
	log := i.Logger.With("configmap", cm.Namespace+"/"+cm.Name)
	if reason := untrustedMeta(cm, policyconfig.OwnerKind); reason != "" {
		i.ignore(log, reason)
		return
	}
	p, err := policyconfig.Parse([]byte(cm.Data[policyconfig.DataKey]))
	if err != nil {
		i.store.Reject()
		log.Error("policy payload rejected; keeping the last good one", "err", err)
		return
	}
	if reason := untrustedPayload(cm, p); reason != "" {
		i.ignore(log, reason)
		return
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	i.supplied[cm.Name] = p.Policy.Name
	i.raw[p.Policy.Name] = p
	i.store.Set(p.Policy.Name, p.Join(i.countOf(p)))
}

// remove forgets the policy cm supplied, and nothing else.
func (i *Informer) remove(cm *corev1.ConfigMap) {
	i.mu.Lock()
	defer i.mu.Unlock()
	name, ok := i.supplied[cm.Name]
	delete(i.supplied, cm.Name)
	if ok {
		delete(i.raw, name)
		i.store.Set(name, nil)
	}
}

// countOf is the count held for p's budget (nil when none); i.mu is held.
func (i *Informer) countOf(p *policyconfig.Payload) *policyconfig.Count {
	if p.Budget == nil {
		return nil
	}
	key := p.Budget.Key(p.Policy.Namespace)
	return i.counts[key].WithShards(i.shards[key])
}

// upsertCount reads a budget's count and joins it to the payloads of that
// budget. A count that does not parse, or that the operator did not
// publish, leaves the last good one: it goes stale, and then gives no share.
func (i *Informer) upsertCount(cm *corev1.ConfigMap) {
	log := i.Logger.With("configmap", cm.Namespace+"/"+cm.Name)
	if reason := untrustedMeta(cm, policyconfig.BudgetOwnerKind, policyconfig.SharedOwnerKind); reason != "" {
		i.ignore(log, reason)
		return
	}
	c, err := policyconfig.ParseCount([]byte(cm.Data[policyconfig.CountDataKey]))
	if err != nil {
		i.store.Reject()
		log.Error("consumer count rejected; keeping the last good one", "err", err)
		return
	}
	if reason := untrustedCount(cm, c); reason != "" {
		i.ignore(log, reason)
		return
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	key := policyconfig.BudgetKey(c.Namespace, c.Budget)
	i.counts[key] = c
	i.rejoin(key)
}

// removeCount forgets a deleted budget ConfigMap's count: the payloads of
// that budget then have none, and their pods no share. The held count is
// found by the name it was trusted under, since a copy's name is not the
// budget's.
func (i *Informer) removeCount(cm *corev1.ConfigMap) {
	i.mu.Lock()
	defer i.mu.Unlock()
	for key, c := range i.counts {
		if cm.Name == policyconfig.BudgetConfigMapNameIn(cm.Namespace, c.Namespace, c.Budget) {
			delete(i.counts, key)
			i.rejoin(key)
		}
	}
}

// rejoin serves again every payload of the budget whose key is key with
// the count now held; i.mu is held. The pod's payloads change here, and
// nothing is written to the API server.
func (i *Informer) rejoin(key string) {
	for name, p := range i.raw {
		if p.Budget != nil && p.Budget.Counted && p.Budget.Key(p.Policy.Namespace) == key {
			i.store.Set(name, p.Join(i.countOf(p)))
		}
	}
}

// upsertShard reads this pod's shard of a budget's members and joins it
// to the count. A shard that does not parse, that the operator did not
// publish, or of another shard than the pod's names no one: what the
// ConfigMap named before is forgotten (a shard has no freshness of its own,
// so a last good one kept would name a pod its update removed); a shard of
// another UID than the count's names no one either (WithShards).
func (i *Informer) upsertShard(cm *corev1.ConfigMap) {
	s := i.shardOf(cm)
	if s == nil {
		i.removeShard(cm) // what it named before, it names no more
		return
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	key := policyconfig.BudgetKey(s.Namespace, s.Budget)
	i.shards[key] = s
	i.rejoin(key)
}

// shardOf is cm as this pod's member shard of a budget, or nil, logged and
// counted, when it names no one: not the operator's, not parseable, not
// where its own name and owner put it, or another pod's shard.
func (i *Informer) shardOf(cm *corev1.ConfigMap) *policyconfig.MemberShard {
	log := i.Logger.With("configmap", cm.Namespace+"/"+cm.Name)
	if reason := untrustedMeta(cm, policyconfig.BudgetOwnerKind, policyconfig.SharedOwnerKind); reason != "" {
		i.ignore(log, reason)
		return nil
	}
	s, err := policyconfig.ParseMemberShard([]byte(cm.Data[policyconfig.MembersDataKey]))
	if err != nil {
		i.store.Reject()
		log.Error("member shard rejected; it names no one", "err", err)
		return nil
	}
	reason := untrustedOwner(cm, s.Namespace, s.Budget, s.UID)
	switch {
	case cm.Name != policyconfig.MemberShardConfigMapNameIn(cm.Namespace, s.Shard, s.Namespace, s.Budget):
		reason = fmt.Sprintf("shard %s of %s/%s in ConfigMap %s/%s", s.Shard, s.Namespace, s.Budget, cm.Namespace, cm.Name)
	case reason != "":
	case s.Shard != policyconfig.ShardOf(i.PodUID):
		reason = fmt.Sprintf("shard %s, not this pod's %s", s.Shard, policyconfig.ShardOf(i.PodUID))
	default:
		return s
	}
	i.ignore(log, reason)
	return nil
}

// removeShard forgets the shard cm held (deleted, or no longer one that
// names anyone): no count names this pod by it then.
func (i *Informer) removeShard(cm *corev1.ConfigMap) {
	i.mu.Lock()
	defer i.mu.Unlock()
	for key, s := range i.shards {
		if cm.Name == policyconfig.MemberShardConfigMapNameIn(cm.Namespace, s.Shard, s.Namespace, s.Budget) {
			delete(i.shards, key)
			i.rejoin(key)
		}
	}
}

func (i *Informer) ignore(log *slog.Logger, reason string) {
	i.store.Ignore()
	log.Warn("ConfigMap ignored: not published by the Retryguard operator", "reason", reason)
}

// untrustedMeta says why cm's metadata is not the operator's, publishing
// for an object of one of kinds ("" when it is); a count or shard's exact
// kind depends on its budget's namespace, read from its data
// (untrustedOwner).
func untrustedMeta(cm *corev1.ConfigMap, kinds ...string) string {
	if v := cm.Labels[policyconfig.ManagedByLabel]; v != policyconfig.ManagedByValue {
		return fmt.Sprintf("label %s is %q, not %q", policyconfig.ManagedByLabel, v, policyconfig.ManagedByValue)
	}
	owner := metav1.GetControllerOfNoCopy(cm)
	if owner == nil {
		return "no controller owner reference"
	}
	gv, err := schema.ParseGroupVersion(owner.APIVersion)
	want, _ := schema.ParseGroupVersion(policyconfig.OwnerAPIVersion)
	if err != nil || gv.Group != want.Group || !slices.Contains(kinds, owner.Kind) {
		return fmt.Sprintf("controlled by %s %s, not a %s", owner.APIVersion, owner.Kind, strings.Join(kinds, " or "))
	}
	return ""
}

// untrustedCount says why c may not be joined from cm ("" when it may):
// the ConfigMap's name and controller must be those of the budget's count
// in cm's namespace (its own, or a copy).
func untrustedCount(cm *corev1.ConfigMap, c *policyconfig.Count) string {
	if want := policyconfig.BudgetConfigMapNameIn(cm.Namespace, c.Namespace, c.Budget); cm.Name != want {
		return fmt.Sprintf("count of budget %s/%s in ConfigMap %q, not %q", c.Namespace, c.Budget, cm.Name, want)
	}
	return untrustedOwner(cm, c.Namespace, c.Budget, c.UID)
}

// untrustedOwner says why cm's controller (of the operator's group, by
// untrustedMeta) may not publish for the budget budgetNamespace/budget of
// uid ("" when it may): that RetryBudget in its own namespace; elsewhere a
// RetryPolicy, of any name, since the copy's owner cannot be the budget.
func untrustedOwner(cm *corev1.ConfigMap, budgetNamespace, budget, uid string) string {
	owner := metav1.GetControllerOfNoCopy(cm)
	switch kind := policyconfig.OwnerKindIn(cm.Namespace, budgetNamespace); {
	case owner.Kind != kind:
		return fmt.Sprintf("budget %s/%s in namespace %q controlled by a %s, not a %s", budgetNamespace, budget, cm.Namespace, owner.Kind, kind)
	case kind == policyconfig.BudgetOwnerKind && (owner.Name != budget || string(owner.UID) != uid):
		return fmt.Sprintf("controlled by RetryBudget %q (uid %q), not %q (uid %q)", owner.Name, owner.UID, budget, uid)
	}
	return ""
}

// untrustedPayload says why p may not be served from cm ("" when it may).
func untrustedPayload(cm *corev1.ConfigMap, p *policyconfig.Payload) string {
	switch {
	case p.Policy.Namespace != cm.Namespace:
		return fmt.Sprintf("payload of namespace %q in namespace %q", p.Policy.Namespace, cm.Namespace)
	case cm.Name != policyconfig.ConfigMapName(p.Policy.Name):
		return fmt.Sprintf("payload of policy %q in ConfigMap %q, not %q", p.Policy.Name, cm.Name, policyconfig.ConfigMapName(p.Policy.Name))
	case cm.OwnerReferences != nil && metav1.GetControllerOfNoCopy(cm).Name != p.Policy.Name:
		return fmt.Sprintf("controlled by RetryPolicy %q, not %q", metav1.GetControllerOfNoCopy(cm).Name, p.Policy.Name)
	}
	return ""
}
