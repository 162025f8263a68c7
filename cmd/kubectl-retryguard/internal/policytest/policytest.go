// Package policytest runs declarative policy tests, as `kyverno test` runs a
// kyverno-test.yaml: a test file lists manifests and what admission must
// answer to each of them (admitted or refused, with which ERR_ codes and
// which warnings), and the manifests are admitted by lint's engine
// (lint.Run), the same verdicts `kubectl retryguard lint` gives. The file
// format is documented in docs/kubectl-plugin.md#test-policy-tests-in-ci.
package policytest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/retryguard/retryguard/api/policygraph"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/lint"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/manifest"
	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/output"
	"github.com/retryguard/retryguard/internal/options"
)

// FileName is the name a directory's test files have.
const FileName = "retryguard-test.yaml"

// Kind is the kind of a test document; its apiVersion is output.APIVersion.
const Kind = "Test"

// The verdicts a test expects.
const (
	// Pass: admitted, as a new object (lint's created) or as a
	// replacement of an earlier one (updated).
	Pass = "pass"
	// Refused: the API server would refuse the document.
	Refused = "refused"
)

// Test is one test document: manifests admitted in order, as by lint, in a
// world of their own, and what admission must answer.
type Test struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	// Manifests are files or directories, relative to the test file,
	// admitted in order as `lint -f` admits them.
	Manifests []string `json:"manifests"`
	// Namespace is given to objects that set none (lint -n); default
	// "default".
	Namespace string `json:"namespace,omitempty"`
	// Limits are the platform limits to admit with; the manager's
	// defaults when absent.
	Limits *Limits `json:"limits,omitempty"`
	// Expect is what admission must answer.
	Expect []Expectation `json:"expect"`

	// path is the test file, dir its directory, and doc the document's
	// place in the file (1-based).
	path, dir string
	doc       int
}

// Limits are the manager's platform-limit flags.
type Limits struct {
	MaxLeafAttempts *int64 `json:"maxLeafAttempts,omitempty"`
	MaxRetryPercent *int32 `json:"maxRetryPercent,omitempty"`
}

// Expectation is what admission must answer to the documents it names.
type Expectation struct {
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	// File narrows the match to the documents of one manifest file,
	// relative to the test file.
	File string `json:"file,omitempty"`
	// Verdict is pass or refused.
	Verdict string `json:"verdict"`
	// Codes are the ERR_ codes of a refusal, all of them, in any order;
	// required for refused ([] for a refusal without a code).
	Codes *[]string `json:"codes,omitempty"`
	// Warnings, when given, are all the warnings: each is found in a
	// warning of its own, and there are no others.
	Warnings *[]string `json:"warnings,omitempty"`
}

// Find lists the test files of each path: a file is one; a directory holds
// those named name, at any depth, in lexical order.
func Find(paths []string, name string) ([]string, error) {
	var out []string
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !info.IsDir() {
			out = append(out, p)
			continue
		}
		before := len(out)
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && d.Name() == name {
				out = append(out, path)
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		if len(out) == before {
			return nil, fmt.Errorf("%s holds no %s", p, name)
		}
	}
	return out, nil
}

// Load reads the test documents of a file, strictly: an unknown field, a
// missing one or a value out of place is an error naming the field.
func Load(path string) ([]Test, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var tests []Test
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for n := 1; ; {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		t := Test{path: path, dir: filepath.Dir(path), doc: n}
		n++
		if err := yaml.UnmarshalStrict(doc, &t); err != nil {
			return nil, fmt.Errorf("%s: %w", t.where(), err)
		}
		if err := t.validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", t.where(), err)
		}
		tests = append(tests, t)
	}
	if len(tests) == 0 {
		return nil, fmt.Errorf("%s holds no test", path)
	}
	return tests, nil
}

var commentLine = regexp.MustCompile(`(?m)^\s*#.*$`)

func stripComments(doc []byte) []byte { return commentLine.ReplaceAll(doc, nil) }

var codeSyntax = regexp.MustCompile(`^ERR_[A-Z][A-Z0-9_]*$`)

// where names the test document: the file, and the document when the file
// holds several.
func (t *Test) where() string {
	if t.Metadata.Name != "" {
		return fmt.Sprintf("%s: test %q", t.path, t.Metadata.Name)
	}
	return fmt.Sprintf("%s: document %d", t.path, t.doc)
}

func (t *Test) validate() error {
	switch {
	case t.APIVersion != output.APIVersion || t.Kind != Kind:
		return fmt.Errorf("apiVersion %q, kind %q: a test is apiVersion %s, kind %s", t.APIVersion, t.Kind, output.APIVersion, Kind)
	case t.Metadata.Name == "":
		return errors.New("metadata.name: Required value")
	case len(t.Manifests) == 0:
		return errors.New("manifests: Required value: the files or directories to admit, relative to the test file")
	case len(t.Expect) == 0:
		return errors.New("expect: Required value: what admission must answer")
	}
	for i, e := range t.Expect {
		at := fmt.Sprintf("expect[%d]", i)
		switch {
		case e.Kind == "":
			return fmt.Errorf("%s.kind: Required value", at)
		case e.Name == "":
			return fmt.Errorf("%s.name: Required value", at)
		case e.Verdict != Pass && e.Verdict != Refused:
			return fmt.Errorf("%s.verdict: Unsupported value: %q: supported values: %q, %q", at, e.Verdict, Pass, Refused)
		case e.Verdict == Refused && e.Codes == nil:
			return fmt.Errorf("%s.codes: Required value: a refusal's ERR_ codes ([] for a refusal without one)", at)
		case e.Verdict == Pass && e.Codes != nil && len(*e.Codes) > 0:
			return fmt.Errorf("%s.codes: Forbidden: an admitted document has no codes", at)
		}
		for j, c := range deref(e.Codes) {
			if !codeSyntax.MatchString(c) {
				return fmt.Errorf("%s.codes[%d]: Invalid value: %q: a code is ERR_ and capitals, such as ERR_LAYER_AMPLIFICATION", at, j, c)
			}
		}
	}
	_, err := t.limits()
	return err
}

// limits are the test's platform limits, checked by the manager's own flag
// parsers (options.BindPlatformLimits), so a limit the manager refuses is
// refused here.
func (t *Test) limits() (policygraph.Limits, error) {
	var l policygraph.Limits
	fs := flag.NewFlagSet("limits", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	options.BindPlatformLimits(fs, &l)
	if t.Limits == nil {
		return l, nil
	}
	for _, s := range []struct {
		flag, field string
		v           *int64
	}{
		{"max-leaf-attempts", "maxLeafAttempts", t.Limits.MaxLeafAttempts},
		{"max-retry-percent", "maxRetryPercent", widen(t.Limits.MaxRetryPercent)},
	} {
		if s.v == nil {
			continue
		}
		if err := fs.Set(s.flag, strconv.FormatInt(*s.v, 10)); err != nil {
			return l, fmt.Errorf("limits.%s: %w", s.field, err)
		}
	}
	return l, nil
}

func widen(v *int32) *int64 {
	if v == nil {
		return nil
	}
	w := int64(*v)
	return &w
}

func deref(s *[]string) []string {
	if s == nil {
		return nil
	}
	return *s
}

// Run admits the test's manifests with lint's engine and holds each answer
// to the expectations. A document no expectation names must not be
// refused: a refusal nobody expected changes what the documents after it
// meet. An error means the manifests could not be read or the engine
// failed, not that an expectation failed.
func Run(ctx context.Context, t Test) (output.TestCase, error) {
	tc := output.TestCase{File: t.path, Name: t.Metadata.Name, Results: []output.TestExpectation{}}
	limits, err := t.limits()
	if err != nil {
		return tc, err
	}
	paths := make([]string, len(t.Manifests))
	for i, m := range t.Manifests {
		paths[i] = t.resolve(m)
	}
	docs, err := manifest.Load(paths, strings.NewReader(""))
	if err != nil {
		return tc, fmt.Errorf("%s: manifests: %w", t.where(), err)
	}
	opts := lint.DefaultOptions()
	opts.Limits = limits
	if t.Namespace != "" {
		opts.Namespace = t.Namespace
	}
	results, err := lint.Run(ctx, docs, opts)
	if err != nil {
		return tc, fmt.Errorf("%s: %w", t.where(), err)
	}
	expected := make([]bool, len(results))
	for _, e := range t.Expect {
		ns := cmpOr(e.Namespace, opts.Namespace)
		want := output.TestVerdict{Verdict: e.Verdict, Codes: sorted(deref(e.Codes)), Warnings: deref(e.Warnings)}
		matched := false
		for i, r := range results {
			if r.Doc.Kind != e.Kind || r.Name != e.Name || r.Namespace != ns || e.File != "" && !samePath(t.resolve(e.File), r.Doc.Source) {
				continue
			}
			matched, expected[i] = true, true
			tc.Results = append(tc.Results, judge(e, ns, want, r))
		}
		if !matched {
			res := output.TestExpectation{Kind: e.Kind, Namespace: ns, Name: e.Name, File: e.File, Expected: &want,
				Failures: []string{"no document of the manifests is " + e.Kind + " " + ns + "/" + e.Name + inFile(e.File)}}
			tc.Results = append(tc.Results, res)
		}
	}
	for i, r := range results {
		if !expected[i] && r.Verdict == lint.Refused {
			got := gotOf(r)
			tc.Results = append(tc.Results, output.TestExpectation{Kind: r.Doc.Kind, Namespace: r.Namespace, Name: r.Name,
				File: r.Doc.Source, Line: r.Doc.Line, Got: &got,
				Failures: []string{"refused, and the test expects nothing of it: " + refusal(r)}})
		}
	}
	tc.Passed = true
	for i := range tc.Results {
		tc.Results[i].Passed = len(tc.Results[i].Failures) == 0
		tc.Passed = tc.Passed && tc.Results[i].Passed
	}
	return tc, nil
}

func inFile(file string) string {
	if file == "" {
		return ""
	}
	return " in " + file
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// resolve is a manifest path as the test file names it: relative to the
// test file's directory.
func (t *Test) resolve(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(t.dir, p)
}

func samePath(a, b string) bool { return filepath.Clean(a) == filepath.Clean(b) }

// judge holds one document's answer to an expectation.
func judge(e Expectation, ns string, want output.TestVerdict, r lint.Result) output.TestExpectation {
	got := gotOf(r)
	res := output.TestExpectation{Kind: e.Kind, Namespace: ns, Name: e.Name, File: r.Doc.Source, Line: r.Doc.Line, Expected: &want, Got: &got}
	fail := func(format string, a ...any) { res.Failures = append(res.Failures, fmt.Sprintf(format, a...)) }
	switch {
	case r.Verdict == lint.Skipped:
		fail("verdict: want %s, got skipped (lint checks only RetryPolicies, RetryBudgets and Namespaces)", e.Verdict)
	case e.Verdict == Pass && r.Verdict == lint.Refused:
		fail("verdict: want pass, got refused: %s", refusal(r))
	case e.Verdict == Refused && r.Verdict != lint.Refused:
		fail("verdict: want refused with %s, got %s", codeList(want.Codes), got.Verdict)
	case e.Verdict == Refused && !slices.Equal(want.Codes, got.Codes):
		fail("codes: want %s, got %s: %s", codeList(want.Codes), codeList(got.Codes), refusal(r))
	}
	if e.Warnings != nil {
		if missing := unmatched(*e.Warnings, r.Warnings); len(missing) > 0 || len(r.Warnings) != len(*e.Warnings) {
			fail("warnings: want %d (%q), got %d (%q)", len(*e.Warnings), *e.Warnings, len(r.Warnings), r.Warnings)
		}
	}
	return res
}

// gotOf is what lint answered: its verdict word, the sorted codes and the
// warnings.
func gotOf(r lint.Result) output.TestVerdict {
	v := output.TestVerdict{Verdict: string(r.Verdict), Codes: codesOf(r), Warnings: r.Warnings}
	if r.Verdict == lint.Created || r.Verdict == lint.Updated {
		v.Verdict = Pass
	}
	return v
}

// codesOf lists the distinct ERR_ codes of a refusal, sorted: those of its
// field errors, or of its message when it has none.
func codesOf(r lint.Result) []string {
	codes := []string{}
	for _, c := range r.Causes {
		if code := lint.CodeOf(c.Message); code != "" {
			codes = append(codes, code)
		}
	}
	if len(r.Causes) == 0 && r.Err != nil {
		if code := lint.CodeOf(r.Err.Error()); code != "" {
			codes = append(codes, code)
		}
	}
	return sorted(codes)
}

func sorted(codes []string) []string {
	out := slices.Clone(codes)
	if out == nil {
		out = []string{}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func codeList(codes []string) string {
	if len(codes) == 0 {
		return "no code"
	}
	return strings.Join(codes, ", ")
}

// refusal is the refusal's field errors, or its message.
func refusal(r lint.Result) string {
	if len(r.Causes) > 0 {
		var parts []string
		for _, c := range r.Causes {
			parts = append(parts, c.Field+": "+c.Message)
		}
		return strings.Join(parts, "; ")
	}
	if r.Err != nil {
		return r.Err.Error()
	}
	return string(r.Verdict)
}

// unmatched lists the wanted warnings that find no warning of their own
// holding them.
func unmatched(want, got []string) []string {
	used := make([]bool, len(got))
	var missing []string
	for _, w := range want {
		found := false
		for i, g := range got {
			if !used[i] && strings.Contains(g, w) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			missing = append(missing, w)
		}
	}
	return missing
}
