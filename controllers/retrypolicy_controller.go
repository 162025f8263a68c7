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
	"maps"
	"math"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/retryguard/retryguard/api/policygraph"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/runtime/policyconfig"
)

// +kubebuilder:rbac:groups=policy.retryguard.io,resources=retrypolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=policy.retryguard.io,resources=retrypolicies/status,verbs=patch
// +kubebuilder:rbac:groups=policy.retryguard.io,resources=retrybudgets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// RetryPolicyReconciler publishes each RetryPolicy to a ConfigMap named
// retrypolicy-<name>, with its budget resolved and an enforcement verdict,
// and keeps its status. It is safe for concurrent reconciles.
type RetryPolicyReconciler struct {
	client.Client
	Scheme   *runtime.Scheme
	Recorder events.EventRecorder
	Limits   policygraph.Limits
}

// Reconcile fetches the policy, observes its budget and call tree, publishes
// the verdict, and patches status once on the way out.
func (r *RetryPolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	var p v1.RetryPolicy
	if err := r.Get(ctx, req.NamespacedName, &p); err != nil {
		if apierrors.IsNotFound(err) {
			policyMetrics.forget(req.NamespacedName.String())
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := p.DeepCopy()
	defer func() { retErr = errors.Join(retErr, r.patchStatus(ctx, before, &p)) }()

	facts, budget, err := r.observe(ctx, &p)
	if err != nil {
		return ctrl.Result{}, err
	}
	enforcement, ready := evaluatePolicy(facts, p.Generation)
	leaf := facts.Verdict.Analysis.LeafAttempts()
	if err := r.publish(ctx, &p, BuildPayload(&p, budget, leaf, enforcement)); err != nil {
		meta.SetStatusCondition(&p.Status.Conditions, publishFailedCondition(err, p.Generation))
		return ctrl.Result{}, err
	}
	meta.SetStatusCondition(&p.Status.Conditions, ready)
	p.Status.ObservedGeneration = p.Generation
	p.Status.LeafAttempts = int32(min(leaf, math.MaxInt32))
	p.Status.WorstCaseDuration = &metav1.Duration{Duration: facts.Verdict.Schedule.Duration}
	p.Status.ConfigMapName = policyconfig.ConfigMapName(p.Name)
	return ctrl.Result{}, nil
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
	lookup := policygraph.CacheLookup{Reader: r.Client, Namespace: p.Namespace}
	verdict, err := policygraph.ValidateRetryPolicy(ctx, lookup, p, r.Limits, spec)
	facts.Verdict = verdict
	return facts, budget, err
}

// publish writes the payload to the policy's ConfigMap, only when its
// content hash, labels or owner changed.
func (r *RetryPolicyReconciler) publish(ctx context.Context, p *v1.RetryPolicy, payload *policyconfig.Payload) error {
	data, err := policyconfig.Marshal(payload)
	if err != nil {
		return fmt.Errorf("encoding the payload: %w", err)
	}
	hash := contentHash(string(data))
	want := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:        policyconfig.ConfigMapName(p.Name),
			Namespace:   p.Namespace,
			Labels:      map[string]string{policyconfig.ManagedByLabel: policyconfig.ManagedByValue, policyconfig.PolicyLabel: labelValue(p.Name)},
			Annotations: map[string]string{policyconfig.ContentHashAnnotation: hash},
		},
		Data: map[string]string{policyconfig.DataKey: string(data)},
	}
	if err := controllerutil.SetControllerReference(p, want, r.Scheme); err != nil {
		return err
	}
	var have corev1.ConfigMap
	err = r.Get(ctx, client.ObjectKeyFromObject(want), &have)
	if apierrors.IsNotFound(err) {
		if err := r.Create(ctx, want); apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("ConfigMap %s exists and is not managed by Retryguard", want.Name)
		} else if err != nil {
			return err
		}
		return nil
	}
	if err != nil {
		return err
	}
	// Hash what is there, not only what the annotation claims, so that a
	// hand-edited payload is repaired.
	if matchesHash(&have) && have.Annotations[policyconfig.ContentHashAnnotation] == hash &&
		isSubset(want.Labels, have.Labels) && equality.Semantic.DeepEqual(have.OwnerReferences, want.OwnerReferences) {
		return nil // nothing changed: no write
	}
	have.Labels = mergeMaps(have.Labels, want.Labels)
	have.Annotations = mergeMaps(have.Annotations, want.Annotations)
	have.OwnerReferences = want.OwnerReferences
	have.Data = want.Data
	return r.Update(ctx, &have)
}

// patchStatus writes status once per reconcile when it changed, counts the
// policy by reason, and records a Warning event on a turn to not Ready.
func (r *RetryPolicyReconciler) patchStatus(ctx context.Context, before, p *v1.RetryPolicy) error {
	now := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionReady)
	if now != nil {
		policyMetrics.set(client.ObjectKeyFromObject(p).String(), string(now.Status), now.Reason)
		was := meta.FindStatusCondition(before.Status.Conditions, v1.ConditionReady)
		if now.Status == metav1.ConditionFalse && (was == nil || was.Status != metav1.ConditionFalse || was.Reason != now.Reason) {
			r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, now.Reason, "Publish", "%s", now.Message)
		}
	}
	if equality.Semantic.DeepEqual(before.Status, p.Status) {
		return nil
	}
	return client.IgnoreNotFound(r.Status().Patch(ctx, p, client.MergeFrom(before)))
}

// contentHash is the hex SHA-256 of a payload, as the annotation holds it.
func contentHash(data string) string {
	sum := sha256.Sum256([]byte(data))
	return hex.EncodeToString(sum[:])
}

// matchesHash reports whether a ConfigMap's payload is what its hash
// annotation says: false after a hand edit.
func matchesHash(cm *corev1.ConfigMap) bool {
	return cm.Annotations[policyconfig.ContentHashAnnotation] == contentHash(cm.Data[policyconfig.DataKey])
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

func mergeMaps(dst, src map[string]string) map[string]string {
	if dst == nil {
		dst = map[string]string{}
	}
	maps.Copy(dst, src)
	return dst
}
