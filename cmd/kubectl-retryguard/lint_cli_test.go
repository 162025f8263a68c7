package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// policyYAML is a valid policy in the manner of the samples.
func policyYAML(name string, attempts int, parent string, extra ...string) string {
	parentRef := ""
	if parent != "" {
		parentRef = "\n    parentRef: {name: " + parent + "}"
	}
	return fmt.Sprintf(`apiVersion: policy.retryguard.io/v1alpha1
kind: RetryPolicy
metadata:
  name: %s
spec:
  target: {service: telephony-api, operation: POST /v1/messages}
  layer:
    name: %s%s
  maxAttempts: %d
  backoff: {jitter: Full}
  deadline: 10s
  budgetRef: {name: telephony}
  idempotency: {keyTemplate: "msg-{message_id}"}
%s`, name, name, parentRef, attempts, strings.Join(extra, "\n"))
}

func docs(d ...string) string { return strings.Join(d, "\n---\n") }

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func runCLI(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

// runOK runs the plugin with no stdin and returns its output, failing the
// test unless it exits 0.
func runOK(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := runCLI(t, "", args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	return out
}

func TestLintExitCodesAndFiles(t *testing.T) {
	dir := t.TempDir()
	seed333 := writeFile(t, dir, "seed/333.yaml", docs(
		policyYAML("workflow", 3, ""), policyYAML("job", 3, "workflow"), policyYAML("connector", 3, "job")))
	// The replacement lowers workflow to 1 before job is admitted, so
	// 1 × 3 = 3 passes; without replacement 3 × 3 = 9 would be refused.
	replaced := writeFile(t, dir, "replaced.yaml", docs(
		policyYAML("workflow", 3, ""), policyYAML("workflow", 1, ""), policyYAML("job", 3, "workflow")))
	// A directory split over files: lexical order admits a-parent first.
	writeFile(t, dir, "tree/a-parent.yaml", policyYAML("job", 3, ""))
	writeFile(t, dir, "tree/b-child.yaml", policyYAML("connector", 3, "job"))
	writeFile(t, dir, "ok/kustomization.yaml", "resources: [policy.yaml]\n")
	writeFile(t, dir, "ok/policy.yaml", docs(policyYAML("connector", 1, "")+"\n",
		"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: app}\n"))
	unknownField := writeFile(t, dir, "unknown.yaml", policyYAML("connector", 1, "", "  maxRetries: 5"))
	raise := writeFile(
		t,
		dir,
		"raise.yaml",
		"apiVersion: policy.retryguard.io/v1alpha1\nkind: RetryBudget\nmetadata: {name: b, namespace: x}\nspec: {retryPercent: 25}\n",
	)
	orphan := writeFile(t, dir, "orphan.yaml", policyYAML("connector", 3, "job"))
	// Both read as kubectl reads files: refused, at their line in the file.
	ns := "apiVersion: v1\nkind: Namespace\nmetadata: {name: default}\n"
	inline := ns + "--- {apiVersion: policy.retryguard.io/v1alpha1, kind: RetryPolicy, metadata: {name: x}, spec: {maxAttempts: 9}}\n"
	duplicate := docs(ns, policyYAML("connector", 5, "", "  maxAttempts: 1"))
	dupLine := strings.Count(duplicate[:strings.LastIndex(duplicate, "maxAttempts")], "\n") + 1
	// A hedge is an attempt: under a job of 3, a connector that hedges once (2 attempts) makes 6.
	hedgedChain := writeFile(t, dir, "hedged.yaml", docs(policyYAML("job", 3, ""),
		policyYAML("connector", 2, "job", "  hedging: {delay: 50ms, maxHedges: 1}")))
	keylessHedge := writeFile(t, dir, "keyless-hedge.yaml", strings.Replace(
		policyYAML("connector", 2, "", "  retryOn: {statusCodes: [], errors: [ConnectionRefused]}", "  hedging: {delay: 50ms, maxHedges: 1}"),
		`  idempotency: {keyTemplate: "msg-{message_id}"}`+"\n", "", 1))

	for name, tc := range map[string]struct {
		stdin string
		args  []string
		code  int
		want  []string // substrings of stdout
		not   []string
	}{
		"[3,3,3] is refused with the product": {
			args: []string{"lint", "-f", seed333}, code: 1,
			// Admitted in order, job is the first to cross the limit; connector
			// then finds no job and is admitted with a warning, as with kubectl apply.
			want: []string{"333.yaml:16: RetryPolicy default/job: refused", "ERR_LAYER_AMPLIFICATION",
				"workflow(3) × job(3) = 9 > 3", `RetryPolicy "job" does not exist yet`,
				"3 documents: 2 created, 0 updated, 1 refused"},
		},
		"a hedge takes the layer product over the limit": {
			args: []string{"lint", "-f", hedgedChain}, code: 1,
			want: []string{"RetryPolicy default/connector: refused", "ERR_LAYER_AMPLIFICATION", "job(3) × connector(2) = 6 > 3"},
		},
		"a hedging keyless POST is refused": {
			args: []string{"lint", "-f", keylessHedge}, code: 1,
			want: []string{"RetryPolicy default/connector: refused", "spec.hedging", "ERR_HEDGE_WITHOUT_IDEMPOTENCY"},
			not:  []string{"ERR_AMBIGUOUS_WITHOUT_IDEMPOTENCY"},
		},
		"a later object replaces an earlier one": {
			args: []string{"lint", "-f", replaced}, code: 0,
			want: []string{"RetryPolicy default/workflow: updated", "RetryPolicy default/job: created", "0 refused"},
		},
		"a directory is admitted in lexical order": {
			args: []string{"lint", "-f", filepath.Join(dir, "tree")}, code: 1,
			want: []string{"b-child.yaml:1: RetryPolicy default/connector: refused", "job(3) × connector(3) = 9 > 3"},
			not:  []string{"does not exist yet"},
		},
		"a raised limit admits the same tree": {
			args: []string{"lint", "--max-leaf-attempts", "9", "-f", filepath.Join(dir, "tree")}, code: 0,
		},
		"kustomization files and other kinds are left out": {
			args: []string{"lint", "-v", "-f", filepath.Join(dir, "ok")}, code: 0,
			want: []string{"Deployment default/app: skipped", "2 documents: 1 created, 0 updated, 0 refused, 1 skipped"},
		},
		"unknown fields are refused as with --validate=strict": {
			args: []string{"lint", "-f", unknownField}, code: 1, want: []string{"RetryPolicy default/connector: refused", `unknown field "maxRetries"`},
		},
		"a document on its --- line is refused, not skipped": {
			stdin: inline, args: []string{"lint", "-f", "-"}, code: 1,
			want: []string{"-:4: ", "refused", "invalid Yaml document separator", "1 refused"},
		},
		"a duplicated field is refused at its line in the file": {
			stdin: duplicate, args: []string{"lint", "-f", "-"}, code: 1,
			want: []string{"-:6: ", "refused", fmt.Sprintf(`line %d: key "maxAttempts" already set`, dupLine)},
		},
		"a missing parent is a warning, not a refusal": {
			args: []string{"lint", "-f", orphan}, code: 0, want: []string{`Warning: layer.parentRef: RetryPolicy "job" does not exist yet`},
		},
		"a single-object rule stops before the webhook rules": {
			stdin: policyYAML("connector", 5, "job"), args: []string{"lint", "-f", "-", "-n", "team-a"}, code: 1,
			want: []string{"-:1: RetryPolicy team-a/connector: refused", "spec.maxAttempts", "ERR_RETRY_LIMIT_EXCEEDED"},
			not:  []string{"Warning"},
		},
		"a budget over the platform cap": {
			stdin: "apiVersion: policy.retryguard.io/v1alpha1\nkind: RetryBudget\nmetadata: {name: b}\nspec: {retryPercent: 25}\n",
			args:  []string{"lint", "-f", "-"}, code: 1, want: []string{"ERR_BUDGET_ABOVE_PLATFORM_CAP"},
		},
		"an unknown version of our group is refused": {
			stdin: "apiVersion: policy.retryguard.io/v9\nkind: RetryPolicy\nmetadata: {name: x}\n",
			args:  []string{"lint", "-f", "-"}, code: 1, want: []string{`no matches for kind "RetryPolicy"`},
		},
		"objects read back from a cluster, as a List": {
			stdin: `apiVersion: v1
kind: List
items:
- apiVersion: policy.retryguard.io/v1alpha1
  kind: RetryBudget
  metadata: {name: b, namespace: x, resourceVersion: "123", uid: abc, generation: 2}
  spec: {retryPercent: 10}
  status: {policyCount: 3}
`, args: []string{"lint", "-f", "-", "-f", raise}, code: 1,
			want: []string{"-:1: RetryBudget x/b: created", "raise.yaml:1: RetryBudget x/b: refused", "ERR_BUDGET_ABOVE_PLATFORM_CAP"},
		},
		"a path that does not exist is unreadable input": {args: []string{"lint", "-f", filepath.Join(dir, "absent")}, code: exitUnreadable},
		"no -f is a usage error":                         {args: []string{"lint"}, code: 2},
		"lint -h prints examples":                        {args: []string{"lint", "-h"}, code: 0},
	} {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := runCLI(t, tc.stdin, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(out, n) {
					t.Errorf("stdout has %q:\n%s", n, out)
				}
			}
		})
	}
}

func TestHelpHasExamples(t *testing.T) {
	code, out, _ := runCLI(t, "", "--help")
	if code != 0 || !strings.Contains(out, "Examples:") || !strings.Contains(out, "kubectl retryguard lint -f") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	code, out, _ = runCLI(t, "", "lint", "-h")
	if code != 0 || !strings.Contains(out, "Examples:") || !strings.Contains(out, "--max-leaf-attempts") {
		t.Fatalf("lint -h: exit %d:\n%s", code, out)
	}
}

// lint follows parentRef.namespace and the parent's consent, reading the
// labels of the Namespaces in the files; a namespace outside the files is
// judged by its name label alone, with a note.
func TestLintAcrossNamespaces(t *testing.T) {
	inNS := func(doc, ns string) string {
		return strings.Replace(doc, "metadata:\n", "metadata:\n  namespace: "+ns+"\n", 1)
	}
	parent := inNS(policyYAML("job", 1, ""), "gateway")
	parent = strings.Replace(
		parent,
		"    name: job\n",
		"    name: job\n    allowedChildren: {namespaces: {from: Selector, selector: {matchLabels: {team: payments}}}}\n",
		1,
	)
	child := func(ns string) string {
		doc := inNS(policyYAML("connector", 3, "job"), ns)
		return strings.Replace(doc, "parentRef: {name: job}", "parentRef: {name: job, namespace: gateway}", 1)
	}
	nsDoc := func(name, team string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n  labels: {team: %s}\n", name, team)
	}
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		docs  []string
		code  int
		wants []string
	}{
		"a matching namespace is admitted": {
			[]string{nsDoc("payments", "payments"), parent, child("payments")}, 0,
			[]string{"RetryPolicy payments/connector: created"}},
		"a namespace that does not match is refused": {
			[]string{nsDoc("ads", "ads"), parent, child("ads")}, 1,
			[]string{"spec.layer.parentRef.namespace", "ERR_PARENT_NOT_PERMITTED", `RetryPolicy "gateway/job" does not allow child layers from namespace "ads"`}},
		"a namespace outside the files is refused, with a note": {
			[]string{parent, child("payments")}, 1,
			[]string{"ERR_PARENT_NOT_PERMITTED", `Note: namespace "payments" is not in the files`}},
		"a chain across namespaces multiplies": {
			[]string{nsDoc("payments", "payments"), strings.Replace(parent, "maxAttempts: 1", "maxAttempts: 3", 1), child("payments")}, 1,
			[]string{"gateway/job(3) × payments/connector(3) = 9 > 3"}},
	} {
		t.Run(name, func(t *testing.T) {
			f := writeFile(t, dir, strings.ReplaceAll(name, " ", "-")+".yaml", docs(tc.docs...))
			code, out, errOut := runCLI(t, "", "lint", "-f", f)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s%s", code, tc.code, out, errOut)
			}
			assertContains(t, out, tc.wants...)
		})
	}
}

// decodeStrict decodes JSON into T, refusing fields T does not declare.
func decodeStrict[T any](t *testing.T, data string) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(strings.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decoding %T: %v\n%s", v, err, data)
	}
	return v
}
