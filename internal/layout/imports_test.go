// Package layout holds the rules about the source tree itself that no single
// package owns: which directories may import which, and how long a line may be.
package layout

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
)

const modulePath = "github.com/retryguard/retryguard"

// repoRoot is the checkout this test was built from.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := goruntime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the source file")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// goFiles calls visit for every .go file of the checkout, nested modules
// included, skipping build output and version control.
func goFiles(t *testing.T, visit func(rel, path string)) {
	t.Helper()
	root := repoRoot(t)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			visit(filepath.ToSlash(rel), path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// hackImportAllowed names the imports from outside hack/ into it that are
// still accepted: the end-to-end suite (a module of its own that make test
// never builds) drives the single-node cluster of the hack/e2e module, as
// docs/e2e.md describes, publishes the release to the node's registry the way
// make release-push does (hack/publish, reading hack/image's archives), and
// runs the fleet drill, whose report and naive retries live with the other
// drills in hack/drills (docs/fleet-drill.md). Product code and the tests
// make test runs take their environment from internal/testenv.
func hackImportAllowed(rel, imp string) bool {
	if !strings.HasPrefix(rel, "test/e2e/") {
		return false
	}
	for _, tool := range []string{"e2e", "drills", "publish", "image"} {
		if imp == modulePath+"/hack/"+tool || strings.HasPrefix(imp, modulePath+"/hack/"+tool+"/") {
			return true
		}
	}
	return false
}

// Nothing outside hack/ imports hack/: hack holds developer tools, and a
// product package or its tests that depend on one make the tool part of the
// product (cluster-api keeps its test environment in internal/test/envtest).
func TestNothingOutsideHackImportsHack(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	goFiles(t, func(rel, path string) {
		if strings.HasPrefix(rel, "hack/") {
			return
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, rel, src, parser.ImportsOnly)
		if err != nil {
			t.Fatalf("parse %s: %v", rel, err)
		}
		checked++
		for _, spec := range f.Imports {
			imp, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				t.Fatalf("%s: import %s: %v", rel, spec.Path.Value, err)
			}
			if (imp == modulePath+"/hack" || strings.HasPrefix(imp, modulePath+"/hack/")) && !hackImportAllowed(rel, imp) {
				t.Errorf("%s imports %s: take the test environment from internal/testenv, and keep tools under hack/", rel, imp)
			}
		}
	})
	if checked < 100 {
		t.Fatalf("checked only %d Go files outside hack/; is the walk rooted at the checkout?", checked)
	}
}

// The API imports nothing of the pods' library: what the two share (codes,
// limits, the HTTP rules, the payload) is the contract module's, which both
// import (docs/README.md, the contract's packages), so that a bound or a code has one
// home and the API's module graph holds no runtime.
func TestTheAPIImportsNoRuntimePackage(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	goFiles(t, func(rel, path string) {
		if !strings.HasPrefix(rel, "api/") {
			return
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatalf("parse %s: %v", rel, err)
		}
		checked++
		for _, spec := range f.Imports {
			if imp, _ := strconv.Unquote(spec.Path.Value); imp == modulePath+"/runtime" || strings.HasPrefix(imp, modulePath+"/runtime/") {
				t.Errorf("%s imports %s: take what the API shares with the pods from %s/contract", rel, imp, modulePath)
			}
		}
	})
	if checked < 20 {
		t.Fatalf("checked only %d Go files under api/", checked)
	}
}
