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
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryguard/retryguard/api/policygraph"
	"github.com/retryguard/retryguard/api/policygraph/policyindex"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/contract/policyconfig"
)

// +kubebuilder:rbac:groups=policy.retryguard.io,resources=retrypolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=policy.retryguard.io,resources=retrypolicies/status,verbs=patch
// +kubebuilder:rbac:groups=policy.retryguard.io,resources=retrybudgets,verbs=get;list;watch
// ConfigMaps, least privilege: list and watch feed the label-filtered
// cache, where a policy's ConfigMap is read (one it does not hold, a new
// one or one whose label was removed, is applied unread); get and list
// read a fleet budget's member shards from the API server, since a shard
// write the cache has not seen must not hide a removal; patch is
// server-side apply; create because the API server
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
	Scheme   *runtime.Scheme
	Recorder events.EventRecorder
	Limits   policygraph.Limits
	// ResyncPeriod is how often a policy is reconciled again with nothing
	// changed, so that drift no event announced is repaired; 0 means
	// DefaultResyncPeriod.
	ResyncPeriod time.Duration
	// VirtualServices detects Istio VirtualServices as hidden layers; nil
	// detects none.
	VirtualServices *VirtualServiceFinder

	specs specVerdicts
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
			r.specs.forget(req.NamespacedName)
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
	facts.HiddenLayers = hidden
	enforcement, ready := evaluatePolicy(facts, p.Generation)
	leaf := facts.Verdict.Analysis.LeafAttempts()
	if err := r.publish(ctx, &p, BuildPayload(&p, budget, leaf, enforcement)); err != nil {
		meta.SetStatusCondition(&p.Status.Conditions, publishFailedCondition(err, p.Generation))
		return ctrl.Result{}, err
	}
	meta.SetStatusCondition(&p.Status.Conditions, ready)
	p.Status.ObservedGeneration = p.Generation
	p.Status.LeafAttempts = int32(min(leaf, math.MaxInt32))
	p.Status.HiddenLayers = hidden
	p.Status.WorstCaseDuration = ptr.To(v1.DurationOf(facts.Verdict.Schedule.Duration))
	p.Status.ConfigMapName = policyconfig.ConfigMapName(p.Name)
	// A fleet budget's count is the RetryBudgetReconciler's, in the
	// budget's own ConfigMap: a count change republishes no policy.
	return ctrl.Result{RequeueAfter: r.resyncPeriod()}, nil
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
	// The CRD's own rules, as the API server evaluates them, for a policy
	// admission was bypassed for (an older CRD, validation ratcheting).
	specErrs, err := r.specs.errors(ctx, p)
	if err != nil {
		return policyFacts{}, nil, err
	}
	// A new list: specErrs is remembered for later reconciles, and sorted in place here.
	facts := policyFacts{SpecErrors: v1.SortErrors(slices.Concat(specErrs, policygraph.SelectorErrors(p, spec)))}
	var budget *v1.RetryBudget
	if key, ok := policygraph.BudgetKeyOf(p); ok {
		facts.BudgetRef = key.Name
		if key.Namespace != p.Namespace {
			facts.BudgetRef = key.String()
		}
		var b v1.RetryBudget
		switch err := r.Get(ctx, key, &b); {
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

// publish makes the policy's ConfigMap hold the payload (publishConfigMap).
func (r *RetryPolicyReconciler) publish(ctx context.Context, p *v1.RetryPolicy, payload *policyconfig.Payload) error {
	data, err := policyconfig.Marshal(payload)
	if err != nil {
		return fmt.Errorf("encoding the payload: %w", err)
	}
	return publishConfigMap(ctx, r.Client, p, r.Scheme, publishedConfigMap{
		Name:    policyconfig.ConfigMapName(p.Name),
		Labels:  map[string]string{policyconfig.ManagedByLabel: policyconfig.ManagedByValue, policyconfig.PolicyLabel: labelValue(p.Name)},
		DataKey: policyconfig.DataKey, Data: data,
	})
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

// labelHashLength is how many hex digits of a name's SHA-256 stand for the
// part of a long name that a label value cannot hold.
const labelHashLength = 12

// labelValue keeps a policy name usable as a label value
// (validation.LabelValueMaxLength characters): a longer name keeps its head
// and ends in a hash of the whole, so that two long names stay apart.
func labelValue(name string) string {
	if len(name) <= validation.LabelValueMaxLength {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	head := validation.LabelValueMaxLength - len("-") - labelHashLength
	return name[:head] + "-" + hex.EncodeToString(sum[:])[:labelHashLength]
}

func isSubset(want, have map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
