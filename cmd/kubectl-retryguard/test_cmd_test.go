package main

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/output"
	"github.com/retryguard/retryguard/internal/testenv"
)

// junitReport is what a CI system reads of a JUnit file.
type junitReport struct {
	XMLName  xml.Name `xml:"testsuites"`
	Tests    int      `xml:"tests,attr"`
	Failures int      `xml:"failures,attr"`
	Suites   []struct {
		Name     string `xml:"name,attr"`
		Failures int    `xml:"failures,attr"`
		Cases    []struct {
			Name    string `xml:"name,attr"`
			Failure *struct {
				Message string `xml:"message,attr"`
			} `xml:"failure"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

func readJUnit(t *testing.T, raw []byte) junitReport {
	t.Helper()
	var r junitReport
	if err := xml.Unmarshal(raw, &r); err != nil {
		t.Fatalf("the JUnit report is not XML: %v\n%s", err, raw)
	}
	return r
}

// The samples and the demo ship with policy tests that pass, and the
// JUnit report says so.
func TestTestPassesOnTheSamplesAndTheDemo(t *testing.T) {
	report := filepath.Join(t.TempDir(), "report.xml")
	code, out, errOut := runCLI(t, "", "test", testenv.Path("config", "samples"), testenv.Path("hack", "demo"), "--junit", report)
	if code != exitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	raw, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	r := readJUnit(t, raw)
	// The samples' four objects, and the demo's five chapters.
	if r.Failures != 0 || len(r.Suites) != 6 || r.Tests < 20 {
		t.Errorf("JUnit: %d tests, %d failures, %d suites\n%s", r.Tests, r.Failures, len(r.Suites), raw)
	}
	if !strings.Contains(out, "ERR_LAYER_AMPLIFICATION") || !strings.Contains(out, "0 failed") {
		t.Errorf("the text report:\n%s", out)
	}
}

// The acceptance: a test whose expected code is wrong fails, with
// exit 1 and a JUnit failure naming both codes; -o junit prints the same
// report, and -o json says which expectation failed.
func TestTestFailsOnAWrongCode(t *testing.T) {
	dir := filepath.Join("testdata", "wrong-code")
	report := filepath.Join(t.TempDir(), "report.xml")
	code, out, _ := runCLI(t, "", "test", dir, "--junit", report)
	if code != exitRefused {
		t.Fatalf("exit %d, want %d\n%s", code, exitRefused, out)
	}
	raw, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	r := readJUnit(t, raw)
	if r.Tests != 2 || r.Failures != 1 || len(r.Suites) != 1 || r.Suites[0].Name != "wrong code" {
		t.Fatalf("JUnit: %+v", r)
	}
	var failed []string
	for _, c := range r.Suites[0].Cases {
		if c.Failure != nil {
			failed = append(failed, c.Name+": "+c.Failure.Message)
		}
	}
	if len(failed) != 1 || !strings.Contains(failed[0], "sms-five-attempts") ||
		!strings.Contains(failed[0], "want ERR_LAYER_AMPLIFICATION, got ERR_RETRY_LIMIT_EXCEEDED") {
		t.Errorf("failed cases %q", failed)
	}
	code, stdout, _ := runCLI(t, "", "test", dir, "-o", "junit")
	if code != exitRefused || string(raw) != stdout {
		t.Errorf("-o junit: exit %d, and a report other than --junit's:\n%s", code, stdout)
	}
	code, stdout, _ = runCLI(t, "", "test", dir, "-o", "json")
	res := decodeStrict[output.TestResult](t, stdout)
	if code != exitRefused || res.Kind != output.KindTestResult || res.Passed || res.Summary != (output.TestSummary{Tests: 1, Results: 2, Passed: 1, Failed: 1}) {
		t.Fatalf("-o json: exit %d, %+v", code, res)
	}
	bad := res.Tests[0].Results[1]
	if bad.Passed || bad.Got == nil || strings.Join(bad.Got.Codes, ",") != "ERR_RETRY_LIMIT_EXCEEDED" || bad.Line != 8 {
		t.Errorf("the failed result: %+v", bad)
	}
}

// Each way an expectation fails, and each malformed test file: a failure
// exits 1 and says what differs; a file that cannot be a test exits 4 and
// names the field.
func TestTestExpectations(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "budget.yaml", "apiVersion: policy.retryguard.io/v1alpha1\nkind: RetryBudget\nmetadata: {name: telephony}\nspec: {retryPercent: 10}\n")
	writeFile(t, dir, "layers.yaml", docs(policyYAML("workflow", 3, ""), policyYAML("job", 3, "workflow")))
	writeFile(t, dir, "orphan.yaml", policyYAML("connector", 1, "nobody"))
	test := func(expect string, extra ...string) string {
		return "apiVersion: retryguard.io/v1alpha1\nkind: Test\nmetadata: {name: t}\nmanifests: [budget.yaml, layers.yaml, orphan.yaml]\n" +
			strings.Join(extra, "") + "expect:\n" + expect
	}
	const (
		budgetOK   = "- {kind: RetryBudget, name: telephony, verdict: pass}\n"
		workflowOK = "- {kind: RetryPolicy, name: workflow, verdict: pass}\n"
		jobRefused = "- {kind: RetryPolicy, name: job, verdict: refused, codes: [ERR_LAYER_AMPLIFICATION]}\n"
		orphanOK   = "- {kind: RetryPolicy, name: connector, verdict: pass}\n"
	)
	for name, tc := range map[string]struct {
		file string
		code int
		want string // in stdout for exit 1, in stderr for exit 4
	}{
		"every expectation met": {test(budgetOK + workflowOK + jobRefused + orphanOK), exitOK, "4 passed, 0 failed"},
		"the warning named": {test(budgetOK + workflowOK + jobRefused +
			"- {kind: RetryPolicy, name: connector, verdict: pass, warnings: ['\"nobody\" does not exist yet']}\n"), exitOK, "0 failed"},
		"a raised limit admits the job": {test(budgetOK+workflowOK+orphanOK+"- {kind: RetryPolicy, name: job, verdict: pass}\n",
			"limits: {maxLeafAttempts: 9}\n"), exitOK, "0 failed"},
		"pass expected, refused": {test(budgetOK + workflowOK + orphanOK + "- {kind: RetryPolicy, name: job, verdict: pass}\n"), exitRefused,
			"verdict: want pass, got refused: spec.maxAttempts"},
		"refused expected, admitted": {test(budgetOK + jobRefused + orphanOK +
			"- {kind: RetryPolicy, name: workflow, verdict: refused, codes: [ERR_RETRY_LIMIT_EXCEEDED]}\n"), exitRefused,
			"verdict: want refused with ERR_RETRY_LIMIT_EXCEEDED, got pass"},
		"a refusal nobody expected": {test(budgetOK + workflowOK + orphanOK), exitRefused, "refused, and the test expects nothing of it"},
		"no such document": {test(budgetOK + workflowOK + jobRefused + orphanOK + "- {kind: RetryPolicy, name: ghost, verdict: pass}\n"),
			exitRefused, "no document of the manifests is RetryPolicy default/ghost"},
		"a warning not given": {test(budgetOK + workflowOK + jobRefused + "- {kind: RetryPolicy, name: connector, verdict: pass, warnings: []}\n"),
			exitRefused, "warnings: want 0"},
		"another file": {test(budgetOK + workflowOK + jobRefused + "- {kind: RetryPolicy, name: connector, file: layers.yaml, verdict: pass}\n"),
			exitRefused, "RetryPolicy default/connector in layers.yaml"},
		"an unknown field":       {test(budgetOK+workflowOK+jobRefused+orphanOK, "severity: high\n"), exitUnreadable, `unknown field "severity"`},
		"refused without codes":  {test("- {kind: RetryPolicy, name: job, verdict: refused}\n"), exitUnreadable, "expect[0].codes: Required value"},
		"a verdict of its own":   {test("- {kind: RetryPolicy, name: job, verdict: fail}\n"), exitUnreadable, `expect[0].verdict: Unsupported value: "fail"`},
		"a code that is no code": {test("- {kind: RetryPolicy, name: job, verdict: refused, codes: [LAYER]}\n"), exitUnreadable, `expect[0].codes[0]`},
		"a limit the manager refuses": {test(budgetOK, "limits: {maxLeafAttempts: 0}\n"), exitUnreadable,
			"limits.maxLeafAttempts"},
		"a manifest that is not there": {strings.Replace(test(budgetOK), "orphan.yaml", "gone.yaml", 1), exitUnreadable, "gone.yaml"},
		"another kind": {strings.Replace(test(budgetOK), "kind: Test", "kind: Policy", 1), exitUnreadable,
			"a test is apiVersion retryguard.io/v1alpha1, kind Test"},
	} {
		t.Run(name, func(t *testing.T) {
			path := writeFile(t, dir, strings.ReplaceAll(name, " ", "-")+".yaml", tc.file)
			code, out, errOut := runCLI(t, "", "test", path)
			where := out
			if tc.code == exitUnreadable {
				where = errOut
			}
			if code != tc.code || !strings.Contains(where, tc.want) {
				t.Errorf("exit %d, want %d and %q in\n%s%s", code, tc.code, tc.want, out, errOut)
			}
		})
	}
}

// A directory without a test file is an error, not a pass: nothing was
// tested.
func TestTestNeedsATestFile(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "policy.yaml", policyYAML("connector", 1, ""))
	if code, _, errOut := runCLI(t, "", "test", dir); code != exitUnreadable || !strings.Contains(errOut, "holds no retryguard-test.yaml") {
		t.Errorf("exit %d: %s", code, errOut)
	}
	writeFile(t, dir, "sub/policies-test.yaml", "apiVersion: retryguard.io/v1alpha1\nkind: Test\nmetadata: {name: t}\n"+
		"manifests: [../policy.yaml]\nexpect:\n- {kind: RetryPolicy, name: connector, verdict: pass}\n")
	if code, out, errOut := runCLI(t, "", "test", dir, "--file-name", "policies-test.yaml"); code != exitOK {
		t.Errorf("--file-name: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, _ := runCLI(t, "", "test"); code != exitUsage {
		t.Errorf("no argument: exit %d, want %d", code, exitUsage)
	}
	if code, _, _ := runCLI(t, "", "test", dir, "-o", "dot"); code != exitUsage {
		t.Errorf("-o dot: exit %d, want %d", code, exitUsage)
	}
}
