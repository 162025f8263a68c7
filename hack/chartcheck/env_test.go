package chartcheck

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/retryguard/retryguard/internal/testenv"
)

// startEnv starts kube-apiserver and etcd with the CRDs (and, when asked,
// config/webhook pointed at a local server) until the test ends.
func startEnv(t *testing.T, webhooks bool) (*envtest.Environment, *rest.Config, client.Client) {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("needs KUBEBUILDER_ASSETS: run make chart-check")
	}
	env, err := testenv.NewEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	if webhooks {
		testenv.EnableWebhooks(env)
	}
	// As hardened clusters (and OpenShift) do: setting blockOwnerDeletion on
	// an owner reference then needs update on the owner's finalizers, so a
	// ClusterRole without that rule fails here rather than in a user's cluster.
	env.ControlPlane.GetAPIServer().Configure().Append("enable-admission-plugins", "OwnerReferencesPermissionEnforcement")
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return env, cfg, c
}

// impersonating returns cfg acting as user in groups.
func impersonating(cfg *rest.Config, user string, groups ...string) *rest.Config {
	imp := rest.CopyConfig(cfg)
	imp.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append(groups, "system:authenticated")}
	return imp
}

// serviceAccountUser is the user, with its groups, that a ServiceAccount's token authenticates as.
func serviceAccountUser(ns, name string) (string, []string) {
	return "system:serviceaccount:" + ns + ":" + name, []string{"system:serviceaccounts", "system:serviceaccounts:" + ns}
}

// create creates each rendered object as the admin, converting through
// JSON so that typed and unstructured objects alike arrive as written.
func create(ctx context.Context, t *testing.T, c client.Client, objs ...object) {
	t.Helper()
	for _, o := range objs {
		u := toUnstructured(t, o)
		if err := c.Create(ctx, u); err != nil {
			t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

func createNamespace(ctx context.Context, t *testing.T, c client.Client, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
}

// loadObjects reads every object of a YAML file under the repository.
func loadObjects(t *testing.T, path string) []object {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	var out []object
	for _, doc := range strings.Split(string(raw), "\n---") {
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if o != nil {
			out = append(out, o)
		}
	}
	return out
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// eventually polls ok every 100 ms for up to d.
func eventually(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached in %s", what, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func clientKey(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }

// toUnstructured converts a rendered object through JSON, so that it
// arrives at the API server as written.
func toUnstructured(t *testing.T, o object) *unstructured.Unstructured {
	t.Helper()
	raw, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		t.Fatal(err)
	}
	return u
}

// startBareEnv starts kube-apiserver and etcd without the CRDs until the
// test ends, with a client that knows the built-in kinds and CRDs.
func startBareEnv(t *testing.T) (*envtest.Environment, client.Client) {
	t.Helper()
	assets, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = apiextensionsv1.AddToScheme(scheme)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return env, c
}
