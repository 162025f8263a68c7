package kube_test

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/cli-runtime/pkg/genericclioptions"

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
		kubeconfig, namespace, context string
		env                            string
		want                           string
	}{
		{kubeconfig: path, want: "checkout"},
		{kubeconfig: path, namespace: "auth", want: "auth"},
		{kubeconfig: path, context: "bare", want: "default"},
		{env: path, want: "checkout"},
	} {
		t.Setenv("KUBECONFIG", tc.env)
		_, ns, err := kube.Connect(flags(tc.kubeconfig, tc.namespace, tc.context))
		if err != nil {
			t.Fatalf("%+v: %v", tc, err)
		}
		if ns != tc.want {
			t.Errorf("%+v: namespace %q, want %q", tc, ns, tc.want)
		}
	}
	if _, _, err := kube.Connect(flags(filepath.Join(t.TempDir(), "absent"), "", "")); err == nil {
		t.Error("a kubeconfig that does not exist must be an error")
	}
}

func flags(kubeconfig, namespace, context string) *genericclioptions.ConfigFlags {
	f := genericclioptions.NewConfigFlags(false)
	f.KubeConfig, f.Namespace, f.Context = &kubeconfig, &namespace, &context
	return f
}
