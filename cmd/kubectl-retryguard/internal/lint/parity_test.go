package lint_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"

	"github.com/retryguard/retryguard/api/policygraph"
	"github.com/retryguard/retryguard/api/policygraph/policyindex"
	v1 "github.com/retryguard/retryguard/api/v1alpha1"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/lint"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/manifest"
	"github.com/retryguard/retryguard/internal/testenv"
)

// answer is what one write got: refused or not, the sorted "field code" of
// each cause, and the warnings.
type answer struct {
	Refused  bool
	Codes    []string
	Warnings []string
}

func (a answer) String() string {
	return fmt.Sprintf("refused=%v codes=%q warnings=%q", a.Refused, a.Codes, a.Warnings)
}

func sortedCodes(fieldCodes []string) []string {
	out := slices.Clone(fieldCodes)
	if out == nil {
		out = []string{}
	}
	slices.Sort(out)
	return out
}

// TestLintAgreesWithTheAPIServer applies every case of the admission tables
// to a real API server with the manager's webhooks, document by document in
// a namespace of its own, and lints the same documents as one multi-document
// file: each document must get the same verdict, the same (field, code)
// pairs and the same warnings.
func TestLintAgreesWithTheAPIServer(t *testing.T) {
	ctrl.SetLogger(logr.Discard())
	env, cfg := testenv.StartEnvironment(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	mgr, _, err := testenv.StartManaged(ctx, env, cfg, policygraph.DefaultLimits(), testenv.Features{Webhooks: true})
	if err != nil {
		t.Fatal(err)
	}
	warnings := &testenv.WarningRecorder{}
	userCfg := rest.CopyConfig(cfg)
	userCfg.WarningHandlerWithContext = warnings
	k8s, err := client.New(userCfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}

	// apply writes one object as kubectl apply would: create, or update the
	// stored one.
	apply := func(obj client.Object) answer {
		warnings.Take()
		existing := obj.DeepCopyObject().(client.Object)
		err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), existing)
		switch {
		case apierrors.IsNotFound(err):
			err = k8s.Create(ctx, obj)
		case err == nil:
			obj.SetResourceVersion(existing.GetResourceVersion())
			err = k8s.Update(ctx, obj)
		}
		a := answer{Refused: err != nil, Warnings: warnings.Take(), Codes: []string{}}
		if err != nil {
			var status apierrors.APIStatus
			if !errors.As(err, &status) || !apierrors.IsInvalid(err) {
				t.Fatalf("%s: not an Invalid answer: %v", obj.GetName(), err)
			}
			for _, c := range status.Status().Details.Causes {
				a.Codes = append(a.Codes, c.Field+" "+lint.CodeOf(c.Message))
			}
			a.Codes = sortedCodes(a.Codes)
		} else if err := testenv.Settle(ctx, mgr); err != nil {
			t.Fatal(err)
		} else if _, isNamespace := obj.(*corev1.Namespace); isNamespace {
			namespaceSettled(ctx, t, mgr, obj)
		}
		return a
	}

	cases := append(append([]parityCase{}, celCases...), webhookCases...)
	refusals := 0
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := fmt.Sprintf("parity-%d", i)
			objs := inNamespaces(tc.objs(t), ns)
			// The namespaces the case uses and does not declare exist on
			// the server, unlabelled, as kubectl create namespace makes them.
			for _, name := range undeclaredNamespaces(objs) {
				if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
					t.Fatal(err)
				}
			}
			var file strings.Builder
			var server []answer
			for _, o := range objs {
				file.WriteString("---\n")
				file.Write(manifestOf(t, env.Scheme, o))
				server = append(server, apply(o))
			}
			docs := manifest.Split("case.yaml", []byte(file.String()))
			results, err := lint.Run(ctx, docs, lint.DefaultOptions())
			if err != nil {
				t.Fatal(err)
			}
			if len(results) != len(server) {
				t.Fatalf("lint read %d documents, the server got %d", len(results), len(server))
			}
			for j, r := range results {
				got := answer{Refused: r.Verdict == lint.Refused, Codes: sortedCodes(r.Codes()), Warnings: r.Warnings}
				if got.Refused {
					refusals++
				}
				if got.Refused != server[j].Refused || !slices.Equal(got.Codes, server[j].Codes) || !slices.Equal(got.Warnings, server[j].Warnings) {
					t.Errorf("document %d (%s):\n  API server: %s\n  lint:       %s\n  lint said:  %v",
						j+1, r.Object(), server[j], got, r.Err)
				}
			}
		})
	}
	// A table whose objects all pass would agree trivially.
	if refusals < len(cases)/2 {
		t.Errorf("only %d refusals over %d cases: the table does not exercise the rules", refusals, len(cases))
	}
}

// inNamespaces places a case's objects: an object without a namespace goes
// to ns, and a namespace X the case names (of an object, a Namespace or a
// parentRef) becomes ns-X, so that cases never share a namespace.
func inNamespaces(objs []client.Object, ns string) []client.Object {
	mapped := func(x string) string { return ns + "-" + x }
	out := make([]client.Object, len(objs))
	for i, o := range objs {
		o = o.DeepCopyObject().(client.Object)
		switch obj := o.(type) {
		case *corev1.Namespace:
			obj.Name = mapped(obj.Name)
		case *v1.RetryPolicy:
			if ref := obj.Spec.Layer.ParentRef; ref != nil && ref.Namespace != nil {
				ref.Namespace = ptr.To(mapped(*ref.Namespace))
			}
		}
		if _, isNamespace := o.(*corev1.Namespace); !isNamespace {
			if o.GetNamespace() == "" {
				o.SetNamespace(ns)
			} else {
				o.SetNamespace(mapped(o.GetNamespace()))
			}
		}
		out[i] = o
	}
	return out
}

// undeclaredNamespaces lists the namespaces objs are in that no Namespace
// among them declares.
func undeclaredNamespaces(objs []client.Object) []string {
	declared := map[string]bool{}
	var out []string
	for _, o := range objs {
		if _, isNamespace := o.(*corev1.Namespace); isNamespace {
			declared[o.GetName()] = true
		}
	}
	for _, o := range objs {
		if ns := o.GetNamespace(); ns != "" && !declared[ns] {
			declared[ns] = true
			out = append(out, ns)
		}
	}
	return out
}

// namespaceSettled waits until the manager's cache, which reads namespaces
// as metadata for the consent rule, holds n at its stored version.
func namespaceSettled(ctx context.Context, t *testing.T, mgr ctrl.Manager, n client.Object) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		m := policyindex.NamespaceMetadata()
		if err := mgr.GetCache().Get(ctx, client.ObjectKeyFromObject(n), m); err != nil {
			return false, nil
		}
		return m.ResourceVersion == n.GetResourceVersion(), nil
	})
	if err != nil {
		t.Fatalf("namespace %s not in the manager's cache: %v", n.GetName(), err)
	}
}

// manifestOf renders obj as a YAML document with its apiVersion and kind.
func manifestOf(t *testing.T, s *runtime.Scheme, obj client.Object) []byte {
	t.Helper()
	gvk, err := apiutil.GVKForObject(obj, s)
	if err != nil {
		t.Fatal(err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	out, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestParityTableCoversTheAdmissionTables reads the webhook tests'
// sources and fails when one of their cases is missing here, so that a
// new admission case cannot escape the lint parity test.
func TestParityTableCoversTheAdmissionTables(t *testing.T) {
	have := map[string]bool{}
	for _, c := range append(append([]parityCase{}, celCases...), webhookCases...) {
		if have[c.name] {
			t.Errorf("case %q twice", c.name)
		}
		have[c.name] = true
	}
	var want []string
	// webhook_rules_test.go: every It("...") spec.
	want = append(want, stringsIn(t, testenv.Path("webhooks", "webhook_rules_test.go"), func(n ast.Node) (ast.Expr, bool) {
		if call, ok := n.(*ast.CallExpr); ok && len(call.Args) > 0 {
			if id, isID := call.Fun.(*ast.Ident); isID && id.Name == "It" {
				return call.Args[0], true
			}
		}
		return nil, false
	})...)
	if len(want) < 10 {
		t.Fatalf("found only %d admission cases; did the tables move?", len(want))
	}
	for _, name := range want {
		if !have[name] {
			t.Errorf("admission case %q has no lint parity case", name)
		}
	}
}

// stringsIn returns the string literals that pick selects in a Go file.
func stringsIn(t *testing.T, path string, pick func(ast.Node) (ast.Expr, bool)) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		if n == nil {
			return false
		}
		if e, ok := pick(n); ok {
			if lit, isLit := e.(*ast.BasicLit); isLit && lit.Kind == token.STRING {
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, s)
			}
		}
		return true
	})
	return out
}
