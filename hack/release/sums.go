package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/sumdb/dirhash"
	"golang.org/x/mod/zip"
)

// A module that requires a published sibling states the sibling's checksums in
// its go.sum, as for any dependency: built outside the workspace (GOWORK=off,
// -mod=readonly, as from a clone of its tag) the go command takes them from
// there and nowhere else. A sibling's zip holds its own go.sum, so the hashes
// are made leaves first (sumPlan.order).

// A sumPlan says which modules need which siblings' checksums.
type sumPlan struct {
	order     []string            // module directories, every sibling before the modules that need its hashes
	needs     map[string][]string // directory -> module paths of the published siblings it requires, sorted
	published map[string]string   // module path -> directory
	path      map[string]string   // directory -> module path
}

// planSums reads every go.mod in the tree at root. A module needs the
// checksums of each published module its go.mod requires and does not replace
// (a directory replacement has no checksum). No others: at go 1.17 or later a
// go.mod lists every module that provides a package to its build, and the
// pruned module graph needs no other sibling's checksum. make release-check's
// go mod tidy -diff holds the lines to what go mod tidy writes.
func planSums(root string, mods []modDir, published map[string]string) (*sumPlan, error) {
	p := &sumPlan{needs: map[string][]string{}, published: published, path: map[string]string{}}
	for _, m := range mods {
		p.path[m.Dir] = m.Path
		file := path.Join(m.Dir, "go.mod")
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		if err != nil {
			return nil, err
		}
		f, err := modfile.Parse(file, data, nil)
		if err != nil {
			return nil, err
		}
		replaced := map[string]bool{}
		for _, r := range f.Replace {
			replaced[r.Old.Path] = true
		}
		for _, r := range f.Require {
			if _, ok := published[r.Mod.Path]; ok && !replaced[r.Mod.Path] && r.Mod.Path != m.Path {
				p.needs[m.Dir] = append(p.needs[m.Dir], r.Mod.Path)
			}
		}
		slices.Sort(p.needs[m.Dir])
	}
	// Depth first, siblings before the module: a cycle among published
	// modules has no order, and the go command would refuse it anyway.
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(dir string, stack []string) error
	visit = func(dir string, stack []string) error {
		switch state[dir] {
		case 1:
			return fmt.Errorf("the published modules require one another in a cycle: %s", strings.Join(append(stack, dir), " -> "))
		case 2:
			return nil
		}
		state[dir] = 1
		for _, s := range p.needs[dir] {
			if err := visit(published[s], append(stack, dir)); err != nil {
				return err
			}
		}
		state[dir] = 2
		p.order = append(p.order, dir)
		return nil
	}
	for _, m := range mods {
		if err := visit(m.Dir, nil); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// neededBy reports whether some module needs the checksums of the module at dir.
func (p *sumPlan) neededBy(dir string) bool {
	for _, needs := range p.needs {
		for _, s := range needs {
			if p.published[s] == dir {
				return true
			}
		}
	}
	return false
}

// sumLines are the two go.sum lines of a module version: the hash of its zip
// and the hash of its go.mod.
func sumLines(root, dir string, mv module.Version) ([]string, error) {
	zipHash, err := zipHash(root, dir, mv)
	if err != nil {
		return nil, err
	}
	gomod, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(dir), "go.mod"))
	if err != nil {
		return nil, err
	}
	// As the go command hashes a go.mod (modfetch.HashGoMod).
	modHash, err := dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(gomod)), nil })
	if err != nil {
		return nil, err
	}
	return []string{mv.Path + " " + mv.Version + " " + zipHash, mv.Path + " " + mv.Version + "/go.mod " + modHash}, nil
}

// zipHash is the h1: hash of the module zip of the module at dir.
func zipHash(root, dir string, mv module.Version) (string, error) {
	f, err := os.CreateTemp("", "retryguard-module-*.zip")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	err = moduleZip(f, root, dir, mv)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	return dirhash.HashZip(f.Name(), dirhash.Hash1)
}

// moduleZip writes the zip the module proxy serves for the module at dir once
// its tag is pushed: the files a clone holds (cloneFiles), those of nested
// modules and vendor directories left out by golang.org/x/mod/zip, and the
// repository's LICENSE when the module has none of its own, as the go
// command adds it to a nested module's zip.
func moduleZip(w io.Writer, root, dir string, mv module.Version) error {
	all, err := cloneFiles(root)
	if err != nil {
		return err
	}
	var files []zip.File
	hasLicense := false
	for _, name := range all {
		rel := name
		if dir != "." {
			var ok bool
			if rel, ok = strings.CutPrefix(name, dir+"/"); !ok {
				continue
			}
		}
		info, err := os.Lstat(filepath.Join(root, filepath.FromSlash(name)))
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			return err
		}
		files = append(files, diskFile{rel: rel, file: filepath.Join(root, filepath.FromSlash(name)), info: info})
		hasLicense = hasLicense || rel == "LICENSE"
	}
	if license := filepath.Join(root, "LICENSE"); dir != "." && !hasLicense {
		if info, err := os.Lstat(license); err == nil && info.Mode().IsRegular() {
			files = append(files, diskFile{rel: "LICENSE", file: license, info: info})
		}
	}
	if err := zip.Create(w, mv, files); err != nil {
		return fmt.Errorf("zip %s@%s: %w", mv.Path, mv.Version, err)
	}
	return nil
}

// A diskFile is a file of the work tree as golang.org/x/mod/zip reads one.
type diskFile struct {
	rel, file string
	info      fs.FileInfo
}

func (f diskFile) Path() string                 { return f.rel }
func (f diskFile) Lstat() (fs.FileInfo, error)  { return f.info, nil }
func (f diskFile) Open() (io.ReadCloser, error) { return os.Open(f.file) }

// writeSums sets, in dependency order, every go.sum's lines for the published
// siblings its module needs, hashed from the tree at root as version, and
// drops its lines for any other version of a sibling. It returns the go.sum
// files it changed.
func writeSums(root, version string, mods []modDir, published map[string]string) ([]string, error) {
	p, err := planSums(root, mods, published)
	if err != nil {
		return nil, err
	}
	lines := map[string][]string{} // module path -> its two lines
	var changed []string
	for _, dir := range p.order {
		if len(p.needs[dir]) > 0 {
			var want []string
			for _, s := range p.needs[dir] {
				want = append(want, lines[s]...)
			}
			file := path.Join(dir, "go.sum")
			ok, err := setSiblingSums(filepath.Join(root, filepath.FromSlash(file)), published, want)
			if err != nil {
				return changed, err
			}
			if ok {
				changed = append(changed, file)
			}
		}
		if p.neededBy(dir) {
			if lines[p.path[dir]], err = sumLines(root, dir, module.Version{Path: p.path[dir], Version: version}); err != nil {
				return changed, err
			}
		}
	}
	return changed, nil
}

// setSiblingSums replaces the lines of published modules in a go.sum by want,
// in the go command's order, reporting whether the file changed.
func setSiblingSums(file string, published map[string]string, want []string) (bool, error) {
	data, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	var kept []string
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			if _, sibling := published[f[0]]; !sibling {
				kept = append(kept, l)
			}
		}
	}
	all := sortSums(append(kept, want...))
	out := []byte(strings.Join(all, "\n") + "\n")
	if len(all) == 0 {
		out = nil
	}
	if bytes.Equal(out, data) {
		return false, nil
	}
	return true, os.WriteFile(file, out, 0o644)
}

// sortSums sorts go.sum lines as the go command writes them
// (modfetch.WriteGoSum): by module version, module.Sort's order, which puts a
// version's zip hash before its go.mod hash; a version's hashes in string order.
func sortSums(lines []string) []string {
	byKey := map[module.Version][]string{}
	var keys []module.Version
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 3 {
			continue // not a go.sum line; the go command drops it too
		}
		k := module.Version{Path: f[0], Version: f[1]}
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], l)
	}
	module.Sort(keys)
	var out []string
	for _, k := range keys {
		slices.Sort(byKey[k])
		out = append(out, byKey[k]...)
	}
	return out
}

// siblingSums are the lines of published modules in a go.sum.
func siblingSums(file string, published map[string]string) ([]string, error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) == 3 {
			if _, sibling := published[f[0]]; sibling {
				lines = append(lines, l)
			}
		}
	}
	return lines, nil
}

// siblingFields are, by module directory, the fields of its go.sum's lines for
// published siblings.
func (p *sumPlan) siblingFields(root string) (map[string][][]string, error) {
	fields := map[string][][]string{}
	for _, dir := range p.order {
		lines, err := siblingSums(filepath.Join(root, filepath.FromSlash(dir), "go.sum"), p.published)
		if err != nil {
			return nil, err
		}
		for _, l := range lines {
			fields[dir] = append(fields[dir], strings.Fields(l))
		}
	}
	return fields, nil
}

// missingSums reports every module whose go.sum lacks a line for a published
// sibling at version that its build needs: each is a "missing go.sum entry"
// outside the workspace.
func missingSums(root, version string, mods []modDir, published map[string]string) ([]string, error) {
	p, err := planSums(root, mods, published)
	if err != nil {
		return nil, err
	}
	have, err := p.siblingFields(root)
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, dir := range p.order {
		file := path.Join(dir, "go.sum")
		keys := map[string]bool{}
		for _, f := range have[dir] {
			keys[f[0]+" "+f[1]] = true
		}
		for _, s := range p.needs[dir] {
			for _, key := range []string{s + " " + version, s + " " + version + "/go.mod"} {
				if !keys[key] {
					problems = append(problems, fmt.Sprintf("%s: no line for %s: a build outside the workspace stops at a missing go.sum entry "+
						"(hack/release %s writes it)", file, key, version))
				}
			}
		}
	}
	return problems, nil
}

// CheckSums reports every go.sum line of a published sibling at version whose
// hash is not the one the tree at root makes: the sibling changed since the
// stamp wrote it, and its tag would not match it. Missing lines are Check's.
func CheckSums(root, version string) ([]string, error) {
	mods, published, err := tree(root, version)
	if err != nil {
		return nil, err
	}
	p, err := planSums(root, mods, published)
	if err != nil {
		return nil, err
	}
	want := map[string]string{} // "path version[/go.mod]" -> hash
	for _, dir := range p.order {
		if !p.neededBy(dir) {
			continue
		}
		lines, err := sumLines(root, dir, module.Version{Path: p.path[dir], Version: version})
		if err != nil {
			return nil, err
		}
		for _, l := range lines {
			f := strings.Fields(l)
			want[f[0]+" "+f[1]] = f[2]
		}
	}
	have, err := p.siblingFields(root)
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, dir := range p.order {
		file := path.Join(dir, "go.sum")
		for _, f := range have[dir] {
			if h, ok := want[f[0]+" "+f[1]]; ok && h != f[2] {
				problems = append(problems, fmt.Sprintf("%s: %s %s %s, but the tree hashes it %s: it changed since the stamp "+
					"(hack/release %s writes it again)", file, f[0], f[1], f[2], h, version))
			}
		}
	}
	return problems, nil
}
