package exports

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite runtime/exports.txt and contract/exports.txt from the source (make exports)")

// The goldens, each with the module root it lists: the runtime's, and the
// contract's, the module beside it that the runtime and the API share (its
// API is the runtime's too, so it is reviewed the same way, with one lister).
var goldens = []struct{ module, root, golden string }{
	{"runtime", filepath.Join("..", ".."), filepath.Join("..", "..", "exports.txt")},
	{"contract", filepath.Join("..", "..", "..", "contract"), filepath.Join("..", "..", "..", "contract", "exports.txt")},
}

// maxRetryExports is the most top-level identifiers runtime/retry may export:
// issue 22's target of 45 (failsafe-go's retrypolicy exports 11 plus its
// builder), and Decide, DecisionInput and Decision, which the conformance
// vectors hold to the rule row by row (docs/runtime.md, the runtime's public
// API), and Final, by which an integration that saw its own layer retry
// (runtime/grpc) ends the operation without an attempt the dependency never
// received; and Observer and WithObserver, the tracing hook runtime/otel
// implements (its events are the existing Attempt, AttemptRecord and
// Decision).
const maxRetryExports = 45 + 3 + 1 + 2

// Every exported identifier of the runtime's public packages is listed in
// runtime/exports.txt: an export added or removed fails here until the file
// is regenerated (make exports) and the change reviewed with it.
func TestExportsAreTheGolden(t *testing.T) {
	for _, g := range goldens {
		got, err := List(g.root)
		if err != nil {
			t.Fatal(err)
		}
		text := "# The exported identifiers of the " + g.module + "'s public packages, one per line:\n" +
			"# package, kind, name. Regenerate with make exports; review every change.\n" +
			strings.Join(got, "\n") + "\n"
		if *update {
			if err := os.WriteFile(g.golden, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(g.golden)
		if err != nil {
			t.Fatal(err)
		}
		if string(want) != text {
			t.Errorf("the exports differ from %s; run make exports and review the diff:\n%s", g.golden, diff(string(want), text))
		}
		if n := TopLevel(got, "retry"); n > maxRetryExports {
			t.Errorf("runtime/retry exports %d top-level identifiers, above %d", n, maxRetryExports)
		}
	}
}

// diff names the lines only one side has.
func diff(want, got string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			b.WriteString("+ " + l + "\n")
		}
	}
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			b.WriteString("- " + l + "\n")
		}
	}
	return b.String()
}

func TestListSeesWhatIsExported(t *testing.T) {
	var got []string
	for _, g := range goldens {
		lines, err := List(g.root)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, lines...)
	}
	has := map[string]bool{}
	for _, l := range got {
		has[l] = true
	}
	for _, want := range []string{"limits const MaxAttemptsCeiling", "retry func New", "clock type Clock", "clock method Clock.Now"} {
		if !has[want] {
			t.Errorf("the list lacks %q", want)
		}
	}
	for _, l := range got {
		if strings.Contains(l, "internal") || strings.HasPrefix(l, "benchmarks") {
			t.Errorf("the list holds %q, which is not API", l)
		}
	}
}
