// Command crdbounds writes the bounds of package limits (contract/limits, the
// one home of every bound) into the CRDs controller-gen generated. A marker
// cannot import a constant, so a CEL rule or message in api/ names one as
// ${limits.Name}; controller-gen copies the text, and this command replaces
// each reference in config/crd/bases with the constant's value: an integer as
// written in decimal, a time.Duration as a CEL duration literal's text (1s,
// 1h), a string as is. Changing a bound in contract/limits and running make
// manifests then moves the API server's rules, lint's (which evaluates the
// same CRD), the webhook, the payload's Validate and the pods together. A
// reference to a name limits does not define, or one left unreplaced, fails
// the run. Run it from the repository's root (make manifests does).
package main

import (
	"bytes"
	"fmt"
	"go/constant"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/retryguard/retryguard/internal/limitsource"
)

const (
	limitsDir = "contract/limits"
	crdDir    = "config/crd/bases"
)

// reference is how a marker names a bound: ${limits.MaxAttemptsCeiling}.
var reference = regexp.MustCompile(`\$\{limits\.([A-Za-z_][A-Za-z0-9_]*)\}`)

func main() {
	if err := run(limitsDir, crdDir); err != nil {
		fmt.Fprintln(os.Stderr, "crdbounds:", err)
		os.Exit(1)
	}
}

func run(limitsDir, crdDir string) error {
	values, err := limitValues(limitsDir)
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no CRD in %s; run controller-gen first (make manifests)", crdDir)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		out, err := substitute(f, data, values)
		if err != nil {
			return err
		}
		if !bytes.Equal(out, data) {
			if err := os.WriteFile(f, out, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// substitute replaces every reference in the CRD data (the file name is for
// errors) and writes the CRD as controller-gen does (sigs.k8s.io/yaml, after
// "---"), so that the file is the one controller-gen would have written had
// the marker stated the value: a longer reference wraps a line elsewhere.
func substitute(file string, data []byte, values map[string]string) ([]byte, error) {
	var doc any
	if err := yaml.Unmarshal(bytes.TrimPrefix(data, []byte("---\n")), &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var problems []string
	doc = replace(doc, func(s string) string {
		out := reference.ReplaceAllStringFunc(s, func(ref string) string {
			name := reference.FindStringSubmatch(ref)[1]
			v, ok := values[name]
			if !ok {
				problems = append(problems, fmt.Sprintf("%q names %s, which %s does not define as an integer, duration or string constant",
					s, name, limitsource.Path))
				return ref
			}
			return v
		})
		if strings.Contains(reference.ReplaceAllString(out, ""), "${") {
			problems = append(problems, fmt.Sprintf("%q holds a ${...} that is not ${limits.Name}", s))
		}
		return out
	})
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s: %s", file, strings.Join(problems, "; "))
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return append([]byte("---\n"), out...), nil
}

// replace applies f to every string in v, a document as yaml.Unmarshal
// returns it, keys excepted.
func replace(v any, f func(string) string) any {
	switch v := v.(type) {
	case string:
		return f(v)
	case map[string]any:
		for k, e := range v {
			v[k] = replace(e, f)
		}
	case []any:
		for i, e := range v {
			v[i] = replace(e, f)
		}
	}
	return v
}

// limitValues is the text of every constant of package limits a CRD can
// state, by name.
func limitValues(dir string) (map[string]string, error) {
	consts, err := limitsource.Read(dir)
	if err != nil {
		return nil, err
	}
	values := map[string]string{}
	for _, c := range consts {
		if v, ok := literal(c); ok {
			values[c.Name] = v
		}
	}
	return values, nil
}

// literal is the text a CEL rule or message states c's value with: an
// integer in decimal, a duration as CEL's duration() reads it, a string as
// is; false for a constant a CRD cannot state.
func literal(c limitsource.Const) (string, bool) {
	switch c.Value.Kind() {
	case constant.String:
		return constant.StringVal(c.Value), true
	case constant.Int:
		n, exact := constant.Int64Val(c.Value)
		if !exact {
			return "", false
		}
		if c.Duration {
			return durationLiteral(time.Duration(n)), true
		}
		return fmt.Sprint(n), true
	}
	return "", false
}

// durationLiteral is d as time.Duration's String writes it, without the zero
// units it appends: 1h, not 1h0m0s (CEL's duration() reads both).
func durationLiteral(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
