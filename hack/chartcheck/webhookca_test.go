package chartcheck

import (
	"context"
	"encoding/base64"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryguard/retryguard/contract/codes"
)

// caOnly is what the refusal of the webhook-ca-only policy says.
const caOnly = "may change only webhooks[*].clientConfig.caBundle"

// hookChange is one change to every webhook of a configuration.
type hookChange func(hook object)

// In cert-rotation mode the manager's ServiceAccount may update its own
// webhook configurations, to inject its CA. The chart's
// ValidatingAdmissionPolicy lets it change their caBundle and nothing else:
// as that ServiceAccount (impersonated, with the chart's RBAC) the first
// injection and a rotation pass, as cert-controller writes them (an update
// of the object it read, caBundle set on every webhook); a change of the
// service, a URL instead, the rules, the failurePolicy or any other field of
// a webhook, a webhook added, removed or moved, or the object's labels, is
// refused, alone or with a caBundle. An administrator may still change them.
func TestChartAdmissionPolicyLetsTheManagerChangeOnlyTheCABundle(t *testing.T) {
	_, cfg, admin := startEnv(t, false)
	ctx := context.Background()
	byKind := mustTemplate(t, "webhook.certManager.enabled=false")
	createNamespace(ctx, t, admin, namespace)
	create(ctx, t, admin, byKind["ServiceAccount"]...)
	create(ctx, t, admin, byName(byKind["ClusterRole"], "rg-retryguard-cert-rotation"), byName(byKind["ClusterRoleBinding"], "rg-retryguard-cert-rotation"),
		byName(byKind["ValidatingAdmissionPolicy"], "rg-retryguard-webhook-ca-only"),
		byName(byKind["ValidatingAdmissionPolicyBinding"], "rg-retryguard-webhook-ca-only"))
	create(ctx, t, admin, byKind["ValidatingWebhookConfiguration"]...)
	create(ctx, t, admin, byKind["MutatingWebhookConfiguration"]...)
	user, groups := serviceAccountUser(namespace, "rg-retryguard")
	manager := as(t, impersonating(cfg, user, groups...))
	setField := func(value any, path ...string) hookChange {
		return func(hook object) {
			if err := unstructured.SetNestedField(hook, value, path...); err != nil {
				t.Fatal(err)
			}
		}
	}

	for _, kind := range []string{"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"} {
		name := byKind[kind][0]["metadata"].(object)["name"].(string)
		get := func() *unstructured.Unstructured {
			t.Helper()
			u := &unstructured.Unstructured{}
			u.SetAPIVersion("admissionregistration.k8s.io/v1")
			u.SetKind(kind)
			if err := admin.Get(ctx, client.ObjectKey{Name: name}, u); err != nil {
				t.Fatal(err)
			}
			return u
		}
		// update reads the configuration, changes every webhook and the
		// object as told, and writes it as c.
		update := func(c client.Client, obj func(*unstructured.Unstructured), changes ...hookChange) error {
			u := get()
			hooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
			for _, h := range hooks {
				for _, change := range changes {
					change(h.(object))
				}
			}
			if err := unstructured.SetNestedSlice(u.Object, hooks, "webhooks"); err != nil {
				t.Fatal(err)
			}
			if obj != nil {
				obj(u)
			}
			return c.Update(ctx, u)
		}
		label := func(v string) func(*unstructured.Unstructured) {
			return func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"retryguard.io/probe": v}) }
		}
		probe := 0
		eventually(t, 30*time.Second, kind+": the policy in force", func() bool {
			probe++ // a label: harmless if the policy is not in force yet
			err := update(manager, label(strings.Repeat("x", probe)))
			return err != nil && strings.Contains(err.Error(), caOnly)
		})
		ca := func(pem string) hookChange {
			return setField(base64.StdEncoding.EncodeToString([]byte(pem)), "clientConfig", "caBundle")
		}
		allowed(t, kind+": the manager injects its CA", update(manager, nil, ca("first CA")))
		allowed(t, kind+": the manager rotates its CA", update(manager, nil, ca("second CA")))
		if hooks, _, _ := unstructured.NestedSlice(get().Object, "webhooks"); len(hooks) == 0 ||
			hooks[0].(object)["clientConfig"].(object)["caBundle"] != base64.StdEncoding.EncodeToString([]byte("second CA")) {
			t.Fatalf("%s: the rotated caBundle is not stored: %v", kind, hooks)
		}

		refusedChanges := map[string][]hookChange{
			"points the service at another": {setField("attacker", "clientConfig", "service", "name")},
			"moves the service's namespace": {setField("attacker", "clientConfig", "service", "namespace")},
			"changes the service's path":    {setField("/steal", "clientConfig", "service", "path")},
			"changes the service's port":    {setField(int64(8443), "clientConfig", "service", "port")},
			"sets failurePolicy: Ignore":    {setField("Ignore", "failurePolicy")},
			"widens the rules": {setField([]any{object{"apiGroups": []any{"*"}, "apiVersions": []any{"*"}, "operations": []any{"*"},
				"resources": []any{"*/*"}}}, "rules")},
			"changes the namespaceSelector":        {setField(object{"matchLabels": object{"team": "a"}}, "namespaceSelector")},
			"changes the objectSelector":           {setField(object{"matchLabels": object{"app": "a"}}, "objectSelector")},
			"changes the matchConditions":          {setField([]any{object{"name": "never", "expression": "false"}}, "matchConditions")},
			"changes the timeout":                  {setField(int64(30), "timeoutSeconds")},
			"changes the matchPolicy":              {setField("Exact", "matchPolicy")},
			"changes the admissionReviewVersions":  {setField([]any{"v1", "v1beta1"}, "admissionReviewVersions")},
			"injects its CA and moves the service": {ca("third CA"), setField("attacker", "clientConfig", "service", "name")},
			"replaces the service by a URL": {func(h object) {
				unstructured.RemoveNestedField(h, "clientConfig", "service")
				setField("https://attacker.example/steal", "clientConfig", "url")(h)
			}},
		}
		if kind == "MutatingWebhookConfiguration" {
			refusedChanges["changes the reinvocationPolicy"] = []hookChange{setField("IfNeeded", "reinvocationPolicy")}
		}
		for what, changes := range refusedChanges {
			refusedBy(t, kind+": the manager "+what, update(manager, nil, changes...))
		}
		webhooks := func(edit func([]any) []any) func(*unstructured.Unstructured) {
			return func(u *unstructured.Unstructured) {
				hooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
				if err := unstructured.SetNestedSlice(u.Object, edit(hooks), "webhooks"); err != nil {
					t.Fatal(err)
				}
			}
		}
		refusedBy(t, kind+": the manager adds a webhook", update(manager, webhooks(func(h []any) []any {
			added := maps.Clone(h[0].(object))
			added["name"] = "stolen.example.com"
			return append(h, added)
		})))
		refusedBy(t, kind+": the manager removes a webhook", update(manager, webhooks(func(h []any) []any { return h[:len(h)-1] })))
		if n := len(byKind[kind][0]["webhooks"].([]any)); n > 1 {
			refusedBy(t, kind+": the manager reorders the webhooks", update(manager, webhooks(func(h []any) []any { slices.Reverse(h); return h })))
		}
		refusedBy(t, kind+": the manager labels the configuration", update(manager, label("stolen")))

		allowed(t, kind+": an administrator sets failurePolicy: Ignore", update(admin, nil, setField("Ignore", "failurePolicy")))
		allowed(t, kind+": and back", update(admin, nil, setField("Fail", "failurePolicy")))
	}
}

func refusedBy(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), caOnly) || !strings.Contains(err.Error(), codes.WebhookConfigurationReserved.String()) {
		t.Errorf("%s: %v, want the refusal %s that says it %s", what, err, codes.WebhookConfigurationReserved, caOnly)
	}
}

// The chart's webhook-ca-only policy is config/components/cert-rotation's,
// but for the manager's user, which names the release's ServiceAccount.
func TestChartWebhookCAPolicyIsTheComponents(t *testing.T) {
	chart := byName(mustTemplate(t, "webhook.certManager.enabled=false")["ValidatingAdmissionPolicy"], "rg-retryguard-webhook-ca-only")
	if chart == nil {
		t.Fatal("the chart renders no webhook-ca-only policy with webhook.certManager.enabled=false")
	}
	if byName(mustTemplate(t)["ValidatingAdmissionPolicy"], "rg-retryguard-webhook-ca-only") != nil {
		t.Error("the webhook-ca-only policy with cert-manager, whose cainjector is not the manager")
	}
	component := load(t, "config/components/cert-rotation/validating_admission_policy.yaml")
	chartSpec, componentSpec := chart["spec"].(object), component["spec"].(object)
	users := map[string]string{}
	for name, spec := range map[string]object{"chart": chartSpec, "component": componentSpec} {
		conds := spec["matchConditions"].([]any)
		if len(conds) != 1 || conds[0].(object)["name"] != "manager" {
			t.Fatalf("%s: matchConditions %v, want the manager's alone", name, conds)
		}
		users[name] = conds[0].(object)["expression"].(string)
		delete(spec, "matchConditions")
	}
	if want := "request.userInfo.username == 'system:serviceaccount:" + namespace + ":rg-retryguard'"; users["chart"] != want {
		t.Errorf("the chart's policy binds %s, want %s", users["chart"], want)
	}
	if want := "request.userInfo.username == 'system:serviceaccount:retryguard-system:retryguard-controller-manager'"; users["component"] != want {
		t.Errorf("the component's policy binds %s, want %s", users["component"], want)
	}
	if !reflect.DeepEqual(chartSpec, componentSpec) {
		t.Errorf("the chart's webhook-ca-only policy differs from config/components/cert-rotation:\n%v\n%v", chartSpec, componentSpec)
	}
}
