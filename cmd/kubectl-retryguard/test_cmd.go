package main

import (
	"bytes"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/output"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/policytest"
)

// outputJUnit is test's JUnit XML format, besides text, json and yaml.
const outputJUnit = "junit"

func newTestCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "test DIR|FILE [DIR|FILE ...]",
		Short: "Run the policy tests of " + policytest.FileName + " files: which manifests are admitted, which refused with which codes",
		Long: `Run declarative policy tests, as kyverno test does: each ` + policytest.FileName + ` under DIR
(or each FILE named) lists manifests and what admission must answer to them:
pass or refused, the ERR_ codes of a refusal and the warnings. The manifests
are admitted offline by lint's engine, with the API server's and the
webhook's rules. No cluster needed. A refusal that no expectation names fails
the test.

Exit status: 0 every expectation met; 1 an expectation failed; 4 a test file or
a manifest could not be read, or a test file is malformed; 5 the JUnit report
could not be written; 2 usage (docs/kubectl-plugin.md#exit-codes).`,
		Example: `  kubectl retryguard test config/samples
  kubectl retryguard test policies/ --junit report.xml
  kubectl retryguard test policies/ -o json | jq '.tests[].results[] | select(.passed | not)'`,
		Args: cobra.MinimumNArgs(1),
	}
	fileName := cmd.Flags().String("file-name", policytest.FileName, "The name of the test files to look for in a directory.")
	junit := cmd.Flags().String("junit", "", "Also write the results to this file as a JUnit XML report.")
	_ = cmd.MarkFlagFilename("junit", "xml")
	format := outputFlag(cmd, outputText, outputJUnit)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := checkOutput(cmd, *format, outputText, outputJUnit); err != nil {
			return err
		}
		files, err := policytest.Find(args, *fileName)
		if err != nil {
			return exitf(exitUnreadable, "test: %v", err)
		}
		var tests []policytest.Test
		for _, f := range files {
			ts, err := policytest.Load(f)
			if err != nil {
				return exitf(exitUnreadable, "test: %v", err)
			}
			tests = append(tests, ts...)
		}
		var cases []output.TestCase
		for _, t := range tests {
			tc, err := policytest.Run(cmd.Context(), t)
			if err != nil {
				return exitf(exitUnreadable, "test: %v", err)
			}
			cases = append(cases, tc)
		}
		res := policytest.Result(cases)
		if *junit != "" {
			var buf bytes.Buffer
			if err := policytest.JUnit(&buf, res); err != nil {
				return exitf(exitFailed, "test: the JUnit report: %v", err)
			}
			if err := os.WriteFile(*junit, buf.Bytes(), 0o644); err != nil {
				return exitf(exitFailed, "test: writing the JUnit report: %v", err)
			}
		}
		switch {
		case *format == outputJUnit:
			if err := policytest.JUnit(cmd.OutOrStdout(), res); err != nil {
				return exitf(exitFailed, "test: writing the output: %v", err)
			}
		case output.IsMachine(*format):
			if err := writeOutput(cmd, *format, res); err != nil {
				return err
			}
		default:
			policytest.Report(cmd.OutOrStdout(), res)
		}
		if !res.Passed {
			if *format != outputText {
				fmt.Fprintf(cmd.ErrOrStderr(), "test: %d of %d results failed\n", res.Summary.Failed, res.Summary.Results)
			}
			return exitWith(exitRefused)
		}
		return nil
	}
	return cmd
}
