// Package controllers publishes accepted RetryPolicies to ConfigMaps that the
// in-pod runtime reads, re-checks the cross-object rules after admission (two
// admissions can race), and reports on each object whether it is in force.
package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/retryguard/retryguard/api/policygraph"
	"github.com/retryguard/retryguard/api/policygraph/policyindex"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/runtime/clock"
	"github.com/retryguard/retryguard/runtime/policyconfig"
)

// +kubebuilder:rbac:groups=policy.retryguard.io,resources=retrypolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=policy.retryguard.io,resources=retrypolicies/status,verbs=patch
// +kubebuilder:rbac:groups=policy.retryguard.io,resources=retrybudgets,verbs=get;list;watch
// ConfigMaps, least privilege: list and watch feed the label-filtered
// cache; get reads one by name past that cache (a ConfigMap whose label was
// removed); patch is server-side apply; create because the API server
// authorizes an apply that creates the object as a create. No update (apply
// replaces it) and no delete (the owner reference lets the garbage
// collector delete a policy's ConfigMap with it).
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch
// Setting blockOwnerDeletion on the owner reference needs update on the
// owner's finalizers where the OwnerReferencesPermissionEnforcement admission
// plugin is enabled (OpenShift, hardened clusters).
// +kubebuilder:rbac:groups=policy.retryguard.io,resources=retrypolicies/finalizers,verbs=update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// RetryPolicyReconciler publishes each RetryPolicy to a ConfigMap named
// retrypolicy-<name>, with its budget resolved and an enforcement verdict,
// and keeps its status. It is safe for concurrent reconciles.
type RetryPolicyReconciler struct {
	client.Client
	// APIReader reads a ConfigMap by name past the label-filtered cache; nil
	// uses Client.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	Limits    policygraph.Limits
	// ResyncPeriod is how often a policy is reconciled again with nothing
	// changed, so that drift no event announced is repaired; 0 means
	// DefaultResyncPeriod.
	ResyncPeriod time.Duration
	// VirtualServices detects Istio VirtualServices as hidden layers; nil
	// detects none.
	VirtualServices *VirtualServiceFinder
	// Clock dates consumer counts; nil is the wall clock.
	Clock clock.Clock
	// ConsumerCountRefresh is how often a policy whose budget has consumers
	// is republished with a new count; 0 means
	// policyconfig.ConsumerCountRefresh, which the pods' staleness bound
	// assumes.
	ConsumerCountRefresh time.Duration

	consumerLeases consumerLeases
}

// DefaultResyncPeriod is how often every policy is republished when nothing
// changed: drift that raised no event (an edit that kept the hash annotation
// consistent, a missed watch event) lasts at most this long.
const DefaultResyncPeriod = 10 * time.Minute

// eventActionPublish is the action of every event on a RetryPolicy.
const eventActionPublish = "Publish"

// FieldOwner is the server-side apply field manager of every ConfigMap the
// controller publishes.
const FieldOwner = "retryguard"

// Reconcile fetches the policy, observes its budget and call tree, publishes
// the verdict, and patches status once on the way out.
func (r *RetryPolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	var p v1.RetryPolicy
	if err := r.Get(ctx, req.NamespacedName, &p); err != nil {
		if apierrors.IsNotFound(err) {
			policyMetrics.forget(req.NamespacedName.String())
			r.consumerLeases.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := p.DeepCopy()
	defer func() { retErr = errors.Join(retErr, r.patchStatus(ctx, before, &p)) }()

	facts, budget, err := r.observe(ctx, &p)
	if err != nil {
		return ctrl.Result{}, err
	}
	hidden, err := r.hiddenLayers(ctx, &p)
	if err != nil {
		return ctrl.Result{}, err
	}
	enforcement, ready := evaluatePolicy(facts, p.Generation)
	nameHiddenLayers(&enforcement, &ready, hidden)
	leaf := facts.Verdict.Analysis.LeafAttempts()
	consumers, renewIn, err := r.consumerCount(ctx, &p, budget)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.publish(ctx, &p, BuildPayload(&p, budget, leaf, enforcement, consumers...)); err != nil {
		meta.SetStatusCondition(&p.Status.Conditions, publishFailedCondition(err, p.Generation))
		return ctrl.Result{}, err
	}
	meta.SetStatusCondition(&p.Status.Conditions, ready)
	p.Status.ObservedGeneration = p.Generation
	p.Status.LeafAttempts = int32(min(leaf, math.MaxInt32))
	p.Status.HiddenLayers = hidden
	p.Status.WorstCaseDuration = ptr.To(v1.DurationOf(facts.Verdict.Schedule.Duration))
	p.Status.ConfigMapName = policyconfig.ConfigMapName(p.Name)
	requeue := r.resyncPeriod()
	if consumers != nil {
		requeue = min(requeue, renewIn) // the count's lease
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

func (r *RetryPolicyReconciler) resyncPeriod() time.Duration {
	if r.ResyncPeriod > 0 {
		return r.ResyncPeriod
	}
	return DefaultResyncPeriod
}

// observe gathers everything the verdict depends on.
func (r *RetryPolicyReconciler) observe(ctx context.Context, p *v1.RetryPolicy) (policyFacts, *v1.RetryBudget, error) {
	spec := field.NewPath("spec")
	facts := policyFacts{SpecErrors: v1.ValidateRetryPolicySpec(&p.Spec, spec)}
	var budget *v1.RetryBudget
	if ref := p.Spec.BudgetRef; ref != nil {
		facts.BudgetRef = ref.Name
		var b v1.RetryBudget
		switch err := r.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: ref.Name}, &b); {
		case err == nil:
			facts.BudgetFound, budget = true, &b
		case !apierrors.IsNotFound(err):
			return facts, nil, err
		}
	}
	verdict, err := policygraph.ValidateRetryPolicy(ctx, r.detecting(policyindex.CacheLookup{Reader: r.Client}), p, r.Limits, spec)
	facts.Verdict = verdict
	return facts, budget, err
}

// publish makes the policy's ConfigMap hold the payload. It compares the
// live ConfigMap with the desired one, never trusting the hash annotation,
// and writes only on a difference, by server-side apply under FieldOwner
// (forcing ownership back from whoever edited our fields). The live object
// is looked up by name past the label-filtered cache, so that a ConfigMap
// whose managed-by label was removed is found and repaired.
func (r *RetryPolicyReconciler) publish(ctx context.Context, p *v1.RetryPolicy, payload *policyconfig.Payload) error {
	data, err := policyconfig.Marshal(payload)
	if err != nil {
		return fmt.Errorf("encoding the payload: %w", err)
	}
	gvk, err := apiutil.GVKForObject(p, r.Scheme)
	if err != nil {
		return err
	}
	name := policyconfig.ConfigMapName(p.Name)
	labels := map[string]string{policyconfig.ManagedByLabel: policyconfig.ManagedByValue, policyconfig.PolicyLabel: labelValue(p.Name)}
	annotations := map[string]string{policyconfig.ContentHashAnnotation: contentHash(string(data))}
	owner := metav1.OwnerReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: p.Name, UID: p.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}

	live, err := r.liveConfigMap(ctx, client.ObjectKey{Namespace: p.Namespace, Name: name})
	if err != nil {
		return err
	}
	if live != nil && live.Data[policyconfig.DataKey] == string(data) && isSubset(labels, live.Labels) &&
		isSubset(annotations, live.Annotations) && controlledBy(live, owner) {
		return nil // nothing drifted: no write
	}
	want := corev1ac.ConfigMap(name, p.Namespace).
		WithLabels(labels).
		WithAnnotations(annotations).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(owner.APIVersion).WithKind(owner.Kind).WithName(owner.Name).WithUID(owner.UID).
			WithController(true).WithBlockOwnerDeletion(true)).
		WithData(map[string]string{policyconfig.DataKey: string(data)})
	return r.Apply(ctx, want, client.FieldOwner(FieldOwner), client.ForceOwnership)
}

// liveConfigMap reads a published ConfigMap from the cache, or by name from
// the API server when the cache does not hold it (its label was removed, or
// the cache has not seen it yet); nil when it does not exist.
func (r *RetryPolicyReconciler) liveConfigMap(ctx context.Context, key client.ObjectKey) (*corev1.ConfigMap, error) {
	var cm corev1.ConfigMap
	err := r.Get(ctx, key, &cm)
	if apierrors.IsNotFound(err) {
		reader := r.APIReader
		if reader == nil {
			reader = r.Client
		}
		err = reader.Get(ctx, key, &cm)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &cm, nil
}

// controlledBy reports whether owner is cm's controller, as published.
func controlledBy(cm *corev1.ConfigMap, owner metav1.OwnerReference) bool {
	c := metav1.GetControllerOfNoCopy(cm)
	return c != nil && c.UID == owner.UID && c.APIVersion == owner.APIVersion && c.Kind == owner.Kind &&
		c.Name == owner.Name && c.BlockOwnerDeletion != nil && *c.BlockOwnerDeletion
}

// patchStatus writes status once per reconcile when it changed, with the
// kstatus conditions that follow from Ready, counts the policy by reason,
// and records an event on a change of verdict (policyEvent).
func (r *RetryPolicyReconciler) patchStatus(ctx context.Context, before, p *v1.RetryPolicy) error {
	if now := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionReady); now != nil {
		setProgressConditions(&p.Status.Conditions, *now)
		policyMetrics.set(client.ObjectKeyFromObject(p).String(), string(now.Status), now.Reason)
	}
	if equality.Semantic.DeepEqual(before.Status, p.Status) {
		return nil // an unchanged status calls for no event either
	}
	if err := r.Status().Patch(ctx, p, client.MergeFrom(before)); err != nil {
		// The next reconcile starts from the old status again, and records
		// the event then.
		return client.IgnoreNotFound(err)
	}
	if e := policyEvent(&before.Status, &p.Status); e != nil {
		r.Recorder.Eventf(p, nil, e.Type, e.Reason, eventActionPublish, "%s", e.Message)
	}
	return nil
}

// contentHash is the hex SHA-256 of a payload, as the annotation holds it.
func contentHash(data string) string {
	sum := sha256.Sum256([]byte(data))
	return hex.EncodeToString(sum[:])
}

// labelValue keeps a policy name usable as a label value (63 characters).
func labelValue(name string) string {
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:50] + "-" + hex.EncodeToString(sum[:])[:12]
}

func isSubset(want, have map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
