package manager_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/retryguard/retryguard/api/v1alpha1/fixtures"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/internal/manager"
	"github.com/retryguard/retryguard/internal/testenv"
)

// startControlPlane starts kube-apiserver and etcd with the CRDs until the
// test ends, and writes an admin kubeconfig for run's --kubeconfig.
func startControlPlane(t *testing.T) (*rest.Config, string) {
	t.Helper()
	env, cfg := testenv.StartEnvironment(t, false)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg, kubeconfig
}

// asServiceAccount installs config/rbac, and the extra RBAC files, for the
// ServiceAccount controller-manager in namespace ns as `make deploy` would,
// and returns a kubeconfig that impersonates that account: a manager run
// with it has exactly those rights.
func asServiceAccount(ctx context.Context, t *testing.T, c client.Client, adminKubeconfig, ns string, extra ...string) string {
	t.Helper()
	files := []string{"service_account", "role", "role_binding", "leader_election_role", "leader_election_role_binding",
		"metrics_auth_role", "metrics_auth_role_binding"}
	for i, f := range files {
		files[i] = testenv.Path("config", "rbac", f+".yaml")
	}
	for _, f := range append(files, extra...) {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range strings.Split(string(raw), "\n---") {
			doc = dropRule(t, fmt.Sprintf("%s/%d", filepath.Base(f), i), doc)
			u := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatal(err)
			}
			if len(u.Object) == 0 {
				continue
			}
			if u.GetNamespace() == "system" {
				u.SetNamespace(ns)
			}
			subjects, _, _ := unstructured.NestedSlice(u.Object, "subjects")
			for _, s := range subjects {
				s.(map[string]any)["namespace"] = ns
			}
			if subjects != nil {
				_ = unstructured.SetNestedSlice(u.Object, subjects, "subjects")
			}
			if err := c.Create(ctx, u); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
		}
	}
	kc, err := clientcmd.LoadFromFile(adminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, auth := range kc.AuthInfos {
		auth.Impersonate = "system:serviceaccount:" + ns + ":controller-manager"
		auth.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	}
	path := filepath.Join(t.TempDir(), "kubeconfig-sa")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// dropRuleEnv names one rule to leave out of asServiceAccount's RBAC, as
// file/document/rule, to check by hand that a suite fails without it:
//
//	RETRYGUARD_DROP_RULE=rbac.yaml/0/1 go test -run TestManagerRotatesItsOwnCertificate ./internal/manager/
const dropRuleEnv = "RETRYGUARD_DROP_RULE"

func dropRule(t *testing.T, doc, text string) string {
	spec := os.Getenv(dropRuleEnv)
	if !strings.HasPrefix(spec, doc+"/") {
		return text
	}
	var rule int
	if _, err := fmt.Sscanf(strings.TrimPrefix(spec, doc+"/"), "%d", &rule); err != nil {
		t.Fatal(err)
	}
	var o map[string]any
	if err := yaml.Unmarshal([]byte(text), &o); err != nil {
		t.Fatal(err)
	}
	rules := o["rules"].([]any)
	t.Logf("without %s: %v", spec, rules[rule])
	o["rules"] = append(rules[:rule], rules[rule+1:]...)
	out, err := yaml.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// The manager as cmd/manager runs it: flags, controllers publishing, probes,
// the metrics endpoint (HTTPS, authenticated and authorized by the API
// server, HTTP/1.1 only) with Retryguard's gauge, and a clean stop.
func TestManagerRuns(t *testing.T) {
	cfg, kubeconfig := startControlPlane(t)
	metrics, probes := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	c, err := client.New(cfg, client.Options{Scheme: manager.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	// The manager runs as its ServiceAccount with config/rbac's rules.
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "retryguard-system"}}); err != nil {
		t.Fatal(err)
	}
	saKubeconfig := asServiceAccount(ctx, t, c, kubeconfig, "retryguard-system")
	done := make(chan error, 1)
	go func() {
		done <- manager.Run(ctx, []string{"--kubeconfig", saKubeconfig, "--leader-elect=false", "--enable-webhooks=false",
			"--metrics-bind-address", metrics, "--health-probe-bind-address", probes, "--max-leaf-attempts=9"}, manager.Build{})
	}()

	if err := c.Create(ctx, fixtures.Budget("default", fixtures.DefaultBudget, 10)); err != nil {
		t.Fatal(err)
	}
	// Leaf 9 is Ready only because --max-leaf-attempts=9 reached the controllers.
	if err := c.Create(ctx, fixtures.Policy("default", "job", "job", 3)); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, fixtures.Policy("default", "connector", "connector", 3, fixtures.Parent("job"))); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool {
		var cm corev1.ConfigMap
		if c.Get(ctx, client.ObjectKey{Namespace: "default", Name: policyconfig.ConfigMapName("connector")}, &cm) != nil {
			return false
		}
		p, err := policyconfig.Parse([]byte(cm.Data[policyconfig.DataKey]))
		return err == nil && p.Enforcement.Mode == policyconfig.Enforced && p.Policy.LeafAttempts == 9
	})
	for _, path := range []string{"/healthz", "/readyz"} {
		waitUntil(t, func() bool { _, body := get("http://"+probes+path, ""); return body != "" })
	}

	// A scraper without credentials is refused; one whose ServiceAccount is
	// bound to config/rbac's metrics reader role reads the gauge.
	waitUntil(t, func() bool { code, _ := get("https://"+metrics+"/metrics", ""); return code != 0 })
	if code, _ := get("https://"+metrics+"/metrics", ""); code != http.StatusUnauthorized && code != http.StatusForbidden {
		t.Fatalf("an anonymous scrape got %d", code)
	}
	token := metricsReaderToken(ctx, t, c)
	waitUntil(t, func() bool {
		_, body := get("https://"+metrics+"/metrics", token)
		return strings.Contains(body, `retryguard_retrypolicies{ready="True",reason="Published"}`)
	})
	if proto := negotiatedProtocol(t, metrics); proto == "h2" {
		t.Fatal("the metrics server offers HTTP/2 without --enable-http2")
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the manager stopped with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the manager did not stop")
	}
}

// metricsReaderToken binds a new ServiceAccount to config/rbac's metrics
// reader ClusterRole and returns a token for it.
func metricsReaderToken(ctx context.Context, t *testing.T, c client.Client) string {
	t.Helper()
	var role rbacv1.ClusterRole
	loadYAML(t, testenv.Path("config", "rbac", "metrics_reader_role.yaml"), &role)
	role.Name = "retryguard-metrics-reader"
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "scraper"}}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "scraper"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: "scraper"}},
	}
	for _, o := range []client.Object{&role, sa, binding} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

func loadYAML(t *testing.T, path string, into any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	loadYAMLBytes(t, raw, into)
}

func loadYAMLBytes(t *testing.T, raw []byte, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(raw, into); err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
}

func negotiatedProtocol(t *testing.T, addr string) string {
	t.Helper()
	conn, err := tls.Dial(
		"tcp",
		addr,
		&tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}},
	) //nolint:gosec // only the protocol is under test
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().NegotiatedProtocol
}

func TestManagerRejectsBadFlags(t *testing.T) {
	for args, want := range map[string]string{
		"--max-retry-percent=250":                               "1 to 100",
		"--cert-rotation --namespace=":                          "--cert-rotation needs --namespace",
		"--cert-rotation --enable-webhooks=false --namespace=x": "--cert-rotation needs --enable-webhooks",
	} {
		if err := manager.Run(context.Background(), strings.Fields(args), manager.Build{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
}

// get returns the status and, for a 200 answer, the body; 0 when nothing
// answers. A token is sent as a bearer token.
func get(url, token string) (int, string) {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	// The metrics server's certificate is self-signed unless one is mounted.
	insecure := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
	} //nolint:gosec // see above
	res, err := insecure.Do(req)
	if err != nil {
		return 0, ""
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		return res.StatusCode, ""
	}
	return res.StatusCode, string(body)
}

func waitUntil(t *testing.T, ok func() bool) {
	t.Helper()
	waitFor(t, 30*time.Second, ok)
}

func waitFor(t *testing.T, d time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not reached in %s", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
