package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/retryguard/retryguard/contract/policyconfig"
)

// publishedConfigMap is one ConfigMap the controllers publish: a policy's
// payload (retrypolicy-<name>) or a budget's count (retrybudget-<name>).
type publishedConfigMap struct {
	Name    string
	Labels  map[string]string
	DataKey string
	Data    []byte
	// Unhashed leaves out the content-hash annotation (informative only):
	// a count is delivered to every counted pod at every renewal, and its
	// hash, in the object and its managed fields, would be a sixth of it.
	Unhashed bool
	// Reader, when set, is where the live ConfigMap is read instead of the
	// cache (a budget's shards: see RetryBudgetReconciler.APIReader).
	Reader client.Reader
}

// publishConfigMap makes owner's ConfigMap hold want, owner as its
// controller. It compares the live ConfigMap with the desired one, never
// trusting the hash annotation, and writes only on a difference, by
// server-side apply under FieldOwner (forcing ownership back from whoever
// edited our fields). The live object is read from want.Reader if set,
// else from the label-filtered cache only: one the cache does not hold (a new owner's, or one whose
// managed-by label was removed) is applied without a read, since the apply
// both creates it and repairs it. A read by name from the API server first
// would cost every new policy a request and save no write.
func publishConfigMap(ctx context.Context, c client.Client, owner client.Object, scheme *runtime.Scheme, want publishedConfigMap) error {
	gvk, err := apiutil.GVKForObject(owner, scheme)
	if err != nil {
		return err
	}
	ref := metav1.OwnerReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: owner.GetName(), UID: owner.GetUID(),
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	annotations := map[string]string{policyconfig.ContentHashAnnotation: contentHash(string(want.Data))}
	if want.Unhashed {
		annotations = nil
	}
	var reader client.Reader = c
	if want.Reader != nil {
		reader = want.Reader
	}
	var live corev1.ConfigMap
	switch err := reader.Get(ctx, client.ObjectKey{Namespace: owner.GetNamespace(), Name: want.Name}, &live); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	case live.Data[want.DataKey] == string(want.Data) && isSubset(want.Labels, live.Labels) &&
		isSubset(annotations, live.Annotations) && controlledBy(&live, ref):
		return nil // nothing drifted: no write
	}
	cm := corev1ac.ConfigMap(want.Name, owner.GetNamespace()).
		WithLabels(want.Labels).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(ref.APIVersion).WithKind(ref.Kind).WithName(ref.Name).WithUID(ref.UID).
			WithController(true).WithBlockOwnerDeletion(true)).
		WithData(map[string]string{want.DataKey: string(want.Data)})
	if annotations != nil {
		cm.WithAnnotations(annotations)
	}
	return c.Apply(ctx, cm, client.FieldOwner(FieldOwner), client.ForceOwnership)
}

// controlledBy reports whether owner is cm's controller, as published.
func controlledBy(cm *corev1.ConfigMap, owner metav1.OwnerReference) bool {
	c := metav1.GetControllerOfNoCopy(cm)
	return c != nil && c.UID == owner.UID && c.APIVersion == owner.APIVersion && c.Kind == owner.Kind &&
		c.Name == owner.Name && c.BlockOwnerDeletion != nil && *c.BlockOwnerDeletion
}
