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
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/retryguard/retryguard/runtime/policyconfig"
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
type Informer struct {
	store     *watch.Store
	Client    kubernetes.Interface
	Namespace string
	Logger    *slog.Logger

	mu       sync.Mutex
	supplied map[string]string // ConfigMap name → the policy it supplies
}

// New watches namespace through client.
func New(client kubernetes.Interface, namespace string) *Informer {
	return &Informer{store: watch.NewStore(), Client: client, Namespace: namespace, Logger: slog.Default(), supplied: map[string]string{}}
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
	factory := informers.NewSharedInformerFactoryWithOptions(i.Client, 0,
		informers.WithNamespace(i.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = managedSelector(policyconfig.PolicyLabel) }))
	inf := factory.Core().V1().ConfigMaps().Informer()
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { i.upsert(o) },
		UpdateFunc: func(_, o any) { i.upsert(o) },
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if cm, ok := o.(*corev1.ConfigMap); ok {
				i.remove(cm)
			}
		},
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	// The handler's own sync, not only the informer's: Start returns once
	// every initial ConfigMap has been applied.
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced, reg.HasSynced) {
		return fmt.Errorf("watch: the ConfigMap informer for %s did not sync", i.Namespace)
	}
	return nil
}

// managedSelector selects the ConfigMaps the operator publishes that carry
// kindLabel (policyconfig.PolicyLabel here; an informer over another kind of
// published ConfigMap passes that kind's label). The ValidatingAdmissionPolicy
// reserves the managed-by label for the operator, so the API server, not the
// pod, drops everything else.
func managedSelector(kindLabel string) string {
	return labels.SelectorFromSet(labels.Set{policyconfig.ManagedByLabel: policyconfig.ManagedByValue}).String() + "," + kindLabel
}

func (i *Informer) upsert(o any) {
	cm, ok := o.(*corev1.ConfigMap)
	if !ok {
		return
	}
	log := i.Logger.With("configmap", cm.Namespace+"/"+cm.Name)
	if reason := untrustedMeta(cm); reason != "" {
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
	i.supplied[cm.Name] = p.Policy.Name
	i.mu.Unlock()
	i.store.Set(p.Policy.Name, p)
}

// remove forgets the policy cm supplied, and nothing else.
func (i *Informer) remove(cm *corev1.ConfigMap) {
	i.mu.Lock()
	name, ok := i.supplied[cm.Name]
	delete(i.supplied, cm.Name)
	i.mu.Unlock()
	if ok {
		i.store.Set(name, nil)
	}
}

func (i *Informer) ignore(log *slog.Logger, reason string) {
	i.store.Ignore()
	log.Warn("ConfigMap ignored: not published by the Retryguard operator", "reason", reason)
}

// untrustedMeta says why cm's metadata is not the operator's ("" when it is).
func untrustedMeta(cm *corev1.ConfigMap) string {
	if v := cm.Labels[policyconfig.ManagedByLabel]; v != policyconfig.ManagedByValue {
		return fmt.Sprintf("label %s is %q, not %q", policyconfig.ManagedByLabel, v, policyconfig.ManagedByValue)
	}
	owner := metav1.GetControllerOfNoCopy(cm)
	if owner == nil {
		return "no controller owner reference"
	}
	gv, err := schema.ParseGroupVersion(owner.APIVersion)
	want := schema.FromAPIVersionAndKind(policyconfig.OwnerAPIVersion, policyconfig.OwnerKind)
	if err != nil || gv.Group != want.Group || owner.Kind != want.Kind {
		return fmt.Sprintf("controlled by %s %s, not a %s", owner.APIVersion, owner.Kind, policyconfig.OwnerKind)
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
