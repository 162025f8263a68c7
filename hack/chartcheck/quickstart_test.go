package chartcheck

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/retryguard/retryguard/api/policygraph"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/internal/testenv"
	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch/informer"
)

// quickStart is the README's quick start for application teams, line for
// line between the markers (TestReadmeQuickStartIsTested holds them equal).
func quickStart(ctx context.Context, cs kubernetes.Interface, namespace, vendorURL string, body io.Reader) (*http.Response, error) {
	// quick start: begin
	policies := informer.New(cs, namespace) // the pod's namespace; needs config/samples/app-rbac.yaml
	if err := policies.Start(ctx); err != nil {
		return nil, err
	}
	ex := retry.New(policies)
	client := &http.Client{Transport: &retry.RoundTripper{Executor: ex, Policy: "sms-2fa-dispatch"}}
	ctx = retry.WithVars(ctx, retry.Vars{"user_id": "42", "login_session_id": "s-9"})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, vendorURL+"/v1/messages", body)
	return client.Do(req) // retried as the published policy says, one idempotency key for every attempt
	// quick start: end
}

// An application pod with only config/samples/app-rbac.yaml (bound to its
// ServiceAccount in its namespace) runs the README's quick start: the
// informer watcher syncs and the RoundTripper enforces the policy the
// operator published from config/samples.
func TestQuickStartWithAppRBAC(t *testing.T) {
	env, cfg, admin := startEnv(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const app = "shop"
	createNamespace(ctx, t, admin, app)
	rbac := loadObjects(t, "config/samples/app-rbac.yaml")
	for _, o := range rbac {
		o["metadata"].(object)["namespace"] = app
		if subjects, ok := o["subjects"].([]any); ok {
			subjects[0].(object)["namespace"] = app
		}
	}
	create(ctx, t, admin, rbac...)

	// The operator publishes the samples.
	_, done, err := testenv.StartManaged(ctx, env, cfg, policygraph.DefaultLimits(), testenv.Features{Controllers: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"policy_v1alpha1_retrybudget", "policy_v1alpha1_retrypolicy"} {
		sample := loadObjects(t, "config/samples/"+f+".yaml")
		sample[0]["metadata"].(object)["namespace"] = app
		create(ctx, t, admin, sample...)
	}
	eventually(t, 30*time.Second, "the sample policy published", func() bool {
		var cm corev1.ConfigMap
		return admin.Get(ctx, clientKey(app, policyconfig.ConfigMapName("sms-2fa-dispatch")), &cm) == nil
	})

	var keys []string
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		w.WriteHeader(http.StatusCreated)
	}))
	defer vendor.Close()
	user, groups := serviceAccountUser(app, "my-app")
	cs, err := kubernetes.NewForConfig(impersonating(cfg, user, groups...))
	if err != nil {
		t.Fatal(err)
	}
	startCtx, stop := context.WithTimeout(ctx, 20*time.Second)
	defer stop()
	res, err := quickStart(startCtx, cs, app, vendor.URL, strings.NewReader(`{"to":"+15550100"}`))
	if err != nil {
		t.Fatalf("the quick start fails with app-rbac.yaml: %v", err)
	}
	_ = res.Body.Close()
	// The key comes from the published keyTemplate: the policy is in force.
	if res.StatusCode != http.StatusCreated || len(keys) != 1 || keys[0] != "SMS-2FA-42-s-9" {
		t.Fatalf("status %d, idempotency keys %q", res.StatusCode, keys)
	}

	// The pod's rights end at reading ConfigMaps in its namespace.
	if _, err := cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); err == nil {
		t.Error("the app reads ConfigMaps outside its namespace")
	}
	if _, err := cs.CoreV1().ConfigMaps(app).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); err == nil {
		t.Error("the app writes ConfigMaps")
	}
	cancel()
	<-done
}

// The README shows exactly the quick start this package runs.
func TestReadmeQuickStartIsTested(t *testing.T) {
	src, err := os.ReadFile("quickstart_test.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	region := regexp.MustCompile(`(?s)// quick start: begin\n(.*?)\t// quick start: end`).FindSubmatch(src)
	if region == nil {
		t.Fatal("no quick start region in quickstart_test.go")
	}
	code := strings.ReplaceAll(string(region[1]), "\n\t", "\n")
	code = strings.TrimPrefix(code, "\t")
	if !strings.Contains(string(readme), "```go\n"+code+"```") {
		t.Errorf("README.md does not show the tested quick start; it should contain:\n```go\n%s```", code)
	}
}
