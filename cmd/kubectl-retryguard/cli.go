package main

import (
	"github.com/spf13/cobra"

	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/lint"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/manifest"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/output"
)

// Output formats of lint, besides json and yaml.
const outputText = "text"

func newLintCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lint -f PATH [-f PATH ...]",
		Short: "Admit manifests offline with the API server's and the webhook's rules",
		Long: `Admit manifests offline with the same single-object and cross-object rules as
the API server and the admission webhook. No cluster needed.

Exit status: 0 every document admitted; 1 a document would be refused; 3 with
--warnings-as-errors, every document admitted and at least one warning; 4 a path
or standard input could not be read; 2 usage (docs/kubectl-plugin.md#exit-codes).`,
		Example: `  kubectl retryguard lint -f policies/
  kubectl retryguard lint -f budget.yaml -f policies.yaml --max-leaf-attempts 9
  kustomize build overlays/prod | kubectl retryguard lint -f -
  kubectl retryguard lint -f config/samples -o json | jq '.documents[] | select(.verdict == "refused")'`,
		Args: cobra.NoArgs,
	}
	var paths []string
	opts := lint.DefaultOptions()
	var verbose, warningsAsErrors bool
	f := cmd.Flags()
	f.StringArrayVarP(&paths, "filename", "f", nil,
		"A file, a directory (walked for .yaml, .yml and .json) or - for standard input; repeatable. Documents are admitted in order.")
	f.StringVarP(&opts.Namespace, "namespace", "n", lint.DefaultNamespace, "The namespace of objects that set none.")
	f.BoolVarP(&verbose, "verbose", "v", false, "Also list the documents that are not Retryguard objects (json and yaml always list them).")
	f.BoolVar(&warningsAsErrors, "warnings-as-errors", false, "Exit 3 when every document is admitted but admission warned about one.")
	format := outputFlag(cmd, outputText)
	limits := limitsFlags(cmd)
	_ = cmd.MarkFlagFilename("filename", "yaml", "yml", "json")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkOutput(cmd, *format, outputText); err != nil {
			return err
		}
		if len(paths) == 0 {
			_ = cmd.Usage()
			return exitf(exitUsage, "lint: give the manifests with -f PATH (and nothing else)")
		}
		opts.Limits = *limits
		docs, err := manifest.Load(paths, stdinOf(cmd))
		if err != nil {
			return exitf(exitUnreadable, "lint: %v", err)
		}
		results, err := lint.Run(cmd.Context(), docs, opts)
		if err != nil {
			return exitf(exitFailed, "lint: %v", err)
		}
		if output.IsMachine(*format) {
			if err := writeOutput(cmd, *format, lintResult(results)); err != nil {
				return err
			}
		} else {
			lint.Report(cmd.OutOrStdout(), results, verbose)
		}
		return lintExit(results, warningsAsErrors)
	}
	return cmd
}

// lintExit is lint's exit status: refused, else warnings when they count
// as errors, else OK. Notes never count.
func lintExit(results []lint.Result, warningsAsErrors bool) error {
	if lint.AnyRefused(results) {
		return exitWith(exitRefused)
	}
	if warningsAsErrors {
		for _, r := range results {
			if len(r.Warnings) > 0 {
				return exitWith(exitWarnings)
			}
		}
	}
	return nil
}

// lintResult is the LintResult of a run.
func lintResult(results []lint.Result) output.LintResult {
	out := output.LintResult{TypeMeta: output.Meta(output.KindLintResult), Documents: []output.LintDocument{}}
	for _, r := range results {
		d := output.LintDocument{File: r.Doc.Source, Line: r.Doc.Line, APIVersion: r.Doc.APIVersion, Kind: r.Doc.Kind,
			Namespace: r.Namespace, Name: r.Name, Verdict: string(r.Verdict), Warnings: r.Warnings, Notes: r.Notes}
		if r.Err != nil {
			d.Error = r.Err.Error()
		}
		for _, c := range r.Causes {
			d.Causes = append(d.Causes, output.Cause{Field: c.Field, Code: lint.CodeOf(c.Message), Message: c.Message})
		}
		out.Documents = append(out.Documents, d)
		s := &out.Summary
		s.Documents++
		s.Warnings += len(r.Warnings)
		switch r.Verdict {
		case lint.Created:
			s.Created++
		case lint.Updated:
			s.Updated++
		case lint.Refused:
			s.Refused++
		case lint.Skipped:
			s.Skipped++
		}
	}
	return out
}
