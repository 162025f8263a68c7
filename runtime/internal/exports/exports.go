// Package exports lists the exported identifiers of the runtime's public
// packages, and the contract module's beside it, so that runtime/exports.txt
// and contract/exports.txt (checked by this package's test in make test)
// make every new export a reviewed decision, as the Go project
// checks its own API with api/next. It reads source only (go/parser), so the
// runtime module takes no dependency for it.
package exports

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// List returns one line per exported identifier of every public package
// under root (the runtime module's directory, nested modules included):
// "<package path> <kind> <name>", with kind const, var, func, type, method
// (Type.Method) or field (Type.Field), sorted. Packages under internal/,
// testdata, tests and the benchmarks module are not API.
func List(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch d.Name() {
		case "internal", "testdata", "benchmarks":
			return filepath.SkipDir
		}
		lines, err := listDir(path, rel)
		out = append(out, lines...)
		return err
	})
	sort.Strings(out)
	return out, err
}

func listDir(dir, rel string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var out []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		if f.Name.Name == "main" {
			continue
		}
		out = append(out, fileExports(rel, f)...)
	}
	return out, nil
}

func fileExports(pkg string, f *ast.File) []string {
	var out []string
	add := func(kind, name string) { out = append(out, fmt.Sprintf("%s %s %s", pkg, kind, name)) }
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil {
				add("func", d.Name.Name)
				continue
			}
			if recv := receiverName(d.Recv.List[0].Type); ast.IsExported(recv) {
				add("method", recv+"."+d.Name.Name)
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.ValueSpec:
					kind := "var"
					if d.Tok == token.CONST {
						kind = "const"
					}
					for _, n := range s.Names {
						if n.IsExported() {
							add(kind, n.Name)
						}
					}
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					add("type", s.Name.Name)
					for _, m := range members(s.Type) {
						add(m.kind, s.Name.Name+"."+m.name)
					}
				}
			}
		}
	}
	return out
}

type member struct{ kind, name string }

// members are a struct's exported fields (embedded ones by their type's
// name) and an interface's exported methods.
func members(t ast.Expr) []member {
	var out []member
	switch t := t.(type) {
	case *ast.StructType:
		for _, f := range t.Fields.List {
			names := f.Names
			if len(names) == 0 {
				names = []*ast.Ident{{Name: receiverName(f.Type)}}
			}
			for _, n := range names {
				if ast.IsExported(n.Name) {
					out = append(out, member{"field", n.Name})
				}
			}
		}
	case *ast.InterfaceType:
		for _, m := range t.Methods.List {
			for _, n := range m.Names {
				if n.IsExported() {
					out = append(out, member{"method", n.Name})
				}
			}
		}
	}
	return out
}

// receiverName is the type name of a receiver or embedded field: T, *T,
// T[P], pkg.T.
func receiverName(t ast.Expr) string {
	switch t := t.(type) {
	case *ast.StarExpr:
		return receiverName(t.X)
	case *ast.IndexExpr:
		return receiverName(t.X)
	case *ast.IndexListExpr:
		return receiverName(t.X)
	case *ast.SelectorExpr:
		return t.Sel.Name
	case *ast.Ident:
		return t.Name
	}
	return ""
}

// TopLevel counts a package's top-level exported identifiers (const, var,
// func, type; methods and fields not counted), as the target does.
func TopLevel(lines []string, pkg string) (n int) {
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) == 3 && f[0] == pkg && f[1] != "method" && f[1] != "field" {
			n++
		}
	}
	return n
}
