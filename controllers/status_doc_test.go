package controllers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// apiStatusConstants reads api/v1alpha1's source for its condition types and
// reasons: every string constant named Condition* or Reason*, by value.
func apiStatusConstants(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("../api/v1alpha1/*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Condition") && !strings.HasPrefix(name.Name, "Reason") || i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, _ := strconv.Unquote(lit.Value)
						out[v] = name.Name
					}
				}
			}
		}
	}
	if len(out) < 10 {
		t.Fatalf("found only %d condition and reason constants: %v", len(out), out)
	}
	return out
}

var docRow = regexp.MustCompile("^\\| `([A-Za-z]+)` \\|(.*)\\|$")

// docTables returns, for each "## " section of docs/status.md, the rows of
// its tables that name something in their first cell, with their other cells.
func docTables(t *testing.T) map[string][][]string {
	t.Helper()
	raw, err := os.ReadFile("../docs/status.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][][]string{}
	section := ""
	for line := range strings.SplitSeq(string(raw), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			section = h
			continue
		}
		if m := docRow.FindStringSubmatch(line); m != nil {
			cells := []string{m[1]}
			for c := range strings.SplitSeq(m[2], "|") {
				cells = append(cells, strings.TrimSpace(c))
			}
			out[section] = append(out[section], cells)
		}
	}
	return out
}

// docs/status.md names every condition and reason of the API, and nothing
// else; its kstatus and event columns are what the controller does.
func TestStatusDocNamesEveryConstant(t *testing.T) {
	constants := apiStatusConstants(t)
	tables := docTables(t)
	named := map[string]bool{}
	for _, section := range []string{"Conditions", "RetryPolicy reasons", "RetryBudget reasons", "RetryBudget consumer events"} {
		if len(tables[section]) == 0 {
			t.Fatalf("docs/status.md has no table under %q", section)
		}
		for _, row := range tables[section] {
			named[row[0]] = true
			if constants[row[0]] == "" {
				t.Errorf("docs/status.md (%s) names %s, which is no constant of api/v1alpha1", section, row[0])
			}
		}
	}
	for value, name := range constants {
		if !named[value] {
			t.Errorf("v1alpha1.%s (%q) is not in docs/status.md", name, value)
		}
	}

	kstatusOf := map[string]string{"": "Current", v1.ConditionStalled: "Failed (`Stalled`)", v1.ConditionReconciling: "InProgress (`Reconciling`)"}
	for _, section := range []string{"RetryPolicy reasons", "RetryBudget reasons"} {
		for _, row := range tables[section] {
			reason, ready, kstatus, event := row[0], row[1], row[2], row[3]
			c := metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionStatus(ready), Reason: reason}
			conds := []metav1.Condition{c}
			setProgressConditions(&conds, c)
			progress := ""
			if len(conds) > 1 {
				progress = conds[1].Type
			}
			if want := kstatusOf[progress]; kstatus != want {
				t.Errorf("%s: %s says kstatus %q; the controller's conditions make it %q", section, reason, kstatus, want)
			}
			if want := readyEvent(&c, "").Type; event != want {
				t.Errorf("%s: %s says event %q; the controller records %q", section, reason, event, want)
			}
		}
	}

	// "When several apply, the first in this table wins": evaluatePolicy's order.
	var docOrder []string
	for _, row := range tables["RetryPolicy reasons"] {
		if row[1] == "False" {
			docOrder = append(docOrder, row[0])
		}
	}
	codeOrder := []string{v1.ReasonInvalidSpec}
	for _, gr := range graphReasons {
		codeOrder = append(codeOrder, gr.reason)
	}
	codeOrder = append(codeOrder, v1.ReasonParentNotFound, v1.ReasonBudgetNotFound, v1.ReasonPublishFailed)
	if !slices.Equal(docOrder, codeOrder) {
		t.Errorf("docs/status.md orders the not-Ready reasons %v; evaluatePolicy's precedence is %v", docOrder, codeOrder)
	}
}
