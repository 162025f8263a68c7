package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/retryguard/retryguard/cmd/kubectl-retryguard/internal/output"
	"github.com/retryguard/retryguard/internal/testenv"
)

func pluginDoc(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(testenv.Path("docs", "kubectl-plugin.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// section is the text of docs/kubectl-plugin.md from the heading to the next
// heading of the same level.
func section(t *testing.T, doc, heading string) string {
	t.Helper()
	i := strings.Index(doc, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("docs/kubectl-plugin.md has no %q", heading)
	}
	rest := doc[i+len(heading)+2:]
	if j := strings.Index(rest, "\n## "); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// The exit-code table has one row per constant, in order, and no other.
func TestExitCodesAreDocumented(t *testing.T) {
	rows := regexp.MustCompile("(?m)^\\| `(\\d+)` \\|").FindAllStringSubmatch(section(t, pluginDoc(t), "## Exit codes"), -1)
	var documented []string
	for _, r := range rows {
		documented = append(documented, r[1])
	}
	var defined []string
	for code := range len(exitCodes) {
		if _, ok := exitCodes[code]; !ok {
			t.Fatalf("exit codes are not 0..%d: %v", len(exitCodes)-1, exitCodes)
		}
		defined = append(defined, fmt.Sprint(code))
	}
	if !slices.Equal(documented, defined) {
		t.Errorf("docs/kubectl-plugin.md#exit-codes lists %v, exitcodes.go defines %v", documented, defined)
	}
}

// Every example of the machine-readable output decodes into its Go type,
// refusing unknown fields, and names every field the type has.
func TestOutputSchemaIsDocumented(t *testing.T) {
	types := map[string]any{
		output.KindLintResult: output.LintResult{}, output.KindLayerGraph: output.LayerGraph{},
		output.KindExplanation: output.Explanation{}, output.KindCheckResult: output.CheckResult{}, output.KindVersion: output.Version{},
		output.KindTestResult: output.TestResult{}, output.KindDeadLetterList: output.DeadLetterList{},
	}
	blocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllStringSubmatch(section(t, pluginDoc(t), "## Machine-readable output"), -1)
	seen := map[string]bool{}
	for _, b := range blocks {
		var meta output.TypeMeta
		if err := json.Unmarshal([]byte(b[1]), &meta); err != nil {
			t.Errorf("an example is not JSON: %v\n%s", err, b[1])
			continue
		}
		typ, ok := types[meta.Kind]
		if !ok || meta.APIVersion != output.APIVersion {
			t.Errorf("an example of %s %s, which the plugin does not print", meta.APIVersion, meta.Kind)
			continue
		}
		seen[meta.Kind] = true
		v := reflect.New(reflect.TypeOf(typ))
		dec := json.NewDecoder(strings.NewReader(b[1]))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v.Interface()); err != nil {
			t.Errorf("the %s example does not decode into output.%T: %v", meta.Kind, typ, err)
		}
		for _, f := range jsonFields(reflect.TypeOf(typ), "") {
			name := f[strings.LastIndex(f, ".")+1:]
			if !strings.Contains(b[1], `"`+name+`":`) {
				t.Errorf("the %s example lacks the field %s", meta.Kind, f)
			}
		}
	}
	for kind := range types {
		if !seen[kind] {
			t.Errorf("docs/kubectl-plugin.md#machine-readable-output has no example of %s", kind)
		}
	}
}

// jsonFields lists the JSON field paths of t, through structs, pointers and
// slices; an embedded struct's fields are its parent's.
func jsonFields(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	// A type with its own JSON form (time.Time) is one field.
	if t.Kind() != reflect.Struct || t.Implements(reflect.TypeFor[json.Marshaler]()) {
		return nil
	}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous {
			out = append(out, jsonFields(f.Type, prefix)...)
			continue
		}
		out = append(out, prefix+name)
		out = append(out, jsonFields(f.Type, prefix+name+".")...)
	}
	return out
}
