// Package limitsource reads the constants of contract/limits, the home of the
// API's bounds, from the package's source: for the tools and tests that need a
// bound's name with its value (make manifests writes a CEL rule's
// ${limits.Name}; a test finds a bound restated as a literal), which a program
// importing the package cannot list.
package limitsource

import (
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"strings"
)

// Path is the import path of package limits.
const Path = "github.com/retryguard/retryguard/contract/limits"

// A Const is one exported constant of package limits.
type Const struct {
	Name  string
	Value constant.Value
	// Duration says the constant is a time.Duration (its Value is nanoseconds).
	Duration bool
}

// Read type-checks the package in dir (contract/limits, which imports only
// the standard library) and returns its exported constants, sorted by name.
func Read(dir string) ([]Const, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	pkg, err := conf.Check(Path, fset, files, nil)
	if err != nil {
		return nil, err
	}
	var out []Const
	for _, name := range pkg.Scope().Names() {
		c, ok := pkg.Scope().Lookup(name).(*types.Const)
		if !ok || !c.Exported() {
			continue
		}
		named, ok := c.Type().(*types.Named)
		isDuration := ok && named.Obj().Pkg() != nil && named.Obj().Pkg().Path() == "time" && named.Obj().Name() == "Duration"
		out = append(out, Const{Name: name, Value: c.Val(), Duration: isDuration})
	}
	return out, nil
}
