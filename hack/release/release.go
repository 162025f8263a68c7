package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// A modDir is one go.mod in the repository.
type modDir struct {
	Dir  string // slash-separated, relative to the repository root; "." for the root
	Path string // the module path its go.mod declares
}

// Tag is the tag that publishes the module in dir at version: the Go command
// finds a nested module's versions under tags prefixed with its directory.
func Tag(dir, version string) string {
	if dir == "." {
		return version
	}
	return dir + "/" + version
}

// Tags are the tags of every published module at version, in Published order.
func Tags(version string) []string {
	tags := make([]string, 0, len(Published))
	for _, dir := range Published {
		tags = append(tags, Tag(dir, version))
	}
	return tags
}

// CheckVersion accepts a canonical semantic version with major version 0 or 1:
// a higher major version would need a /vN suffix on every module path.
func CheckVersion(version string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("version %q: want a canonical semantic version such as v0.2.0 (a leading v, three numbers, no build metadata)", version)
	}
	if m := semver.Major(version); m != "v0" && m != "v1" {
		return fmt.Errorf("version %q: major version %s needs a /%s suffix on every module path; releases stay at v0 or v1", version, m, m)
	}
	return nil
}

// modules lists every go.mod in the tree at root, as the Go command sees module
// boundaries: directories named testdata or starting with . or _ hold none.
func modules(root string) ([]modDir, error) {
	var mods []modDir
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && p != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		if d.IsDir() && p == filepath.Join(root, "bin") {
			return filepath.SkipDir // build output
		}
		if d.IsDir() || name != "go.mod" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		mods = append(mods, modDir{Dir: filepath.ToSlash(rel), Path: modfile.ModulePath(data)})
		return nil
	})
	sort.Slice(mods, func(i, j int) bool { return mods[i].Dir < mods[j].Dir })
	return mods, err
}

// tree lists the modules at root after checking version, and maps the module
// path of every published module to its directory.
func tree(root, version string) ([]modDir, map[string]string, error) {
	if err := CheckVersion(version); err != nil {
		return nil, nil, err
	}
	mods, err := modules(root)
	if err != nil {
		return nil, nil, err
	}
	published, err := publishedPaths(mods)
	return mods, published, err
}

// publishedPaths maps the module path of every published module to its directory.
func publishedPaths(mods []modDir) (map[string]string, error) {
	byDir := map[string]string{}
	for _, m := range mods {
		byDir[m.Dir] = m.Path
	}
	paths := map[string]string{}
	for _, dir := range Published {
		p, ok := byDir[dir]
		if !ok || p == "" {
			return nil, fmt.Errorf("published module %s: no go.mod with a module path in %s", dir, dir)
		}
		paths[p] = dir
	}
	return paths, nil
}

// Stamp sets the release version everywhere the repository states it: every
// requirement of a published module (in every go.mod, published or not) and
// its go.sum lines (writeSums), the chart's version and appVersion, and the
// kustomize image tag. It changes no other line, so that the release commit
// merges mechanically. It returns the files it changed.
func Stamp(root, version string) ([]string, error) {
	mods, published, err := tree(root, version)
	if err != nil {
		return nil, err
	}
	var changed []string
	for _, m := range mods {
		file := path.Join(m.Dir, "go.mod")
		ok, err := stampGoMod(filepath.Join(root, file), published, version)
		if err != nil {
			return changed, err
		}
		if ok {
			changed = append(changed, file)
		}
	}
	bare := strings.TrimPrefix(version, "v")
	for _, l := range versionLines {
		ok, err := replaceLine(filepath.Join(root, l.file), l.re, "${1}"+l.quote+l.prefix+bare+l.quote)
		if err != nil {
			return changed, err
		}
		if ok && !slices.Contains(changed, l.file) {
			changed = append(changed, l.file)
		}
	}
	ok, err := stampURIs(filepath.Join(root, krewFile), version)
	if ok && !slices.Contains(changed, krewFile) {
		changed = append(changed, krewFile)
	}
	if err != nil {
		return changed, err
	}
	// Last: a module's zip, hashed here, holds every file stamped above.
	sums, err := writeSums(root, version, mods, published)
	return append(changed, sums...), err
}

// krewURI is a platform's uri in the krew manifest; its second group is the
// release version it downloads.
var krewURI = regexp.MustCompile(`(?m)^([ \t]*uri:[ \t]*\S*/releases/download/)([^/\s]+)(/\S+)$`)

// stampURIs sets the version of every uri in the krew manifest, reporting
// whether the file changed; a manifest without a uri is an error.
func stampURIs(file, version string) (bool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return false, err
	}
	if !krewURI.Match(data) {
		return false, fmt.Errorf("%s: no line matches %s", file, krewURI)
	}
	out := krewURI.ReplaceAll(data, []byte("${1}"+version+"${3}"))
	if bytes.Equal(out, data) {
		return false, nil
	}
	return true, os.WriteFile(file, out, 0o644)
}

// versionLines are the lines outside go.mod files that state the release
// version, without its leading v: Helm and image tags are bare versions.
var versionLines = []struct {
	file, what, quote string
	prefix            string // "v" where the line keeps the leading v
	re                *regexp.Regexp
}{
	{chartFile, "version", "", "", regexp.MustCompile(`(?m)^(version:[ \t]*).*$`)},
	{chartFile, "appVersion", `"`, "", regexp.MustCompile(`(?m)^(appVersion:[ \t]*).*$`)},
	// config/manager holds one image, the manager's.
	{kustomizationFile, "the manager image's newTag", "", "", regexp.MustCompile(`(?m)^([ \t]*newTag:[ \t]*).*$`)},
	// krew's spec.version is a semantic version with its v.
	{krewFile, "the krew plugin's spec.version", "", "v", regexp.MustCompile(`(?m)^(  version:[ \t]*).*$`)},
}

// stampGoMod sets every requirement of a published module in one go.mod to
// version, reporting whether the file changed.
func stampGoMod(file string, published map[string]string, version string) (bool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return false, err
	}
	f, err := modfile.Parse(file, data, nil)
	if err != nil {
		return false, err
	}
	for _, r := range f.Require {
		if _, ok := published[r.Mod.Path]; ok && r.Mod.Version != version {
			if err := f.AddRequire(r.Mod.Path, version); err != nil {
				return false, err
			}
		}
	}
	out, err := f.Format()
	if err != nil {
		return false, err
	}
	if bytes.Equal(out, data) {
		return false, nil
	}
	return true, os.WriteFile(file, out, 0o644)
}

// replaceLine replaces the one line re matches in file, reporting whether the
// file changed; a file with no such line, or more than one, is an error.
func replaceLine(file string, re *regexp.Regexp, repl string) (bool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return false, err
	}
	if n := len(re.FindAllIndex(data, -1)); n != 1 {
		return false, fmt.Errorf("%s: %d lines match %s, want exactly one", file, n, re)
	}
	out := re.ReplaceAll(data, []byte(repl))
	if bytes.Equal(out, data) {
		return false, nil
	}
	return true, os.WriteFile(file, out, 0o644)
}

// Check reports every way the tree at root is not ready to be tagged at
// version: a published module with a replace or exclude directive, a
// requirement of a published module at another version or without its go.sum
// lines, a chart or kustomize tag that disagrees, a module go.work does not
// use, or a module outside hack/ and test/ that is neither in Published nor in
// NotPublished. Whether those lines hash the tree as it is now is CheckSums'.
func Check(root, version string) ([]string, error) {
	mods, published, err := tree(root, version)
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, m := range mods {
		file := path.Join(m.Dir, "go.mod")
		data, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			return nil, err
		}
		f, err := modfile.Parse(file, data, nil)
		if err != nil {
			return nil, err
		}
		_, isPublished := published[m.Path]
		if isPublished {
			for _, r := range f.Replace {
				problems = append(problems, fmt.Sprintf("%s:%d: replace %s: a published module holds no replace "+
					"(go install pkg@version refuses it, and consumers never see it); go.work joins the modules for development",
					file, r.Syntax.Start.Line, r.Old.Path))
			}
			for _, x := range f.Exclude {
				problems = append(problems, fmt.Sprintf("%s:%d: exclude %s: a published module holds no exclude (go install pkg@version refuses it)",
					file, x.Syntax.Start.Line, x.Mod.Path))
			}
		}
		for _, r := range f.Require {
			if _, ok := published[r.Mod.Path]; ok && r.Mod.Version != version {
				problems = append(problems, fmt.Sprintf("%s:%d: requires %s %s, want %s (hack/release %s stamps it)",
					file, r.Syntax.Start.Line, r.Mod.Path, r.Mod.Version, version, version))
			}
		}
		if !isPublished && !strings.HasPrefix(m.Dir, "hack/") && !strings.HasPrefix(m.Dir, "test/") && !slices.Contains(NotPublished, m.Dir) {
			problems = append(problems, fmt.Sprintf("%s: a module outside hack/ and test/ must be listed in hack/release/modules.go, "+
				"in Published or in NotPublished", file))
		}
	}
	missing, err := missingSums(root, version, mods, published)
	if err != nil {
		return nil, err
	}
	problems = append(problems, missing...)
	bare := strings.TrimPrefix(version, "v")
	for _, l := range versionLines {
		got, err := lineValue(filepath.Join(root, l.file), l.re)
		if err != nil {
			return nil, err
		}
		if got != l.prefix+bare {
			problems = append(problems, fmt.Sprintf("%s: %s is %q, want %q (hack/release %s stamps it)", l.file, l.what, got, l.prefix+bare, version))
		}
	}
	krew, err := os.ReadFile(filepath.Join(root, krewFile))
	if err != nil {
		return nil, err
	}
	for _, m := range krewURI.FindAllSubmatch(krew, -1) {
		if string(m[2]) != version {
			problems = append(problems, fmt.Sprintf("%s: a uri downloads %s, want %s (hack/release %s stamps it)", krewFile, m[2], version, version))
		}
	}
	work, err := workspaceDirs(root)
	if errors.Is(err, fs.ErrNotExist) {
		return append(problems, workFile+": missing; it joins the modules for development, so that published ones need no replace"), nil
	}
	if err != nil {
		return nil, err
	}
	for _, m := range mods {
		if !slices.Contains(work, m.Dir) {
			problems = append(problems, fmt.Sprintf("%s: the module %s is not in go.work (go work use ./%s), so the go command refuses to build it",
				workFile, m.Dir, m.Dir))
		}
	}
	return problems, nil
}

// lineValue is the value of the one line re matches in file, unquoted.
func lineValue(file string, re *regexp.Regexp) (string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	all := re.FindAllSubmatchIndex(data, -1)
	if len(all) != 1 {
		return "", fmt.Errorf("%s: %d lines match %s, want exactly one", file, len(all), re)
	}
	value := strings.TrimSpace(string(data[all[0][3]:all[0][1]]))
	if i := strings.Index(value, " #"); i >= 0 {
		value = strings.TrimSpace(value[:i])
	}
	return strings.Trim(value, `"'`), nil
}

// workspaceDirs are the directories go.work uses, slash-separated and relative
// to root ("." for the root).
func workspaceDirs(root string) ([]string, error) {
	file := filepath.Join(root, workFile)
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	w, err := modfile.ParseWork(file, data, nil)
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, u := range w.Use {
		dirs = append(dirs, path.Clean(filepath.ToSlash(u.Path)))
	}
	return dirs, nil
}
