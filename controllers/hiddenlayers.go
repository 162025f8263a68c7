package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/contract/limits"
)

// Istio's VirtualServices are read with the unstructured client, so that
// Istio is no Go dependency; the RBAC covers every version the controller
// reads. The controller watches the metadata of one CRD, Istio's, to start
// reading VirtualServices when Istio is installed.
// +kubebuilder:rbac:groups=networking.istio.io,resources=virtualservices,verbs=list;watch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=list;watch

// VirtualServiceSourcePrefix starts the status.hiddenLayers source of a
// VirtualService: "VirtualService/<name>".
const VirtualServiceSourcePrefix = VirtualServiceKind + "/"

// CRDServedRecheck is how often the controller looks again for Istio's
// VirtualService API while its CRD exists but is not served yet (it is
// being established). It never polls while the CRD is absent.
const CRDServedRecheck = 2 * time.Second

// VirtualServiceListTimeout bounds one list of VirtualServices.
const VirtualServiceListTimeout = 10 * time.Second

// crdMetadata is the metadata of a CustomResourceDefinition, all the CRD
// watch needs: whether Istio's exists.
func crdMetadata() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	return m
}

// virtualServiceCRDCache keeps the CRD watch to Istio's one CRD.
func virtualServiceCRDCache() (client.Object, cache.ByObject) {
	return crdMetadata(), cache.ByObject{Field: fields.OneTermEqualSelector("metadata.name", VirtualServiceCRDName)}
}

// VirtualServiceFinder detects the Istio VirtualServices that retry a
// policy's calls, from the manager's cache. Until Serve names the API
// version to read it detects nothing and reads nothing, so a cluster
// without Istio never sees a request for VirtualServices. It is safe for
// concurrent use.
type VirtualServiceFinder struct {
	// Reader lists VirtualServices; the manager's cache, which starts an
	// informer on the first list.
	Reader client.Reader
	served atomic.Pointer[schema.GroupVersionKind]
}

// Serve sets the served VirtualService version to read; nil stops reading.
func (f *VirtualServiceFinder) Serve(gvk *schema.GroupVersionKind) { f.served.Store(gvk) }

// Served is the VirtualService version read, nil when none.
func (f *VirtualServiceFinder) Served() *schema.GroupVersionKind { return f.served.Load() }

// list reads the VirtualServices of every namespace; none while none is
// served. The items are the cache's own (no deep copy): RoutingOf only
// reads them.
func (f *VirtualServiceFinder) list(ctx context.Context) ([]unstructured.Unstructured, error) {
	if f == nil {
		return nil, nil
	}
	gvk := f.Served()
	if gvk == nil {
		return nil, nil
	}
	// The first list waits for the informer to sync; where it cannot (RBAC
	// that lacks VirtualServices) the reconcile fails and is retried rather
	// than holding a worker.
	ctx, cancel := context.WithTimeout(ctx, VirtualServiceListTimeout)
	defer cancel()
	var list unstructured.UnstructuredList
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := f.Reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, nil // uninstalled between the check and the list; the CRD watch catches up
		}
		return nil, fmt.Errorf("listing VirtualServices: %w", err)
	}
	return list.Items, nil
}

// virtualServiceSource names a VirtualService in status.hiddenLayers:
// VirtualService/<name> in the policy's namespace, VirtualService/<ns>/<name>
// from another.
func virtualServiceSource(vs *unstructured.Unstructured, policyNamespace string) string {
	if vs.GetNamespace() == policyNamespace {
		return VirtualServiceSourcePrefix + vs.GetName()
	}
	return VirtualServiceSourcePrefix + vs.GetNamespace() + "/" + vs.GetName()
}

// DetectedLayers is the worst VirtualService, of any namespace, that
// routes p's target.service for the sidecars of p's namespace, when it
// retries: one in p's namespace, or one elsewhere that names the service
// by a host resolving to it and is exported to p's namespace (RoutingOf).
// A call passes one client sidecar, which applies one route of one
// VirtualService, so VirtualServices do not multiply with each other: the
// worst one is the hidden layer.
func (f *VirtualServiceFinder) DetectedLayers(ctx context.Context, p *v1.RetryPolicy) ([]v1.HiddenLayer, error) {
	items, err := f.list(ctx)
	if err != nil {
		return nil, err
	}
	var worst *v1.HiddenLayer
	for i := range items {
		r := RoutingOf(items[i].Object, p.Spec.Target.Service, p.Namespace)
		layer := v1.HiddenLayer{Source: virtualServiceSource(&items[i], p.Namespace), Attempts: r.Attempts}
		if r.Attempts > 1 && (worst == nil || layer.Attempts > worst.Attempts ||
			layer.Attempts == worst.Attempts && layer.Source < worst.Source) {
			worst = &layer
		}
	}
	if worst == nil {
		return nil, nil
	}
	return []v1.HiddenLayer{*worst}, nil
}

// policiesRouted maps a VirtualService to the policies whose target.service
// it routes for their namespace's sidecars: those of the namespaces it is
// exported to (every namespace when exportTo is unset or "*"). On an update
// controller-runtime maps the old and the new object both, so a
// VirtualService that stops routing a service re-checks that service's
// policies too. VirtualServices change seldom, and routing is decided by
// RoutingOf alone.
func (f *VirtualServiceFinder) policiesRouted(r client.Reader) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			return nil
		}
		var lists []v1.RetryPolicyList
		for _, ns := range exportedNamespaces(u) {
			var list v1.RetryPolicyList
			if err := r.List(ctx, &list, client.InNamespace(ns)); err != nil {
				log.FromContext(ctx).Error(err, "listing the policies a VirtualService may route", "virtualService", client.ObjectKeyFromObject(u))
				return nil
			}
			lists = append(lists, list)
		}
		var out []reconcile.Request
		for _, list := range lists {
			for i := range list.Items {
				p := &list.Items[i]
				if RoutingOf(u.Object, p.Spec.Target.Service, p.Namespace).Routes {
					out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(p)})
				}
			}
		}
		return out
	}
}

// exportedNamespaces lists the namespaces whose sidecars may see u, for
// client.InNamespace: "" (every namespace) when it is exported everywhere.
func exportedNamespaces(u *unstructured.Unstructured) []string {
	spec, _ := u.Object["spec"].(map[string]any)
	exportTo := stringsAt(spec, "exportTo")
	if len(exportTo) == 0 || containsAny(exportTo, "*") {
		return []string{""}
	}
	out := make([]string, 0, len(exportTo))
	for _, ns := range exportTo {
		if ns == "." {
			ns = u.GetNamespace()
		}
		if !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	return out
}

// detectingLookup is a policygraph.Lookup that detects VirtualServices.
type detectingLookup struct {
	policygraph.Lookup
	*VirtualServiceFinder
}

// detecting adds the reconciler's VirtualService detection to lk, when it
// has one.
func (r *RetryPolicyReconciler) detecting(lk policygraph.Lookup) policygraph.Lookup {
	if r.VirtualServices == nil {
		return lk
	}
	return detectingLookup{Lookup: lk, VirtualServiceFinder: r.VirtualServices}
}

// hiddenLayers is what status.hiddenLayers reports for p.
func (r *RetryPolicyReconciler) hiddenLayers(ctx context.Context, p *v1.RetryPolicy) ([]v1.HiddenLayer, error) {
	var d policygraph.LayerDetector
	if r.VirtualServices != nil {
		d = r.VirtualServices
	}
	hidden, err := policygraph.HiddenLayers(ctx, d, p)
	if len(hidden) > limits.MaxHiddenLayers {
		hidden = hidden[:limits.MaxHiddenLayers]
	}
	return hidden, err
}

// hiddenLayersSuffix names the hidden layers at the end of a message, "" when
// there are none.
func hiddenLayersSuffix(hidden []v1.HiddenLayer) string {
	if len(hidden) == 0 {
		return ""
	}
	parts := make([]string, len(hidden))
	for i, h := range hidden {
		parts[i] = fmt.Sprintf("%s makes %d attempts per call", h.Source, h.Attempts)
	}
	return "; hidden layers: " + strings.Join(parts, ", ")
}

// servedVirtualService is the newest VirtualService version of
// VirtualServiceVersions the API server serves, nil when none is. The
// manager's RESTMapper rediscovers the group when it does not know it, so
// an API installed after the manager started is found.
func servedVirtualService(mapper meta.RESTMapper) (*schema.GroupVersionKind, error) {
	mappings, err := mapper.RESTMappings(schema.GroupKind{Group: IstioNetworkingGroup, Kind: VirtualServiceKind})
	if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	served := make([]string, 0, len(mappings))
	for _, m := range mappings {
		served = append(served, m.GroupVersionKind.Version)
	}
	for _, v := range VirtualServiceVersions {
		if slices.Contains(served, v) {
			return &schema.GroupVersionKind{Group: IstioNetworkingGroup, Version: v, Kind: VirtualServiceKind}, nil
		}
	}
	return nil, nil
}

// virtualServiceWatch starts the RetryPolicy controller's watch on
// VirtualServices when Istio's CRD appears, and stops reading them when it
// goes. It reconciles the metadata of that one CRD, so a cluster without
// Istio costs one empty watch. It is safe for concurrent reconciles.
type virtualServiceWatch struct {
	cache    cache.Cache
	mapper   meta.RESTMapper
	finder   *VirtualServiceFinder
	policies controller.Controller
	reader   client.Reader
	// recheck feeds the RetryPolicy controller the policies to re-check
	// when reading stops.
	recheck chan event.GenericEvent

	mu       sync.Mutex
	watching *schema.GroupVersionKind
}

// Reconcile looks at Istio's CRD and starts or stops reading.
func (w *virtualServiceWatch) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	crd := crdMetadata()
	// A CRD being deleted still serves its objects while the API server
	// deletes them, and those deletions re-check the policies they routed:
	// reading stops when the CRD is gone.
	err := w.cache.Get(ctx, req.NamespacedName, crd)
	if apierrors.IsNotFound(err) {
		return ctrl.Result{}, w.stop(ctx)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	gvk, err := servedVirtualService(w.mapper)
	if err != nil {
		return ctrl.Result{}, err
	}
	if gvk == nil {
		return ctrl.Result{RequeueAfter: CRDServedRecheck}, nil // being established
	}
	if w.watching != nil && *w.watching == *gvk {
		return ctrl.Result{}, nil
	}
	if err := w.stop(ctx); err != nil {
		return ctrl.Result{}, err
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(*gvk)
	// Reading starts before the watch, so that the reconciles the watch's
	// first events cause count the VirtualServices.
	w.finder.Serve(gvk)
	if err := w.policies.Watch(source.Kind(w.cache, client.Object(u),
		handler.EnqueueRequestsFromMapFunc(w.finder.policiesRouted(w.reader)))); err != nil {
		w.finder.Serve(nil)
		return ctrl.Result{}, err
	}
	w.watching = gvk
	log.FromContext(ctx).Info("reading Istio VirtualServices as hidden retry layers", "version", gvk.Version)
	return ctrl.Result{}, nil
}

// stop stops reading VirtualServices, drops their informer, and re-checks
// every policy whose status still names a VirtualService. Deleting a CRD
// deletes its objects first, so these are the policies whose re-check a
// missed event would otherwise leave counting a VirtualService that is gone.
func (w *virtualServiceWatch) stop(ctx context.Context) error {
	if w.watching == nil {
		return nil
	}
	w.finder.Serve(nil)
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(*w.watching)
	w.watching = nil
	log.FromContext(ctx).Info("Istio's VirtualService API is gone; no longer reading VirtualServices")
	if err := w.cache.RemoveInformer(ctx, u); err != nil {
		return err
	}
	var list v1.RetryPolicyList
	if err := w.reader.List(ctx, &list); err != nil {
		return err
	}
	for i := range list.Items {
		p := &list.Items[i]
		if slices.ContainsFunc(p.Status.HiddenLayers, func(h v1.HiddenLayer) bool {
			return strings.HasPrefix(h.Source, VirtualServiceSourcePrefix)
		}) {
			select {
			case w.recheck <- event.GenericEvent{Object: p}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// setupVirtualServices gives the RetryPolicy controller its VirtualService
// finder and registers the controller that watches Istio's CRD.
func setupVirtualServices(mgr ctrl.Manager, policies controller.Controller, pr *RetryPolicyReconciler) error {
	pr.VirtualServices = &VirtualServiceFinder{Reader: mgr.GetCache()}
	w := &virtualServiceWatch{cache: mgr.GetCache(), mapper: mgr.GetRESTMapper(), finder: pr.VirtualServices,
		policies: policies, reader: mgr.GetClient(), recheck: make(chan event.GenericEvent)}
	if err := policies.Watch(source.Channel(w.recheck, &handler.EnqueueRequestForObject{})); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("istio-virtualservice-crd").
		For(crdMetadata(), builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetName() == VirtualServiceCRDName
		}))).
		Complete(w)
}
