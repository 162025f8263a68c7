package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	v1 "github.com/retryguard/retryguard/api/v1alpha1"
)

// constants returns the string constants of a Go file that pass keep, read
// from the source, the one home of the codes and reasons.
func constants(t *testing.T, path string, keep func(group *ast.GenDecl, spec *ast.ValueSpec) bool) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			spec := s.(*ast.ValueSpec)
			if !keep(g, spec) {
				continue
			}
			for _, v := range spec.Values {
				if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					s, _ := strconv.Unquote(lit.Value)
					out = append(out, s)
				}
			}
		}
	}
	return out
}

// docs/troubleshooting.md has a section for every code of contract/codes
// and every reason a Ready condition that is not True gives, and none for
// a code or reason that does not exist.
func TestTroubleshootingCoversEveryCodeAndReason(t *testing.T) {
	raw, err := os.ReadFile("docs/troubleshooting.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	codes := constants(t, "contract/codes/codes.go", func(_ *ast.GenDecl, s *ast.ValueSpec) bool {
		id, ok := s.Type.(*ast.Ident)
		return ok && id.Name == "Code"
	})
	if len(codes) < 30 {
		t.Fatalf("only %d codes read from contract/codes", len(codes))
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#### (ERR_[A-Z_]+)$`).FindAllStringSubmatch(doc, -1) {
		documented[m[1]] = true
	}
	for _, c := range codes {
		if !documented[c] {
			t.Errorf("docs/troubleshooting.md has no section #### %s", c)
		}
		delete(documented, c)
	}
	for c := range documented {
		t.Errorf("docs/troubleshooting.md documents %s, which contract/codes does not define", c)
	}

	reasons := constants(t, "api/v1alpha1/shared_types.go", func(g *ast.GenDecl, s *ast.ValueSpec) bool {
		return strings.HasPrefix(s.Names[0].Name, "Reason") && g.Doc != nil && strings.Contains(g.Doc.Text(), "Ready condition")
	})
	_, statusSection, ok := strings.Cut(doc, "\n## Status reasons\n")
	if !ok {
		t.Fatal("docs/troubleshooting.md has no ## Status reasons")
	}
	sections := regexp.MustCompile(`(?m)^### (\w+)$`).FindAllStringSubmatch(statusSection, -1)
	var headed []string
	for _, m := range sections {
		headed = append(headed, m[1])
	}
	checked := 0
	for _, r := range reasons {
		if r == v1.ReasonPublished || r == v1.ReasonAccepted { // Ready=True: nothing to troubleshoot
			continue
		}
		checked++
		if !slices.Contains(headed, r) {
			t.Errorf("docs/troubleshooting.md#status-reasons has no section ### %s", r)
		}
	}
	if checked < 8 {
		t.Fatalf("only %d not-Ready reasons read from api/v1alpha1", checked)
	}
}
