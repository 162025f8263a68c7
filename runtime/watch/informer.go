package watch

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/retryguard/retryguard/runtime/policyconfig"
)

// Informer watches the published ConfigMaps of one namespace (the pod's)
// through a client-go informer that selects policyconfig.PolicyLabel. The
// pod needs get, list and watch on ConfigMaps in its namespace only.
type Informer struct {
	*store
	Client    kubernetes.Interface
	Namespace string
	Logger    *slog.Logger
}

// NewInformer watches namespace through client.
func NewInformer(client kubernetes.Interface, namespace string) *Informer {
	return &Informer{store: newStore(), Client: client, Namespace: namespace, Logger: slog.Default()}
}

// Start runs the informer until ctx ends and returns after its first sync.
func (i *Informer) Start(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(i.Client, 0,
		informers.WithNamespace(i.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = policyconfig.PolicyLabel }))
	inf := factory.Core().V1().ConfigMaps().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { i.upsert(o) },
		UpdateFunc: func(_, o any) { i.upsert(o) },
		DeleteFunc: func(o any) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if cm, ok := o.(*corev1.ConfigMap); ok {
				i.set(policyName(cm), nil)
			}
		},
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("watch: the ConfigMap informer for %s did not sync", i.Namespace)
	}
	return nil
}

func (i *Informer) upsert(o any) {
	cm, ok := o.(*corev1.ConfigMap)
	if !ok {
		return
	}
	name := policyName(cm)
	if err := i.apply(name, []byte(cm.Data[policyconfig.DataKey])); err != nil {
		i.Logger.Error("policy payload rejected; keeping the last good one", "policy", name, "configmap", cm.Name, "err", err)
	}
}

// policyName is the policy a ConfigMap publishes: its name without the prefix.
func policyName(cm *corev1.ConfigMap) string {
	name, _ := strings.CutPrefix(cm.Name, policyconfig.ConfigMapPrefix)
	return name
}
