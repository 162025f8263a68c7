package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// checkVersion is the version make release-check publishes the tree at. It is
// not the tree's own version, so a requirement hack/release failed to stamp
// names a version the proxy does not hold, and the check fails on it.
const checkVersion = "v0.99.0-releasecheck"

// runtimeModules are the published modules an application imports: the
// runtime and the optional modules beside it (the informer, the Kafka sink).
func runtimeModules(t *testing.T, root string) []string {
	t.Helper()
	_, published, err := tree(root, checkVersion)
	if err != nil {
		t.Fatal(err)
	}
	var mods []string
	for path, dir := range published {
		if dir == "runtime" || strings.HasPrefix(dir, "runtime/") {
			mods = append(mods, path)
		}
	}
	slices.Sort(mods)
	return mods
}

// consumerMain is an application that imports runtime/retry and every
// optional runtime module (each is a package at its module root).
func consumerMain(mods []string) string {
	imports := []string{"github.com/retryguard/retryguard/runtime/retry"}
	for _, m := range mods {
		if m != "github.com/retryguard/retryguard/runtime" {
			imports = append(imports, m)
		}
	}
	var b strings.Builder
	b.WriteString("package main\n\nimport (\n")
	for _, imp := range imports {
		fmt.Fprintf(&b, "\t_ %q\n", imp)
	}
	b.WriteString(")\n\nfunc main() {}\n")
	return b.String()
}

// TestReleaseInstallsFromAModuleProxy is make release-check: a user who
// installs the plugin or adds the runtime to an application resolves
// Retryguard's modules from a module proxy, with no workspace and no replace
// directive of ours in sight. The tree, stamped at checkVersion by Stamp, is
// published to a file-based proxy; third-party modules come from the local
// module cache and then the ordinary proxy behind it.
func TestReleaseInstallsFromAModuleProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the plugin and an application from a module proxy")
	}
	tmp := t.TempDir()
	src, proxy := filepath.Join(tmp, "src"), filepath.Join(tmp, "proxy")
	if err := CopyTree(repoRoot(t), src); err != nil {
		t.Fatal(err)
	}
	if _, err := Stamp(src, checkVersion); err != nil {
		t.Fatal(err)
	}
	if err := BuildProxy(src, proxy, checkVersion); err != nil {
		t.Fatal(err)
	}
	env := userEnv(t, tmp, proxy)

	mods := runtimeModules(t, src)
	docs := docCommands(t, repoRoot(t), mods)
	t.Run("go install the plugin", func(t *testing.T) {
		for _, line := range docs["go install"] {
			goCmd(t, env, tmp, strings.Fields(line)[1:]...)
		}
		// The binary records the module version it was built from: the proxy's
		// (@latest is the one version it holds), not a work tree's or a replace's.
		out := goCmd(t, env, tmp, "version", "-m", filepath.Join(tmp, "bin", "kubectl-retryguard"))
		if want := "mod\tgithub.com/retryguard/retryguard\t" + checkVersion + "\t"; !strings.Contains(out, want) {
			t.Errorf("go version -m: want a line starting %q, got\n%s", want, out)
		}
	})

	// A module built from a clone of its tag (GOWORK=off, and -mod=readonly,
	// the go command's default) takes every checksum from its own go.sum,
	// its siblings' among them: a missing line is "missing go.sum entry".
	// The test imports are loaded too, so that go test in a clone works, and
	// go mod tidy would change nothing: the stamp wrote no line too many.
	t.Run("each module builds alone from its go.sum", func(t *testing.T) {
		readonly := append(slices.Clip(env), "GOFLAGS="+strings.TrimSpace(goFlags(t)+" -mod=readonly -modcacherw -trimpath"))
		for _, dir := range standalone(t, src) {
			t.Run(dir, func(t *testing.T) {
				goCmd(t, readonly, filepath.Join(src, dir), "build", "./...")
				goCmd(t, readonly, filepath.Join(src, dir), "list", "-deps", "-test", "./...")
				goCmd(t, readonly, filepath.Join(src, dir), "mod", "tidy", "-diff")
			})
		}
	})

	t.Run("go get the runtime modules", func(t *testing.T) {
		app := filepath.Join(tmp, "app")
		writeFile(t, filepath.Join(app, "go.mod"), "module example.com/app\n\ngo 1.26.0\n")
		writeFile(t, filepath.Join(app, "main.go"), consumerMain(mods))
		// Known third-party checksums, so the check needs no checksum database;
		// ours are verified by nothing (GONOSUMDB), as a private module's are.
		writeFile(t, filepath.Join(app, "go.sum"), publishedSums(t, src))
		for _, line := range docs["go get"] {
			goCmd(t, env, app, strings.Fields(line)[1:]...)
		}
		goCmd(t, env, app, "build", "-o", filepath.Join(tmp, "bin", "app"), ".")
		out := goCmd(t, env, app, append([]string{"list", "-m", "-f", "{{.Path}} {{.Version}}"}, mods...)...)
		for _, m := range mods {
			if want := m + " " + checkVersion; !strings.Contains(out, want+"\n") {
				t.Errorf("go list -m: want %q, got\n%s", want, out)
			}
		}
	})
}

// docCommands are the `go install` and `go get` lines of Retryguard's modules
// that the docs tell users to run, keyed by the command, comments dropped: the
// check runs exactly those. docs/kubectl-plugin.md must give the one install
// line, and README.md and docs/runtime.md between them a go get line for each
// of the runtime modules (the runtime, the informer and the Kafka sink).
func docCommands(t *testing.T, root string, mods []string) map[string][]string {
	t.Helper()
	line := regexp.MustCompile(`(?m)^(go (?:install|get) github\.com/retryguard/[^#\n]*?)\s*(?:#.*)?$`)
	cmds := map[string][]string{}
	for _, doc := range []string{"docs/kubectl-plugin.md", "README.md", "docs/runtime.md"} {
		data, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range line.FindAllStringSubmatch(string(data), -1) {
			key := strings.Join(strings.Fields(m[1])[:2], " ")
			if !slices.Contains(cmds[key], m[1]) {
				cmds[key] = append(cmds[key], m[1])
			}
		}
	}
	if got := cmds["go install"]; len(got) != 1 || !strings.HasPrefix(got[0], "go install github.com/retryguard/retryguard/cmd/kubectl-retryguard@") {
		t.Fatalf("the docs give the install lines %q, want one go install of cmd/kubectl-retryguard", got)
	}
	var got []string
	for _, line := range cmds["go get"] {
		for _, arg := range strings.Fields(line)[2:] {
			path, _, _ := strings.Cut(arg, "@")
			if !slices.Contains(mods, path) {
				t.Fatalf("the docs tell users to run %q, but %s is not a published runtime module (hack/release/modules.go)", line, path)
			}
			got = append(got, path)
		}
	}
	for _, m := range mods {
		if !slices.Contains(got, m) {
			t.Fatalf("the docs give the go get lines %q, none for %s", cmds["go get"], m)
		}
	}
	return cmds
}

// userEnv is the environment of a user outside the repository: no workspace,
// the file-based proxy first, and no checksum database for Retryguard's
// modules (GONOSUMDB; sum.golang.org has never seen the check version). Not
// GOPRIVATE: it implies GONOPROXY, which sends the go command to the origin
// (git) instead of the proxy, and GONOPROXY=none, which would undo that, makes
// go get report a nested module's package as missing from its parent
// (go1.26.8). The module cache is the test's own, so a version is never
// served from an earlier run; -trimpath keeps the build cache warm across runs
// all the same.
func userEnv(t *testing.T, tmp, proxy string) []string {
	t.Helper()
	cache := strings.TrimSpace(goCmd(t, os.Environ(), tmp, "env", "GOMODCACHE"))
	ordinary := strings.TrimSpace(goCmd(t, os.Environ(), tmp, "env", "GOPROXY"))
	return append(os.Environ(),
		"GOWORK=off",
		"GOFLAGS="+strings.TrimSpace(goFlags(t)+" -modcacherw -trimpath"),
		"GOPROXY=file://"+filepath.ToSlash(proxy)+",file://"+filepath.ToSlash(filepath.Join(cache, "cache", "download"))+","+ordinary,
		"GOMODCACHE="+filepath.Join(tmp, "mod"),
		"GONOSUMDB=github.com/retryguard/*",
		"GOBIN="+filepath.Join(tmp, "bin"),
	)
}

// standalone lists the modules of the tree at root that a user can build
// outside the workspace: the published ones, and any other that requires a
// published module without replacing it by a directory.
func standalone(t *testing.T, root string) []string {
	t.Helper()
	mods, published, err := tree(root, checkVersion)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, m := range mods {
		data, err := os.ReadFile(filepath.Join(root, m.Dir, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		f, err := modfile.Parse(m.Dir+"/go.mod", data, nil)
		if err != nil {
			t.Fatal(err)
		}
		replaced := map[string]bool{}
		for _, r := range f.Replace {
			replaced[r.Old.Path] = true
		}
		_, ok := published[m.Path]
		for _, r := range f.Require {
			if _, sibling := published[r.Mod.Path]; sibling && !replaced[r.Mod.Path] {
				ok = true
			}
		}
		if ok {
			dirs = append(dirs, m.Dir)
		}
	}
	return dirs
}

// goFlags is the GOFLAGS of the environment the test runs in, without a -mod
// flag: a user's go command runs with its default, -mod=readonly.
func goFlags(t *testing.T) string {
	t.Helper()
	var flags []string
	for _, f := range strings.Fields(goCmd(t, os.Environ(), t.TempDir(), "env", "GOFLAGS")) {
		if !strings.HasPrefix(f, "-mod=") && !strings.HasPrefix(f, "--mod=") {
			flags = append(flags, f)
		}
	}
	return strings.Join(flags, " ")
}

// publishedSums is every published module's go.sum, joined.
func publishedSums(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	for _, dir := range Published {
		data, err := os.ReadFile(filepath.Join(root, dir, "go.sum"))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.String()
}

func writeFile(t *testing.T, file, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// repoRoot is the repository this module sits in.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// The docs give one go install line for the plugin and a go get line for
// every published runtime module, and no go get line for a module that is not
// published (a user could not fetch it).
func TestDocsGiveTheInstallLines(t *testing.T) {
	root := repoRoot(t)
	cmds := docCommands(t, root, runtimeModules(t, root))
	t.Logf("%q", cmds)
}
