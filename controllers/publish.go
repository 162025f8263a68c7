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

	"github.com/retryguard/retryguard/runtime/policyconfig"
)

// publishedConfigMap is one ConfigMap the controllers publish: a policy's
// payload (retrypolicy-<name>) or a budget's count (retrybudget-<name>).
type publishedConfigMap struct {
	Name    string
	Labels  map[string]string
	DataKey string
	Data    []byte
}

// publishConfigMap makes owner's ConfigMap hold want, owner as its
// controller. It compares the live ConfigMap with the desired one, never
// trusting the hash annotation, and writes only on a difference, by
// server-side apply under FieldOwner (forcing ownership back from whoever
// edited our fields). The live object is looked up by name past the
// label-filtered cache (apiReader; nil reads through c), so that a
// ConfigMap whose managed-by label was removed is found and repaired.
func publishConfigMap(ctx context.Context, c client.Client, apiReader client.Reader, owner client.Object, scheme *runtime.Scheme,
	want publishedConfigMap) error {
	gvk, err := apiutil.GVKForObject(owner, scheme)
	if err != nil {
		return err
	}
	ref := metav1.OwnerReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: owner.GetName(), UID: owner.GetUID(),
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	annotations := map[string]string{policyconfig.ContentHashAnnotation: contentHash(string(want.Data))}
	live, err := liveConfigMap(ctx, c, apiReader, client.ObjectKey{Namespace: owner.GetNamespace(), Name: want.Name})
	if err != nil {
		return err
	}
	if live != nil && live.Data[want.DataKey] == string(want.Data) && isSubset(want.Labels, live.Labels) &&
		isSubset(annotations, live.Annotations) && controlledBy(live, ref) {
		return nil // nothing drifted: no write
	}
	cm := corev1ac.ConfigMap(want.Name, owner.GetNamespace()).
		WithLabels(want.Labels).
		WithAnnotations(annotations).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(ref.APIVersion).WithKind(ref.Kind).WithName(ref.Name).WithUID(ref.UID).
			WithController(true).WithBlockOwnerDeletion(true)).
		WithData(map[string]string{want.DataKey: string(want.Data)})
	return c.Apply(ctx, cm, client.FieldOwner(FieldOwner), client.ForceOwnership)
}

// liveConfigMap reads a published ConfigMap from the cache, or by name from
// the API server when the cache does not hold it (its label was removed, or
// the cache has not seen it yet); nil when it does not exist.
func liveConfigMap(ctx context.Context, c client.Reader, apiReader client.Reader, key client.ObjectKey) (*corev1.ConfigMap, error) {
	var cm corev1.ConfigMap
	err := c.Get(ctx, key, &cm)
	if apierrors.IsNotFound(err) {
		if apiReader == nil {
			apiReader = c
		}
		err = apiReader.Get(ctx, key, &cm)
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
