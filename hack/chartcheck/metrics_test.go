package chartcheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every retryguard_* metric the code defines is documented in
// docs/metrics.md (TestAlertsAndDashboardQueryOnlyDefinedMetrics holds the
// alerts and the dashboard to the metrics that exist).
func TestEveryMetricIsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for metric, where := range definedMetrics(t) {
		if !strings.HasPrefix(metric, "retryguard_") {
			continue
		}
		n++
		if !strings.Contains(string(doc), "`"+metric+"`") {
			t.Errorf("%s (%s) is not in docs/metrics.md", metric, where)
		}
	}
	if n < 5 {
		t.Fatalf("found only %d retryguard_* metrics: the scan is broken", n)
	}
}
