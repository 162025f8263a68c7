package main

import (
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/output"
	"github.com/retryguard/retryguard/contract/policyconfig"
	"github.com/retryguard/retryguard/internal/testenv"
)

// lint -o json over config/samples is one LintResult that encoding/json
// reads strictly, and jq too when it is installed; -o yaml is the same
// object.
func TestLintJSONOverTheSamples(t *testing.T) {
	samples := testenv.Path("config", "samples")
	code, out, errOut := runCLI(t, "", "lint", "-f", samples, "-o", "json")
	if code != exitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	res := decodeStrict[output.LintResult](t, out)
	if res.APIVersion != output.APIVersion || res.Kind != output.KindLintResult {
		t.Errorf("apiVersion %q kind %q", res.APIVersion, res.Kind)
	}
	s := res.Summary
	if s.Documents != len(res.Documents) || s.Created+s.Updated+s.Refused+s.Skipped != s.Documents || s.Created < 4 || s.Refused != 0 {
		t.Errorf("summary %+v over %d documents", s, len(res.Documents))
	}
	for _, d := range res.Documents {
		if !strings.HasPrefix(d.File, samples) || d.Line < 1 || d.Verdict == "" {
			t.Errorf("document %+v", d)
		}
	}
	if jq, err := exec.LookPath("jq"); err == nil {
		cmd := exec.Command(jq, "-e", `.kind == "LintResult" and (.documents | length) == .summary.documents`)
		cmd.Stdin = strings.NewReader(out)
		if got, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("jq: %v\n%s", err, got)
		}
	} else {
		t.Log("jq is not on PATH; encoding/json alone read the output")
	}
	_, yamlOut, _ := runCLI(t, "", "lint", "-f", samples, "-o", "yaml")
	var fromYAML output.LintResult
	if err := yaml.UnmarshalStrict([]byte(yamlOut), &fromYAML); err != nil || fromYAML.Summary != res.Summary {
		t.Errorf("-o yaml: %v, summary %+v, want %+v", err, fromYAML.Summary, res.Summary)
	}
}

// A refusal in JSON names the field and the code, and the exit code is
// still the verdict's.
func TestLintJSONRefusal(t *testing.T) {
	code, out, _ := runCLI(t, policyYAML("connector", 5, "job"), "lint", "-f", "-", "-o", "json")
	if code != exitRefused {
		t.Fatalf("exit %d, want %d", code, exitRefused)
	}
	res := decodeStrict[output.LintResult](t, out)
	d := res.Documents[0]
	if d.Verdict != "refused" || len(d.Causes) == 0 || d.Causes[0].Field != "spec.maxAttempts" || d.Causes[0].Code != "ERR_RETRY_LIMIT_EXCEEDED" ||
		d.File != "-" || d.Line != 1 || d.Kind != "RetryPolicy" || d.Name != "connector" || res.Summary.Refused != 1 {
		t.Errorf("%+v", res)
	}
}

// Each exit code, from the one definition in exitcodes.go.
func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	refused := writeFile(t, dir, "refused.yaml", policyYAML("connector", 5, ""))
	warned := writeFile(t, dir, "warned.yaml", policyYAML("connector", 3, "job")) // its parent does not exist yet
	clean := writeFile(t, dir, "clean.yaml", policyYAML("connector", 3, ""))
	for name, tc := range map[string]struct {
		args []string
		code int
	}{
		"admitted":                             {[]string{"lint", "-f", clean}, exitOK},
		"admitted, warnings do not count":      {[]string{"lint", "-f", warned}, exitOK},
		"warnings with --warnings-as-errors":   {[]string{"lint", "--warnings-as-errors", "-f", warned}, exitWarnings},
		"no warning with --warnings-as-errors": {[]string{"lint", "--warnings-as-errors", "-f", clean}, exitOK},
		"refused beats warnings":               {[]string{"lint", "--warnings-as-errors", "-f", warned, "-f", refused}, exitRefused},
		"refused, json":                        {[]string{"lint", "-o", "json", "-f", refused}, exitRefused},
		"unreadable path":                      {[]string{"lint", "-f", filepath.Join(dir, "absent")}, exitUnreadable},
		"unknown flag":                         {[]string{"lint", "--bogus", "-f", clean}, exitUsage},
		"unknown output":                       {[]string{"lint", "-o", "xml", "-f", clean}, exitUsage},
		"unknown command":                      {[]string{"frobnicate"}, exitUsage},
		"no command":                           {nil, exitUsage},
		"limit out of range":                   {[]string{"lint", "--max-leaf-attempts", "0", "-f", clean}, exitUsage},
		"unreadable kubeconfig":                {[]string{"graph", "--kubeconfig", filepath.Join(dir, "absent")}, exitUnreadable},
	} {
		t.Run(name, func(t *testing.T) {
			if code, out, errOut := runCLI(t, "", tc.args...); code != tc.code {
				t.Errorf("exit %d, want %d\n%s%s", code, tc.code, out, errOut)
			}
		})
	}
}

// graph -o json gives each policy its product and path, parents first.
func TestGraphJSON(t *testing.T) {
	withCluster(t, "checkout", seedChain("checkout")...)
	g := decodeStrict[output.LayerGraph](t, runOK(t, "graph", "-o", "json"))
	if g.Kind != output.KindLayerGraph || g.MaxLeafAttempts != 3 || len(g.Policies) != 3 || len(g.Budgets) != 1 {
		t.Fatalf("%+v", g)
	}
	leaf := g.Policies[2]
	if leaf.Name != "connector" || leaf.Parent != "checkout/job" || leaf.Product != 27 || !leaf.OverLimit ||
		leaf.Path != "workflow(3) × job(3) × connector(3) = 27" || leaf.Ready.Reason != "AmplificationExceeded" || leaf.Budget != "checkout/telephony" {
		t.Errorf("%+v", leaf)
	}
	if g.Policies[0].Name != "workflow" || g.Policies[0].OverLimit || g.Budgets[0].UsedBy[0] != "checkout/connector" {
		t.Errorf("%+v", g)
	}
	var y output.LayerGraph
	if err := yaml.UnmarshalStrict([]byte(runOK(t, "graph", "-o", "yaml")), &y); err != nil || len(y.Policies) != 3 {
		t.Errorf("-o yaml: %v %+v", err, y)
	}
}

// explain -o json holds what the text says: the verdict, the product and
// the worst-case schedule, row by row.
func TestExplainJSON(t *testing.T) {
	withCluster(t, "checkout", seedChain("checkout")...)
	e := decodeStrict[output.Explanation](t, runOK(t, "explain", "rp/connector", "-o", "json"))
	if e.Kind != output.KindExplanation || e.InForce || e.Ready.Reason != "AmplificationExceeded" || e.Layers.Product != 27 ||
		e.Layers.Limit != 3 || strings.Join(e.Layers.Policies, ",") != "checkout/workflow,checkout/job,checkout/connector" {
		t.Errorf("%+v", e)
	}
	s := e.Schedule
	if len(s.Attempts) != 3 || s.Attempts[0].SleepMax != "" || s.Attempts[1].SleepMax == "" || !s.Attempts[2].Runs || s.Deadline != "10s" {
		t.Errorf("%+v", s)
	}
	if e.Budget == nil || !e.Budget.Exists || e.Budget.RetryPercent != 10 || len(e.Budget.UsedBy) != 3 {
		t.Errorf("%+v", e.Budget)
	}
	top := decodeStrict[output.Explanation](t, runOK(t, "explain", "workflow", "-o", "yaml", "-o", "json"))
	if top.Layers.WorstProduct != 27 || top.Layers.WorstPath != "workflow(3) × job(3) × connector(3) = 27" {
		t.Errorf("%+v", top.Layers)
	}
}

// version reads the module version from the build information, and names
// the API and the payload it speaks.
func TestVersion(t *testing.T) {
	v := versionInfo(func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/retryguard/retryguard", Version: "v0.3.1"}}, true
	})
	if v.Module != "v0.3.1" || v.GoVersion != "go1.26.0" || v.PayloadVersion != policyconfig.SchemaVersion ||
		v.PolicyAPIVersion != "policy.retryguard.io/v1alpha1" {
		t.Errorf("%+v", v)
	}
	if v := versionInfo(func() (*debug.BuildInfo, bool) { return nil, false }); v.Module != "unknown" {
		t.Errorf("without build information: %+v", v)
	}
	got := decodeStrict[output.Version](t, runOK(t, "version", "-o", "json"))
	if got.Kind != output.KindVersion || got.PayloadVersion != policyconfig.SchemaVersion || got.Module == "" {
		t.Errorf("%+v", got)
	}
	assertContains(t, runOK(t, "version"), "kubectl-retryguard ", "policy payload: "+policyconfig.SchemaVersion)
}

// kubectl's connection flags reach the client: impersonation, the context,
// the kubeconfig and the namespace.
func TestClusterFlagsReachTheClient(t *testing.T) {
	path := writeFile(t, t.TempDir(), "config", `apiVersion: v1
kind: Config
clusters:
- {name: c, cluster: {server: "https://127.0.0.1:1"}}
users:
- {name: u, user: {token: t}}
contexts:
- {name: team, context: {cluster: c, user: u, namespace: checkout}}
- {name: other, context: {cluster: c, user: u, namespace: auth}}
current-context: team
`)
	var got genericclioptions.RESTClientGetter
	orig := connect
	connect = func(g genericclioptions.RESTClientGetter) (client.Client, string, error) {
		got = g
		return orig(g)
	}
	t.Cleanup(func() { connect = orig })
	for _, cmd := range [][]string{{"graph"}, {"explain", "rp/x"}, {"check"}} {
		runCLI(t, "", append(cmd, "--kubeconfig", path, "--context", "other", "--as", "jane", "--as-group", "oncall", "--as-group", "sre")...)
		cfg, err := got.ToRESTConfig()
		if err != nil {
			t.Fatal(err)
		}
		ns, _, _ := got.ToRawKubeConfigLoader().Namespace()
		if cfg.Impersonate.UserName != "jane" || strings.Join(cfg.Impersonate.Groups, ",") != "oncall,sre" || ns != "auth" {
			t.Errorf("%v: impersonating %+v in namespace %q", cmd, cfg.Impersonate, ns)
		}
		runCLI(t, "", append(cmd, "--kubeconfig", path, "-n", "payments")...)
		if ns, _, _ := got.ToRawKubeConfigLoader().Namespace(); ns != "payments" {
			t.Errorf("%v -n payments: namespace %q", cmd, ns)
		}
	}
}

// Shell completion: the scripts, the -o values and explain's policies.
func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		if out := runOK(t, "completion", shell); !strings.Contains(out, "kubectl-retryguard") {
			t.Errorf("completion %s:\n%.300s", shell, out)
		}
	}
	assertContains(t, runOK(t, "__complete", "lint", "-o", ""), "text\n", "json\n", "yaml\n")
	assertContains(t, runOK(t, "__complete", "graph", "-o", ""), "dot\n")
	withCluster(t, "checkout", seedChain("checkout")...)
	out := runOK(t, "__complete", "explain", "rp/")
	assertContains(t, out, "rp/connector\n", "rp/job\n", "rp/workflow\n")
}
