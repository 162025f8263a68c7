package layout

import (
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retryguard/retryguard/internal/limitsource"
)

// validationRoots are the directories whose messages a user reads when a
// value is refused: the API's validators, the webhooks, the payload parser
// and the manager's options. api/v1alpha1/fixtures holds test cases (values
// to refuse, not messages) and is left out.
var validationRoots = []string{"api", "webhooks", "contract/policyconfig", "internal/options"}

const fixturesDir = "api/v1alpha1/fixtures/"

var (
	// boundNumber is a number a message could state a bound with: a whole
	// number or a duration, standing alone (not inside INV-RTY-04 or 5xx).
	boundNumber = regexp.MustCompile(`(?:^|[\s(])(\d+(?:ns|us|µs|ms|s|m|h)?)(?:$|[\s,.;:)])`)
	// rangePhrase states a range with a literal: "between 1 and", "from 1 to".
	rangePhrase = regexp.MustCompile(`\b(?:between|from|at most|at least|up to) \d`)
)

// limitValues evaluates every integer and duration constant of package
// limits, the home of the API's bounds.
func limitValues(t *testing.T) (ints map[int64]string, durations map[time.Duration]string) {
	t.Helper()
	consts, err := limitsource.Read(filepath.Join(repoRoot(t), "contract", "limits"))
	if err != nil {
		t.Fatal(err)
	}
	ints, durations = map[int64]string{}, map[time.Duration]string{}
	for _, c := range consts {
		if c.Value.Kind() != constant.Int {
			continue
		}
		v, exact := constant.Int64Val(c.Value)
		if !exact {
			continue
		}
		if c.Duration {
			durations[time.Duration(v)] = "limits." + c.Name
		} else {
			ints[v] = "limits." + c.Name
		}
	}
	if len(ints) < 10 || len(durations) < 2 {
		t.Fatalf("package limits yielded %d whole-number and %d duration bounds; is it the package it was?", len(ints), len(durations))
	}
	return ints, durations
}

// literalBounds returns what in one message literal restates a bound.
func literalBounds(msg string, ints map[int64]string, durations map[time.Duration]string) []string {
	var found []string
	if m := rangePhrase.FindString(msg); m != "" {
		found = append(found, strconv.Quote(m)+" (a range stated with a literal)")
	}
	for _, m := range boundNumber.FindAllStringSubmatch(msg, -1) {
		tok := m[1]
		if n, err := strconv.ParseInt(tok, 10, 64); err == nil {
			if name, ok := ints[n]; ok {
				found = append(found, tok+" (the value of "+name+")")
			}
			continue
		}
		if d, err := time.ParseDuration(tok); err == nil {
			if name, ok := durations[d]; ok {
				found = append(found, tok+" (the value of "+name+")")
			}
		}
	}
	return found
}

// A validation message formats the bounds of package limits; it never types
// one out again, or a bound changed in limits leaves the message stating the
// old one (the guide: a bound is defined once, in contract/limits).
func TestValidationMessagesFormatTheLimits(t *testing.T) {
	ints, durations := limitValues(t)
	fset := token.NewFileSet()
	checked := 0
	goFiles(t, func(rel, path string) {
		inRoot := false
		for _, root := range validationRoots {
			inRoot = inRoot || strings.HasPrefix(rel, root+"/")
		}
		if !inRoot || strings.HasPrefix(rel, fixturesDir) || strings.HasSuffix(rel, "_test.go") || strings.HasPrefix(filepath.Base(rel), "zz_generated") {
			return
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			if _, ok := n.(*ast.ImportSpec); ok {
				return false
			}
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			msg, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			for _, b := range literalBounds(msg, ints, durations) {
				t.Errorf("%s: %q states %s; format the constant instead", fset.Position(lit.Pos()), msg, b)
			}
			return true
		})
	})
	if checked < 10 {
		t.Fatalf("checked only %d files under %v", checked, validationRoots)
	}
}

// The detector itself: what it must catch and what it must let through.
func TestLiteralBoundsDetector(t *testing.T) {
	ints := map[int64]string{3: "limits.MaxAttemptsCeiling", 1000: "limits.MaxBudgetTokens"}
	durations := map[time.Duration]string{time.Hour: "limits.MaxBudgetWindow"}
	for msg, want := range map[string]bool{
		"maxAttempts must be between 1 and 3":                  true,
		"maxTokens must be between 1 and %d":                   true,
		"from 1 to %d":                                         true,
		"window must be at most 1h":                            true,
		"no more than 1000 tokens.":                            true,
		"maxAttempts must be %s":                               false,
		"a policy with maxAttempts above 1 must name a budget": false,
		"only 429 and 5xx other than 501 and 505 (INV-RTY-03)": false,
		"use a positive base such as 100ms":                    false,
	} {
		if got := len(literalBounds(msg, ints, durations)) > 0; got != want {
			t.Errorf("%q: found a literal bound %v, want %v", msg, got, want)
		}
	}
}
