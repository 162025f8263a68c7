package chartcheck

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/retryguard/retryguard/runtime/retry"
	"github.com/retryguard/retryguard/runtime/watch"
)

// rules renders the chart's PrometheusRule and returns its groups.
func rules(t *testing.T, sets ...string) []any {
	t.Helper()
	rule := mustTemplate(t, append([]string{"metrics.prometheusRule.enabled=true"}, sets...)...)["PrometheusRule"][0]
	return rule["spec"].(object)["groups"].([]any)
}

// eachRule calls f with every rule of the chart's alerts.
func eachRule(t *testing.T, f func(rule object)) {
	t.Helper()
	for _, g := range rules(t) {
		for _, r := range g.(object)["rules"].([]any) {
			f(r.(object))
		}
	}
}

// The chart's alerts pass promtool's rule unit tests (tests/alerts_test.yaml)
// and its check, the rules rendered as a user's release would be. promtool is
// built from the Go module proxy by hack/gotool.sh promtool (make chart-check passes
// its path in PROMTOOL).
func TestAlertsPassPromtoolRuleTests(t *testing.T) {
	promtool := os.Getenv("PROMTOOL")
	if promtool == "" {
		t.Fatal("needs PROMTOOL (hack/gotool.sh promtool builds it): run make chart-check")
	}
	dir := t.TempDir()
	raw, err := yaml.Marshal(object{"groups": rules(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts.yaml"), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join(chartDir, "tests", "alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), tests, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// Every alert has a promtool case in which it fires and one in which it must
// not; the alert that could not fire (attempts per operation above the
// platform's limit: at most 3, and a pod sees only its own layer) is gone.
func TestEveryAlertIsTestedFiringAndSilent(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "tests", "alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var suite struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(raw, &suite); err != nil {
		t.Fatal(err)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range suite.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	var alerts []string
	eachRule(t, func(r object) {
		if name, ok := r["alert"].(string); ok {
			alerts = append(alerts, name)
			if !fires[name] || !silent[name] {
				t.Errorf("alert %s: a firing case %v, a silent case %v", name, fires[name], silent[name])
			}
		}
	})
	for _, want := range []string{"RetryguardRetryRecoveryLag", "RetryguardRetryBudgetExhausted", "RetryguardManagerDown", "RetryguardWebhookErrors",
		"RetryguardWebhookCertificateExpiresSoon", "RetryguardOperationLatencyAboveSLA"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s in %v", want, alerts)
		}
	}
	if slices.Contains(alerts, "RetryguardAttemptsPerOperationAboveLimit") {
		t.Error("the alert on attempts per operation, which cannot fire, is still shipped")
	}
}

// definedMetrics are the series that exist: those the runtime registers
// (its collectors' descriptions), those the repository's code and
// controller-runtime name, the chart's recording rules, and Prometheus's up.
func definedMetrics(t *testing.T) map[string]string {
	t.Helper()
	defined := map[string]string{"up": "Prometheus"}
	reg := &describing{names: defined}
	retry.NewMetrics(reg)
	reg.MustRegister(watch.Collector(watch.NewFiles(t.TempDir())))
	if defined["retryguard_operation_duration_seconds"] == "" {
		t.Fatalf("the runtime registered only %v", defined)
	}
	name := regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*)"([a-z_:]+)"`)
	scan := func(dir, where string) {
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() && (d.Name() == ".git" || d.Name() == "bin" || d.Name() == "testdata") {
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
				if defined[m[1]] == "" {
					defined[m[1]] = where + ":" + path
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	scan(root, "")
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/controller-runtime").Output()
	if err != nil {
		t.Fatalf("go list controller-runtime: %v", err)
	}
	scan(filepath.Join(strings.TrimSpace(string(out)), "pkg"), "controller-runtime")
	eachRule(t, func(r object) {
		if rec, ok := r["record"].(string); ok {
			defined[rec] = "the chart's recording rule"
		}
	})
	return defined
}

// describing is a Registerer that records the names its collectors describe.
type describing struct{ names map[string]string }

var fqName = regexp.MustCompile(`fqName: "([a-zA-Z_:][a-zA-Z0-9_:]*)"`)

func (d *describing) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		if m := fqName.FindStringSubmatch(desc.String()); m != nil {
			d.names[m[1]] = "the runtime's registry"
		}
	}
	return nil
}

func (d *describing) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = d.Register(c)
	}
}

func (d *describing) Unregister(prometheus.Collector) bool { return false }

var (
	promqlStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlMatchers = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promqlIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	promqlKeywords = []string{"and", "or", "unless", "bool", "offset"}
)

// queriedMetrics are the metric names a PromQL expression selects: its
// identifiers once strings, groupings, matchers and ranges are removed,
// other than functions and aggregations (followed by a parenthesis) and
// keywords.
func queriedMetrics(expr string) []string {
	expr = promqlMatchers.ReplaceAllString(promqlGrouping.ReplaceAllString(promqlStrings.ReplaceAllString(expr, `""`), ""), "")
	var names []string
	for _, m := range promqlIdent.FindAllStringSubmatch(expr, -1) {
		if m[1] == "" && !slices.Contains(promqlKeywords, m[0]) {
			names = append(names, m[0])
		}
	}
	return names
}

func TestQueriedMetricsFindsEverySelector(t *testing.T) {
	got := queriedMetrics(`max by (namespace, pod) (a_seconds) > 5 or sum by (x) (increase(b_count{le="5", c="x"}[5m]) - c_bucket) / on(x) d`)
	if want := []string{"a_seconds", "b_count", "c_bucket", "d"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// Every metric the alerts and the dashboard query exists.
func TestAlertsAndDashboardQueryOnlyDefinedMetrics(t *testing.T) {
	defined := definedMetrics(t)
	exists := func(m string) bool {
		for _, suffix := range []string{"", "_bucket", "_count", "_sum"} {
			if base, ok := strings.CutSuffix(m, suffix); ok && defined[base] != "" {
				return true
			}
		}
		return false
	}
	queried := 0
	eachRule(t, func(r object) {
		for _, m := range queriedMetrics(r["expr"].(string)) {
			queried++
			if !exists(m) {
				t.Errorf("rule %v%v queries %s, which nothing defines", r["alert"], r["record"], m)
			}
		}
	})
	for _, p := range dashboard(t)["panels"].([]any) {
		for _, target := range p.(object)["targets"].([]any) {
			for _, m := range queriedMetrics(target.(object)["expr"].(string)) {
				queried++
				if !exists(m) {
					t.Errorf("dashboard panel %q queries %s, which nothing defines", p.(object)["title"], m)
				}
			}
		}
	}
	if queried < 20 {
		t.Fatalf("only %d metric selectors found: the scan is broken", queried)
	}
}

// dashboard is the rendered ConfigMap's dashboard, which must be valid JSON.
func dashboard(t *testing.T) object {
	t.Helper()
	byKind := mustTemplate(t, "metrics.dashboard.enabled=true")
	cm := byName(byKind["ConfigMap"], "rg-retryguard-dashboard")
	if cm == nil {
		t.Fatal("no dashboard ConfigMap")
	}
	if cm["metadata"].(object)["labels"].(object)["grafana_dashboard"] != "1" {
		t.Errorf("the dashboard ConfigMap lacks Grafana's label: %v", cm["metadata"])
	}
	var d object
	if err := json.Unmarshal([]byte(cm["data"].(object)["retryguard.json"].(string)), &d); err != nil {
		t.Fatalf("the dashboard is not valid JSON: %v", err)
	}
	if d["uid"] != "retryguard" || len(d["panels"].([]any)) < 10 {
		t.Fatalf("dashboard %v %v", d["uid"], d["title"])
	}
	return d
}

func TestDashboardIsOffByDefault(t *testing.T) {
	if cm := byName(mustTemplate(t)["ConfigMap"], "rg-retryguard-dashboard"); cm != nil {
		t.Error("the dashboard ConfigMap renders by default")
	}
}

// Every alert links its runbook: a section of docs/runbooks.md under the
// alert's name, which is CamelCase; every section there is an alert's.
func TestEveryAlertHasARunbook(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "docs", "runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^## (\S+)$`).FindAllStringSubmatch(string(raw), -1) {
		sections[m[1]] = true
	}
	camel := regexp.MustCompile(`^Retryguard[A-Z][A-Za-z]+$`)
	const base = "https://github.com/retryguard/retryguard/blob/main/docs/runbooks.md#"
	alerts := 0
	eachRule(t, func(r object) {
		name, ok := r["alert"].(string)
		if !ok {
			return
		}
		alerts++
		if !camel.MatchString(name) {
			t.Errorf("alert %s: alerts are named RetryguardCamelCase", name)
		}
		annotations, _ := r["annotations"].(object)
		if url, _ := annotations["runbook_url"].(string); url != base+strings.ToLower(name) {
			t.Errorf("alert %s: runbook_url %q, want %q", name, url, base+strings.ToLower(name))
		}
		if !sections[name] {
			t.Errorf("alert %s: docs/runbooks.md has no section ## %s", name, name)
		}
		delete(sections, name)
	})
	for s := range sections {
		t.Errorf("docs/runbooks.md has a section %s, which is no alert", s)
	}
	if alerts < 10 {
		t.Fatalf("only %d alerts", alerts)
	}
}

// An operator whose alerts link an internal copy of the runbooks sets
// metrics.prometheusRule.runbookBaseURL: every alert follows it, and a value
// that is no URL, or already has an anchor, is refused by the schema.
func TestRunbookBaseURLIsHonoured(t *testing.T) {
	const base = "https://wiki.example.com/retryguard/runbooks"
	n := 0
	for _, g := range rules(t, "metrics.prometheusRule.runbookBaseURL="+base) {
		for _, r := range g.(object)["rules"].([]any) {
			name, ok := r.(object)["alert"].(string)
			if !ok {
				continue
			}
			n++
			if url, _ := r.(object)["annotations"].(object)["runbook_url"].(string); url != base+"#"+strings.ToLower(name) {
				t.Errorf("alert %s: runbook_url %q, want %q", name, url, base+"#"+strings.ToLower(name))
			}
		}
	}
	if n == 0 {
		t.Fatal("no alert rendered")
	}
	for _, bad := range []string{"", "wiki/runbooks", "https://wiki.example.com/runbooks#top"} {
		if _, err := template(t, "metrics.prometheusRule.enabled=true", "metrics.prometheusRule.runbookBaseURL="+bad); err == nil ||
			!strings.Contains(err.Error(), "runbookBaseURL") {
			t.Errorf("runbookBaseURL %q: %v, want the schema's refusal naming runbookBaseURL", bad, err)
		}
	}
}

// Recording rules are named level:metric:operation, and the dashboard
// works alone: no panel queries a recording rule, which exists only when
// metrics.prometheusRule.enabled is set.
func TestRecordingRulesAreNamedAndTheDashboardNeedsNone(t *testing.T) {
	convention := regexp.MustCompile(`^[a-z_]+:[a-z_]+:[a-z0-9_]+$`)
	records := map[string]bool{}
	eachRule(t, func(r object) {
		if rec, ok := r["record"].(string); ok {
			records[rec] = true
			if !convention.MatchString(rec) {
				t.Errorf("recording rule %s is not level:metric:operation", rec)
			}
		}
	})
	if len(records) == 0 {
		t.Fatal("no recording rule")
	}
	for _, p := range dashboard(t)["panels"].([]any) {
		for _, target := range p.(object)["targets"].([]any) {
			for _, m := range queriedMetrics(target.(object)["expr"].(string)) {
				if records[m] {
					t.Errorf("dashboard panel %q queries the recording rule %s: it is empty unless the rules are enabled", p.(object)["title"], m)
				}
			}
		}
	}
}
