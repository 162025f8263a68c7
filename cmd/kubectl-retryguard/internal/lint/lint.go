// Package lint admits manifests offline as the API server would: each
// RetryPolicy and RetryBudget is defaulted and judged by the CRD's schema and
// CEL rules with the API server's own code (internal/crdvalidation), as the
// API server does before any webhook, then, if it passes, by Retryguard's
// own admission webhook validators, reading the objects
// admitted before it from an in-memory store with the same field indexes as
// the manager's cache. Documents are admitted in order; a document naming
// the kind, namespace and name of an earlier admitted one is an update of it.
//
// The files are the whole world: lint knows nothing of the cluster, so a
// parent or a pool user kept elsewhere is not seen. A namespace the files
// do not declare is judged as the API server judges one created without
// labels: by the kubernetes.io/metadata.name label every namespace carries.
// Where that decides a Selector parent's consent, lint adds a note.
package lint

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	"sigs.k8s.io/yaml"

	"github.com/retryguard/retryguard/api/policygraph"
	"github.com/retryguard/retryguard/api/policygraph/policyindex"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/kube"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/manifest"
	"github.com/retryguard/retryguard/internal/crdvalidation"
	"github.com/retryguard/retryguard/webhooks"
)

// DefaultNamespace is where an object without metadata.namespace lands, as
// with kubectl and a context that names no namespace.
const DefaultNamespace = "default"

// Options configure a lint run.
type Options struct {
	// Limits are the platform limits the manager runs with (its
	// --max-leaf-attempts and --max-retry-percent flags).
	Limits policygraph.Limits
	// Namespace is given to objects without one.
	Namespace string
}

// DefaultOptions are the manager's defaults.
func DefaultOptions() Options {
	return Options{Limits: policygraph.DefaultLimits(), Namespace: DefaultNamespace}
}

// Verdict is the outcome of one document.
type Verdict string

const (
	// Created: the object is new and would be admitted.
	Created Verdict = "created"
	// Updated: the object replaces an earlier one and would be admitted.
	Updated Verdict = "updated"
	// Refused: the API server would refuse the object.
	Refused Verdict = "refused"
	// Skipped: not a kind lint checks; kept out of the verdict.
	Skipped Verdict = "skipped"
)

// Result is what the API server would answer to one document.
type Result struct {
	Doc manifest.Document
	// Namespace and Name identify the object (after defaulting the namespace).
	Namespace, Name string
	Verdict         Verdict
	// Err is the refusal, as the API server words it. Causes lists its
	// field errors when it is an Invalid answer.
	Err    error
	Causes []metav1.StatusCause
	// Warnings are the admission warnings the API server would relay.
	Warnings []string
	// Notes are lint's own remarks on what the files alone cannot show;
	// the API server would say nothing of them.
	Notes []string
}

// Object renders the result's object as Kind namespace/name.
func (r Result) Object() string {
	if r.Name == "" {
		return r.Doc.Kind
	}
	if r.Namespace == "" {
		return fmt.Sprintf("%s %s", r.Doc.Kind, r.Name)
	}
	return fmt.Sprintf("%s %s/%s", r.Doc.Kind, r.Namespace, r.Name)
}

// AnyRefused reports whether any result is a refusal.
func AnyRefused(results []Result) bool {
	for _, r := range results {
		if r.Verdict == Refused {
			return true
		}
	}
	return false
}

// Linter admits documents one after another. It is not safe for concurrent use.
type Linter struct {
	opts     Options
	store    client.Client
	policies *webhooks.RetryPolicyValidator
	budgets  *webhooks.RetryBudgetValidator
}

// New returns a Linter with an empty store.
func New(opts Options) *Linter {
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	b := fake.NewClientBuilder().WithScheme(kube.Scheme())
	for f, fn := range policyindex.IndexFuncs() {
		b = b.WithIndex(&v1.RetryPolicy{}, f, fn)
	}
	store := b.Build()
	return &Linter{
		opts:     opts,
		store:    store,
		policies: &webhooks.RetryPolicyValidator{Reader: store, Limits: opts.Limits},
		budgets:  &webhooks.RetryBudgetValidator{Limits: opts.Limits},
	}
}

// Run admits every document in order.
func Run(ctx context.Context, docs []manifest.Document, opts Options) ([]Result, error) {
	l := New(opts)
	out := make([]Result, 0, len(docs))
	for _, d := range docs {
		r, err := l.Admit(ctx, d)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

var (
	policyGVK    = v1.GroupVersion.WithKind("RetryPolicy")
	budgetGVK    = v1.GroupVersion.WithKind("RetryBudget")
	namespaceGVK = corev1.SchemeGroupVersion.WithKind("Namespace")
)

// Admit answers one document as the API server would and, when admitted,
// stores it for the documents after it. An error means the store failed,
// not that the document was refused.
func (l *Linter) Admit(ctx context.Context, d manifest.Document) (Result, error) {
	r := Result{Doc: d, Namespace: d.Namespace, Name: d.Name}
	if d.Err != nil {
		return r.refuse(d.Err), nil
	}
	gv, err := schema.ParseGroupVersion(d.APIVersion)
	if err != nil {
		return r.refuse(fmt.Errorf("apiVersion %q: %w", d.APIVersion, err)), nil
	}
	gvk := gv.WithKind(d.Kind)
	if r.Namespace == "" && gvk != namespaceGVK {
		r.Namespace = l.opts.Namespace // where kubectl would put it
	}
	switch {
	case gvk == policyGVK:
		return l.admitPolicy(ctx, r)
	case gvk == budgetGVK:
		return l.admitBudget(ctx, r)
	case gvk == namespaceGVK:
		return l.admitNamespace(ctx, r)
	case gv.Group == v1.GroupVersion.Group:
		return r.refuse(fmt.Errorf("no matches for kind %q in version %q", d.Kind, d.APIVersion)), nil
	default:
		r.Verdict = Skipped
		return r, nil
	}
}

func (r Result) refuse(err error) Result {
	r.Verdict, r.Err = Refused, err
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Details != nil {
		r.Causes = status.Status().Details.Causes
	}
	return r
}

// decode reads the document strictly: the API server refuses unknown and
// duplicate fields under kubectl's default --validate=strict.
func (r *Result) decode(into client.Object, ns string) error {
	if err := yaml.UnmarshalStrict(r.Doc.JSON, into); err != nil {
		return fmt.Errorf("strict decoding error: %w", err)
	}
	if into.GetNamespace() == "" && ns != "" {
		into.SetNamespace(ns)
	}
	r.Namespace, r.Name = into.GetNamespace(), into.GetName()
	if r.Name == "" {
		return fmt.Errorf("%s: metadata.name: Required value: name is required", r.Doc.Kind)
	}
	return nil
}

func (l *Linter) admitPolicy(ctx context.Context, r Result) (Result, error) {
	r, admitted, err := admit(ctx, l, r, func() *v1.RetryPolicy { return &v1.RetryPolicy{} }, policyGVK, l.policies)
	if err != nil || admitted == nil {
		return r, err
	}
	note, err := l.undeclaredNamespaceNote(ctx, admitted)
	if note != "" {
		r.Notes = append(r.Notes, note)
	}
	return r, err
}

// undeclaredNamespaceNote remarks on a policy whose parent, in another
// namespace, consents by Selector while the policy's own namespace is not
// in the files: its labels in the cluster decide, and lint cannot see them.
func (l *Linter) undeclaredNamespaceNote(ctx context.Context, p *v1.RetryPolicy) (string, error) {
	key, ok := policygraph.ParentKey(p)
	if !ok || key.Namespace == p.Namespace {
		return "", nil
	}
	lookup := policyindex.CacheLookup{Reader: l.store}
	parent, err := lookup.Get(ctx, key)
	if err != nil || parent == nil || policygraph.FromOf(parent) != v1.NamespacesFromSelector {
		return "", err
	}
	if _, known, err := lookup.NamespaceLabels(ctx, p.Namespace); known || err != nil {
		return "", err
	}
	return fmt.Sprintf("namespace %q is not in the files: lint judged RetryPolicy %q's selector by the namespace's name "+
		"label alone, as the API server would for a namespace created without labels; add the Namespace to the files "+
		"to check it with its labels", p.Namespace, key), nil
}

func (l *Linter) admitBudget(ctx context.Context, r Result) (Result, error) {
	r, _, err := admit(ctx, l, r, func() *v1.RetryBudget { return &v1.RetryBudget{} }, budgetGVK, l.budgets)
	return r, err
}

// admit takes one object through the API server's steps: decode strictly;
// prune, default, drop status and check the CRD's schema and CEL rules
// (crdvalidation.Admit); and only if they pass, call the admission
// webhook's validator as a create or an update. It returns the object the
// webhook judged, or nil when the CRD refused it.
func admit[T client.Object](ctx context.Context, l *Linter, r Result, newObj func() T, gvk schema.GroupVersionKind,
	v admission.Validator[T]) (Result, T, error) {
	var none T
	obj, old := newObj(), newObj()
	if err := r.decode(obj, l.opts.Namespace); err != nil {
		return r.refuse(err), none, nil
	}
	exists, err := l.get(ctx, obj, old)
	if err != nil {
		return r, none, err
	}
	// The CRD judges the document as written, not its decoding into Go
	// types: an absent field and a zero one differ to the schema.
	u := &unstructured.Unstructured{}
	if err := utiljson.Unmarshal(r.Doc.JSON, &u.Object); err != nil {
		return r.refuse(fmt.Errorf("strict decoding error: %w", err)), none, nil
	}
	u.SetNamespace(obj.GetNamespace())
	var oldU *unstructured.Unstructured
	if exists {
		if oldU, err = crdvalidation.Unstructured(old); err != nil {
			return r, none, err
		}
	}
	// The API server defaults before it validates, ignores status on a
	// resource with a status subresource, and stops at the CRD's rules:
	// a webhook never sees an object its schema refused.
	errs, err := crdvalidation.Admit(ctx, u, oldU)
	if err != nil {
		return r, none, err
	}
	if len(errs) > 0 {
		return r.refuse(apierrors.NewInvalid(gvk.GroupKind(), obj.GetName(), v1.SortErrors(errs))), none, nil
	}
	stored := newObj()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, stored); err != nil {
		return r, none, err
	}
	if exists {
		r.Warnings, err = v.ValidateUpdate(ctx, old, stored)
	} else {
		r.Warnings, err = v.ValidateCreate(ctx, stored)
	}
	if err != nil {
		return r.refuse(err), stored, nil
	}
	r, err = l.keep(ctx, r, stored, old, exists)
	return r, stored, err
}

// admitNamespace keeps namespaces (and their labels) for the rules that
// read them.
func (l *Linter) admitNamespace(ctx context.Context, r Result) (Result, error) {
	n := &corev1.Namespace{}
	if err := r.decode(n, ""); err != nil {
		return r.refuse(err), nil
	}
	old := &corev1.Namespace{}
	exists, err := l.get(ctx, n, old)
	if err != nil {
		return r, err
	}
	return l.keep(ctx, r, n, old, exists)
}

func (l *Linter) get(ctx context.Context, obj, into client.Object) (bool, error) {
	err := l.store.Get(ctx, client.ObjectKeyFromObject(obj), into)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

func (l *Linter) keep(ctx context.Context, r Result, obj, old client.Object, exists bool) (Result, error) {
	// What the server sets itself (as in objects read back with
	// `kubectl get -o yaml`) says nothing about the change; drop it.
	obj.SetResourceVersion("")
	obj.SetUID("")
	obj.SetManagedFields(nil)
	if exists {
		obj.SetResourceVersion(old.GetResourceVersion())
		r.Verdict = Updated
		return r, l.store.Update(ctx, obj)
	}
	r.Verdict = Created
	return r, l.store.Create(ctx, obj)
}

// Codes lists "field code" for each cause of a refusal, in order; a cause
// without a code keeps its message.
func (r Result) Codes() []string {
	var out []string
	for _, c := range r.Causes {
		out = append(out, c.Field+" "+CodeOf(c.Message))
	}
	return out
}

// CodeOf returns the ERR_ code in an error message, or "" when it has none.
func CodeOf(msg string) string {
	for _, word := range strings.FieldsFunc(msg, func(r rune) bool { return !(r == '_' || r >= 'A' && r <= 'Z') }) {
		if strings.HasPrefix(word, "ERR_") {
			return word
		}
	}
	return ""
}
