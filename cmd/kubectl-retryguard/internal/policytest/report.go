package policytest

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"

	"github.com/onsi/ginkgo/v2/reporters"

	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/output"
)

// Result gathers the test cases of a run and counts them.
func Result(cases []output.TestCase) output.TestResult {
	res := output.TestResult{TypeMeta: output.Meta(output.KindTestResult), Passed: true, Tests: cases}
	if res.Tests == nil {
		res.Tests = []output.TestCase{}
	}
	for _, tc := range cases {
		res.Summary.Tests++
		res.Passed = res.Passed && tc.Passed
		for _, r := range tc.Results {
			res.Summary.Results++
			if r.Passed {
				res.Summary.Passed++
			} else {
				res.Summary.Failed++
			}
		}
	}
	return res
}

// Report writes one line per test, one per result under it (the failures
// in full), and a summary.
func Report(w io.Writer, res output.TestResult) {
	for _, tc := range res.Tests {
		fmt.Fprintf(w, "%s: %s: %s\n", tc.File, tc.Name, passFail(tc.Passed))
		for _, r := range tc.Results {
			fmt.Fprintf(w, "  %-4s %s\n", passFail(r.Passed), caseName(r))
			for _, f := range r.Failures {
				fmt.Fprintf(w, "       %s\n", f)
			}
		}
	}
	s := res.Summary
	fmt.Fprintf(w, "%d tests, %d results: %d passed, %d failed\n", s.Tests, s.Results, s.Passed, s.Failed)
}

func passFail(ok bool) string {
	if ok {
		return "pass"
	}
	return "FAIL"
}

// caseName names a result as a test case: the object, where it is, and
// the verdict expected.
func caseName(r output.TestExpectation) string {
	name := fmt.Sprintf("%s %s/%s", r.Kind, r.Namespace, r.Name)
	switch {
	case r.Line > 0:
		name += fmt.Sprintf(" (%s:%d)", r.File, r.Line)
	case r.File != "":
		name += " (" + r.File + ")"
	}
	if r.Expected == nil {
		return name + ": not expected to be refused"
	}
	name += ": " + r.Expected.Verdict
	if len(r.Expected.Codes) > 0 {
		name += " " + strings.Join(r.Expected.Codes, ", ")
	}
	return name
}

// JUnit writes the run as a JUnit XML report, in Ginkgo's schema (the one
// CI systems read from `ginkgo --junit-report`): a testsuite per test
// document, a testcase per result, a failure for each that failed.
func JUnit(w io.Writer, res output.TestResult) error {
	suites := reporters.JUnitTestSuites{}
	for _, tc := range res.Tests {
		suite := reporters.JUnitTestSuite{Name: tc.Name, Package: tc.File}
		for _, r := range tc.Results {
			c := reporters.JUnitTestCase{Name: caseName(r), Classname: tc.File + ": " + tc.Name, Status: "passed"}
			if !r.Passed {
				c.Status = "failed"
				c.Failure = &reporters.JUnitFailure{Message: r.Failures[0], Type: "failed", Description: strings.Join(r.Failures, "\n")}
				suite.Failures++
			}
			suite.Tests++
			suite.TestCases = append(suite.TestCases, c)
		}
		suites.Tests += suite.Tests
		suites.Failures += suite.Failures
		suites.TestSuites = append(suites.TestSuites, suite)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(suites); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
