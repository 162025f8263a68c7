// Package output is the machine-readable face of the plugin: the objects that
// `-o json` and `-o yaml` print, one per run, each with an apiVersion and a
// kind so that a CI job can tell what it reads and which version of its
// shape (docs/kubectl-plugin.md#machine-readable-output). A field is added
// within a version; a field renamed, removed or changed in meaning is a new
// version. The default, human format is the commands' own and is no schema.
package output

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"sigs.k8s.io/yaml"
)

// APIVersion versions every object below.
const APIVersion = "retryguard.io/v1alpha1"

// The kinds the plugin prints.
const (
	KindLintResult  = "LintResult"
	KindLayerGraph  = "LayerGraph"
	KindExplanation = "Explanation"
	KindCheckResult = "CheckResult"
	KindVersion     = "Version"
	KindTestResult  = "TestResult"
	// KindDeadLetterList is deadletters list's and reconcile's.
	KindDeadLetterList = "DeadLetterList"
)

// The formats every command takes with -o, besides its own human ones.
const (
	FormatJSON = "json"
	FormatYAML = "yaml"
)

// Formats are the machine-readable formats.
var Formats = []string{FormatJSON, FormatYAML}

// IsMachine reports whether format is one of Formats.
func IsMachine(format string) bool { return slices.Contains(Formats, format) }

// TypeMeta names an object's shape.
type TypeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// Meta returns the TypeMeta of kind at APIVersion.
func Meta(kind string) TypeMeta { return TypeMeta{APIVersion: APIVersion, Kind: kind} }

// Write prints v in format (json: indented, one object; yaml: one document).
func Write(w io.Writer, format string, v any) error {
	switch format {
	case FormatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case FormatYAML:
		out, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(out)
		return err
	}
	return fmt.Errorf("output format %q: want one of %v", format, Formats)
}
