package kube_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/kube"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1"}
users:
- name: u
  user: {token: t}
contexts:
- name: team
  context: {cluster: c, user: u, namespace: checkout}
- name: bare
  context: {cluster: c, user: u}
current-context: team
`

// The namespace comes from -n, else the context, else "default"; the file
// from --kubeconfig, else $KUBECONFIG. No server is contacted to connect.
func TestConnectFindsTheNamespaceAsKubectlDoes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", "")
	for _, tc := range []struct {
		flags kube.ConfigFlags
		env   string
		want  string
	}{
		{flags: kube.ConfigFlags{Kubeconfig: path}, want: "checkout"},
		{flags: kube.ConfigFlags{Kubeconfig: path, Namespace: "auth"}, want: "auth"},
		{flags: kube.ConfigFlags{Kubeconfig: path, Context: "bare"}, want: "default"},
		{env: path, want: "checkout"},
	} {
		t.Setenv("KUBECONFIG", tc.env)
		_, ns, err := kube.Connect(tc.flags)
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		if ns != tc.want {
			t.Errorf("%+v: namespace %q, want %q", tc, ns, tc.want)
		}
	}
	if _, _, err := kube.Connect(kube.ConfigFlags{Kubeconfig: filepath.Join(t.TempDir(), "absent")}); err == nil {
		t.Error("a kubeconfig that does not exist must be an error")
	}
}
