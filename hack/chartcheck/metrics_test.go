package chartcheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every retryguard_* metric the code defines is documented in
// docs/metrics.md, and every metric the chart's alerts query exists.
func TestEveryMetricIsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]string{}
	name := regexp.MustCompile(`Name:\s*"(retryguard_[a-z_]+)"`)
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() && (d.Name() == ".git" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range name.FindAllStringSubmatch(string(src), -1) {
			defined[m[1]] = path
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(defined) < 5 {
		t.Fatalf("found only %v: the scan is broken", defined)
	}
	for metric, path := range defined {
		if !strings.Contains(string(doc), "`"+metric+"`") {
			t.Errorf("%s (%s) is not in docs/metrics.md", metric, path)
		}
	}
	rule := mustTemplate(t, "metrics.prometheusRule.enabled=true")["PrometheusRule"][0]
	for _, r := range rule["spec"].(object)["groups"].([]any)[0].(object)["rules"].([]any) {
		expr := r.(object)["expr"].(string)
		for _, m := range regexp.MustCompile(`retryguard_[a-z_]+`).FindAllString(expr, -1) {
			base := strings.TrimSuffix(m, "_bucket")
			if defined[base] == "" {
				t.Errorf("alert %v queries %s, which no code defines", r.(object)["alert"], m)
			}
		}
	}
}
