package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// check stops at a cluster it cannot reach, with exit 4 (exitUnreadable, as
// docs/kubectl-plugin.md documents) and a hint, and never reports the
// installation's objects as missing: it could not look.
func TestCheckStopsAtAnUnreachableCluster(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // nothing listens there now
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: gone, cluster: {server: "https://`+addr+`", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: gone, context: {cluster: gone, user: u}}]
current-context: gone
`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "", "check", "--kubeconfig", kubeconfig, "--request-timeout", "5s")
	if code != exitUnreadable {
		t.Fatalf("exit %d, want %d\n%s%s", code, exitUnreadable, out, errOut)
	}
	if !strings.Contains(errOut, "cannot be reached") || !strings.Contains(errOut, "hint:") {
		t.Fatalf("no reason and hint on stderr:\n%s", errOut)
	}
	if strings.Contains(out, "FAIL") {
		t.Fatalf("checks were reported as failed for a cluster never reached:\n%s", out)
	}
	code, out, _ = runCLI(t, "", "check", "--kubeconfig", kubeconfig, "--request-timeout", "5s", "-o", "json")
	if code != exitUnreadable || !strings.Contains(out, `"unreachable"`) {
		t.Fatalf("-o json: exit %d\n%s", code, out)
	}
}
