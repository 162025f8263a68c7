package chartcheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const (
	tableBegin = "<!-- values table: generated from values.schema.json and values.yaml by make chart-readme; do not edit -->"
	tableEnd   = "<!-- end of the values table -->"
)

// ordered is a JSON object with its keys in the order written.
type ordered struct {
	keys []string
	vals map[string]any
}

// decodeOrdered decodes one JSON value, keeping objects' key order.
func decodeOrdered(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		o := &ordered{vals: map[string]any{}}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeOrdered(dec)
			if err != nil {
				return nil, err
			}
			o.keys = append(o.keys, k.(string))
			o.vals[k.(string)] = v
		}
		_, err = dec.Token()
		return o, err
	case json.Delim('['):
		var a []any
		for dec.More() {
			v, err := decodeOrdered(dec)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err = dec.Token()
		return a, err
	}
	return tok, nil
}

// valuesTable is the README's table: a row for every value the schema
// describes that is not an object of further described values, in the
// schema's order, with its default from values.yaml and its description.
func valuesTable(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	schema, err := decodeOrdered(json.NewDecoder(bytes.NewReader(raw)))
	if err != nil {
		t.Fatal(err)
	}
	rawValues, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var defaults object
	if err := yaml.Unmarshal(rawValues, &defaults); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("| Value | Default | Meaning |\n|---|---|---|\n")
	var walk func(node *ordered, path string, def any)
	walk = func(node *ordered, path string, def any) {
		props, _ := node.vals["properties"].(*ordered)
		if props == nil {
			return
		}
		for _, k := range props.keys {
			p := props.vals[k].(*ordered)
			name := strings.TrimPrefix(path+"."+k, ".")
			var v any
			if m, ok := def.(object); ok {
				v = m[k]
			}
			if sub, _ := p.vals["properties"].(*ordered); sub != nil {
				walk(p, name, v)
				continue
			}
			desc, _ := p.vals["description"].(string)
			if desc == "" {
				t.Errorf("values.schema.json: %s has no description", name)
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", name, defaultCell(v), strings.ReplaceAll(desc, "|", `\|`))
		}
	}
	walk(schema.(*ordered), "", defaults)
	return b.String()
}

func defaultCell(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		if v == "" {
			return "`\"\"`"
		}
		return "`" + v + "`"
	}
	raw, _ := json.Marshal(v)
	return "`" + strings.ReplaceAll(string(raw), "|", `\|`) + "`"
}

// The README's values table is what the schema and values.yaml generate;
// make chart-readme (RETRYGUARD_WRITE_README=1) writes it.
func TestChartReadmeValuesTable(t *testing.T) {
	path := filepath.Join(chartDir, "README.md")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	begin, end := strings.Index(readme, tableBegin), strings.Index(readme, tableEnd)
	if begin < 0 || end < begin {
		t.Fatalf("%s has no values table between %q and %q", path, tableBegin, tableEnd)
	}
	want := readme[:begin+len(tableBegin)] + "\n" + valuesTable(t) + readme[end:]
	if want == readme {
		return
	}
	if os.Getenv("RETRYGUARD_WRITE_README") != "" {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("the values table in %s differs from what values.schema.json and values.yaml generate: run make chart-readme", path)
}

// The table has a row for every value, and the check sees a change.
func TestChartReadmeValuesTableCoversEveryValue(t *testing.T) {
	table := valuesTable(t)
	for _, want := range []string{"`imagePullSecrets`", "`fullnameOverride`", "`nameOverride`", "`image.digest`", "`podAnnotations`", "`podLabels`",
		"`affinity`", "`tolerations`", "`nodeSelector`", "`priorityClassName`", "`logLevel` | `info`", "`extraArgs`", "`metrics.podMonitor.enabled` | `false`",
		"`resources.limits`", "`limits.maxLeafAttempts` | `3`"} {
		if !strings.Contains(table, want) {
			t.Errorf("the generated table lacks %s:\n%s", want, table)
		}
	}
}
