// Package celrules runs the CRDs' own CEL rules (x-kubernetes-validations)
// in Go, as the API server runs them: structural defaults first, then every
// rule. The admission webhook and kubectl retryguard lint call it, so that a
// rule written once, as a CEL marker, refuses the same objects everywhere.
package celrules

import (
	"context"
	"fmt"
	"regexp"
	"sync"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/config/crd"
)

// rules is one CRD version's schema and its compiled CEL rules.
type rules struct {
	schema    *structuralschema.Structural
	validator *cel.Validator
}

var (
	policyRules = sync.OnceValues(func() (*rules, error) { return load("policy.retryguard.io_retrypolicies.yaml") })
	budgetRules = sync.OnceValues(func() (*rules, error) { return load("policy.retryguard.io_retrybudgets.yaml") })
)

func load(file string) (*rules, error) {
	data, err := crd.Bases.ReadFile("bases/" + file)
	if err != nil {
		return nil, err
	}
	var c apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	for _, ver := range c.Spec.Versions {
		if ver.Name != v1.GroupVersion.Version || ver.Schema == nil {
			continue
		}
		var internal apiextensions.JSONSchemaProps
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(ver.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		s, err := structuralschema.NewStructural(&internal)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		return &rules{schema: s, validator: cel.NewValidator(s, true, celconfig.PerCallLimit)}, nil
	}
	return nil, fmt.Errorf("%s: no %s schema", file, v1.GroupVersion.Version)
}

// validate defaults a copy of obj as the API server would and runs every
// rule, with the API server's cost budget.
func (r *rules) validate(ctx context.Context, obj runtime.Object, kind string) field.ErrorList {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	u["apiVersion"], u["kind"] = v1.GroupVersion.String(), kind
	defaulting.Default(u, r.schema)
	errs, _ := r.validator.Validate(ctx, nil, r.schema, u, nil, celconfig.RuntimeCELCostBudget)
	return errs
}

// ValidateRetryPolicy runs the RetryPolicy CRD's CEL rules on p.
func ValidateRetryPolicy(ctx context.Context, p *v1.RetryPolicy) field.ErrorList {
	r, err := policyRules()
	if err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	return r.validate(ctx, p, "RetryPolicy")
}

// ValidateRetryBudget runs the RetryBudget CRD's CEL rules on b.
func ValidateRetryBudget(ctx context.Context, b *v1.RetryBudget) field.ErrorList {
	r, err := budgetRules()
	if err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	return r.validate(ctx, b, "RetryBudget")
}

// PolicySpecErrors is every single-object refusal of p: the Go validators'
// (v1alpha1.ValidateRetryPolicySpec) and the CRD's CEL rules', a refusal both
// give (the same field and code) once.
func PolicySpecErrors(ctx context.Context, p *v1.RetryPolicy) field.ErrorList {
	return union(v1.ValidateRetryPolicySpec(&p.Spec, field.NewPath("spec")), ValidateRetryPolicy(ctx, p))
}

// BudgetSpecErrors is PolicySpecErrors for a RetryBudget.
func BudgetSpecErrors(ctx context.Context, b *v1.RetryBudget) field.ErrorList {
	return union(v1.ValidateRetryBudgetSpec(&b.Spec, field.NewPath("spec")), ValidateRetryBudget(ctx, b))
}

func union(goErrs, celErrs field.ErrorList) field.ErrorList {
	type key struct{ field, code string }
	seen := make(map[key]bool, len(goErrs))
	for _, e := range goErrs {
		seen[key{e.Field, codePattern.FindString(e.Detail)}] = true
	}
	out := goErrs
	for _, e := range celErrs {
		if !seen[key{e.Field, codePattern.FindString(e.Detail)}] {
			out = append(out, e)
		}
	}
	return v1.SortErrors(out)
}

var codePattern = regexp.MustCompile(`\bERR_[A-Z_]+\b`)
