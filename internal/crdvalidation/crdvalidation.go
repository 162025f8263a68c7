// Package crdvalidation judges RetryPolicies and RetryBudgets offline with
// the API server's own code, so that every single-object rule lives once, in
// the CRD, and an offline verdict agrees with the API server's by
// construction. The CRDs are the generated ones (config/crd), converted as
// the apiextensions-apiserver converts them; an object is pruned and
// defaulted as the API server decodes it, and validated as its
// custom-resource strategy validates it: the OpenAPI schema, the embedded
// ObjectMeta, the list types, and, unless one of those already refused it,
// the x-kubernetes-validations (CEL, within the API server's cost budget).
// Metadata (names, labels) and admission webhooks are the caller's.
package crdvalidation

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"sync"

	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structurallisttype "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/common"
	"sigs.k8s.io/yaml"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/config/crd"
)

// kind is one served version of a CRD, prepared as the API server prepares it.
type kind struct {
	structural *structuralschema.Structural
	schema     apiservervalidation.SchemaValidator
	cel        *cel.Validator // nil when the schema has no x-kubernetes-validations
	hasStatus  bool
}

// kinds are the embedded CRDs' versions, by GroupVersionKind, read once.
var kinds = sync.OnceValues(func() (map[schema.GroupVersionKind]*kind, error) {
	out := map[schema.GroupVersionKind]*kind{}
	files, err := fs.Glob(crd.Bases, "bases/*.yaml")
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		raw, err := crd.Bases.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var def apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(raw, &def); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for i := range def.Spec.Versions {
			ver := &def.Spec.Versions[i]
			k, err := prepare(ver)
			if err != nil {
				return nil, fmt.Errorf("%s, version %s: %w", f, ver.Name, err)
			}
			out[schema.GroupVersionKind{Group: def.Spec.Group, Version: ver.Name, Kind: def.Spec.Names.Kind}] = k
		}
	}
	return out, nil
})

// prepare builds a version's validators as the apiextensions-apiserver's
// CR handler does: the v1 schema converted to the internal version, a
// structural schema with its defaults pruned, the OpenAPI schema validator,
// and the CEL validator with the API server's per-call limit.
func prepare(ver *apiextensionsv1.CustomResourceDefinitionVersion) (*kind, error) {
	if ver.Schema == nil {
		return nil, fmt.Errorf("no schema")
	}
	internal := &apiextensionsinternal.CustomResourceValidation{}
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(ver.Schema, internal, nil); err != nil {
		return nil, err
	}
	s, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
	if err != nil {
		return nil, err
	}
	if err := structuraldefaulting.PruneDefaults(s); err != nil {
		return nil, err
	}
	validator, _, err := apiservervalidation.NewSchemaValidator(internal.OpenAPIV3Schema)
	if err != nil {
		return nil, err
	}
	return &kind{
		structural: s,
		schema:     validator,
		cel:        cel.NewValidator(s, true, celconfig.PerCallLimit),
		hasStatus:  ver.Subresources != nil && ver.Subresources.Status != nil,
	}, nil
}

func kindOf(u *unstructured.Unstructured) (*kind, error) {
	all, err := kinds()
	if err != nil {
		return nil, err
	}
	gvk := u.GroupVersionKind()
	k, ok := all[gvk]
	if !ok {
		return nil, fmt.Errorf("no CustomResourceDefinition serves %s", gvk)
	}
	return k, nil
}

// Admit does to u what the API server does to a create (old nil) or to an
// update of old, before any admission webhook sees it: it prunes unknown
// fields, applies the schema's defaults, drops status (on an update, old's
// status stays), and validates. u is changed in place: afterwards it is the
// object as the API server would store it, less what the server sets itself.
// The error is not a verdict: u's kind has no CRD here.
func Admit(ctx context.Context, u, old *unstructured.Unstructured) (field.ErrorList, error) {
	k, err := kindOf(u)
	if err != nil {
		return nil, err
	}
	// Decoding: unknown fields pruned, nulls without a default dropped,
	// ObjectMeta coerced, then the defaults.
	structuralpruning.Prune(u.Object, k.structural, true)
	structuraldefaulting.PruneNonNullableNullsWithoutDefaults(u.Object, k.structural)
	if err := schemaobjectmeta.Coerce(nil, u.Object, k.structural, false, false); err != nil {
		return field.ErrorList{err}, nil
	}
	structuraldefaulting.Default(u.Object, k.structural)
	// The strategy's PrepareForCreate and PrepareForUpdate: with a status
	// subresource, a write of the main resource does not write status.
	if k.hasStatus {
		delete(u.Object, "status")
		if old != nil {
			if status, ok := old.Object["status"]; ok {
				u.Object["status"] = runtime.DeepCopyJSONValue(status)
			}
		}
	}
	if old == nil {
		return k.validateCreate(ctx, u), nil
	}
	return k.validateUpdate(ctx, u, old), nil
}

// validateCreate is customResourceStrategy.Validate, less metadata.
func (k *kind) validateCreate(ctx context.Context, u *unstructured.Unstructured) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, apiservervalidation.ValidateCustomResource(nil, u.Object, k.schema)...)
	errs = append(errs, schemaobjectmeta.Validate(ctx, nil, u.Object, k.structural, false)...)
	errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, k.structural, u.Object)...)
	if k.cel == nil {
		return errs
	}
	if blocked, err := blockingErr(errs); blocked {
		return append(errs, err)
	}
	celErrs, _ := k.cel.Validate(ctx, nil, k.structural, u.Object, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

// validateUpdate is customResourceStrategy.ValidateUpdate, less metadata,
// with validation ratcheting (on by default): an unchanged part of the
// object that breaks a rule does not fail the update.
func (k *kind) validateUpdate(ctx context.Context, u, old *unstructured.Unstructured) field.ErrorList {
	correlated := common.NewCorrelatedObject(u.Object, old.Object, &model.Structural{Structural: k.structural})
	var errs field.ErrorList
	errs = append(errs, apiservervalidation.ValidateCustomResourceUpdate(nil, u.Object, old.Object, k.schema,
		apiservervalidation.WithRatcheting(correlated))...)
	errs = append(errs, schemaobjectmeta.Validate(ctx, nil, u.Object, k.structural, false)...)
	if oldErrs := structurallisttype.ValidateListSetsAndMaps(nil, k.structural, old.Object); len(oldErrs) == 0 {
		errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, k.structural, u.Object)...)
	}
	if k.cel == nil {
		return errs
	}
	if blocked, err := blockingErr(errs); blocked {
		return append(errs, err)
	}
	celErrs, _ := k.cel.Validate(ctx, nil, k.structural, u.Object, old.Object, celconfig.RuntimeCELCostBudget, cel.WithRatcheting(correlated))
	return append(errs, celErrs...)
}

// blockingErr is the strategy's hasBlockingErr: a type, length, count,
// required or enum error stops the CEL rules, which would otherwise judge
// an object of the wrong shape, with one error saying so.
func blockingErr(errs field.ErrorList) (bool, *field.Error) {
	for _, err := range errs {
		switch err.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return true, field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; "+
				"correct the existing errors to complete validation")
		}
	}
	return false, nil
}

// Validate judges a RetryPolicy or RetryBudget as the API server judges a
// create of it (Admit), on a copy, with the spec's absent fields defaulted:
// for a controller that must not act on an object admission was bypassed
// for (an older CRD, validation ratcheting).
func Validate(ctx context.Context, obj runtime.Object) (field.ErrorList, error) {
	u, err := Unstructured(obj)
	if err != nil {
		return nil, err
	}
	return Admit(ctx, u, nil)
}

// Unstructured is a RetryPolicy or RetryBudget as a client sends it and
// the API server reads it: its JSON, decoded as unstructured, with its kind.
func Unstructured(obj runtime.Object) (*unstructured.Unstructured, error) {
	var gvk schema.GroupVersionKind
	switch obj.(type) {
	case *v1.RetryPolicy:
		gvk = v1.GroupVersion.WithKind("RetryPolicy")
	case *v1.RetryBudget:
		gvk = v1.GroupVersion.WithKind("RetryBudget")
	default:
		return nil, fmt.Errorf("crdvalidation: %T is not a kind of %s", obj, v1.GroupVersion)
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if err := utiljson.Unmarshal(raw, &u.Object); err != nil {
		return nil, err
	}
	u.SetGroupVersionKind(gvk)
	return u, nil
}
