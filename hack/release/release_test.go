package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The tree as committed is ready to tag at the chart's appVersion: the
// published modules hold no replace, every sibling requirement names that
// version, the chart and kustomize agree on it, and go.work uses every module.
func TestTreeIsReadyAtTheChartVersion(t *testing.T) {
	root := repoRoot(t)
	version := "v" + chartAppVersion(t, root)
	problems, err := Check(root, version)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// Stamping changes the version lines and nothing else, leaves a tree that is
// ready to tag, and a second stamp changes nothing.
func TestStampChangesOnlyVersionLines(t *testing.T) {
	root := repoRoot(t)
	tmp := t.TempDir()
	if err := CopyTree(root, tmp); err != nil {
		t.Fatal(err)
	}
	const version = "v0.42.1"
	changed, err := Stamp(tmp, version)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"go.mod", "runtime/watch/informer/go.mod", "runtime/events/kafka/go.mod", chartFile, kustomizationFile, krewFile,
		"go.sum", "runtime/watch/informer/go.sum", "runtime/events/kafka/go.sum", "runtime/grpc/go.sum"} {
		if !slices.Contains(changed, want) {
			t.Errorf("Stamp changed %v, want %s among them", changed, want)
		}
	}
	versionLine := regexp.MustCompile(`^\s*(require\s+)?github\.com/retryguard/retryguard(/\S+)? v0\.42\.1( // indirect)?$|` +
		`^github\.com/retryguard/retryguard(/\S+)? v0\.42\.1(/go\.mod)? h1:\S+$|` +
		`^version: 0\.42\.1$|^appVersion: "0\.42\.1"$|^\s*newTag: 0\.42\.1$|` +
		`^  version: v0\.42\.1$|^\s*uri: https://github\.com/retryguard/retryguard/releases/download/v0\.42\.1/kubectl-retryguard_[a-z0-9]+_[a-z0-9]+\.tar\.gz$`)
	for _, file := range changed {
		before, after := readLines(t, filepath.Join(root, file)), readLines(t, filepath.Join(tmp, file))
		if len(before) != len(after) {
			t.Errorf("%s: %d lines before the stamp, %d after; a stamp only rewrites lines", file, len(before), len(after))
			continue
		}
		for i := range before {
			if before[i] != after[i] && !versionLine.MatchString(after[i]) {
				t.Errorf("%s:%d: the stamp rewrote %q as %q, which states no release version", file, i+1, before[i], after[i])
			}
		}
	}
	problems, err := Check(tmp, version)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("after Stamp(%s): %s", version, p)
	}
	if again, err := Stamp(tmp, version); err != nil || len(again) > 0 {
		t.Errorf("a second Stamp(%s) changed %v (err %v), want nothing", version, again, err)
	}
	if stale, err := CheckSums(tmp, version); err != nil || len(stale) > 0 {
		t.Errorf("CheckSums after Stamp(%s): %q (err %v), want nothing", version, stale, err)
	}
}

// A sibling changed after the stamp no longer hashes as the go.sum lines of
// the modules that require it say: CheckSums names each line, and -check
// fails on it, so such a tree is never tagged. A new stamp writes them again.
func TestCheckSumsNamesASiblingChangedSinceTheStamp(t *testing.T) {
	root := repoRoot(t)
	tmp := t.TempDir()
	if err := CopyTree(root, tmp); err != nil {
		t.Fatal(err)
	}
	version := "v" + chartAppVersion(t, root)
	if _, err := Stamp(tmp, version); err != nil {
		t.Fatal(err)
	}
	appendFile(t, filepath.Join(tmp, "runtime/retry/decide.go"), "\n// changed after the stamp\n")
	stale, err := CheckSums(tmp, version)
	if err != nil {
		t.Fatal(err)
	}
	// The root, the informer, the Kafka sink, gRPC, OpenTelemetry and
	// conformance require the runtime; the informer's and Kafka's own zips are unchanged.
	var files []string
	for _, p := range stale {
		if !strings.Contains(p, " github.com/retryguard/retryguard/runtime "+version+" h1:") {
			t.Errorf("CheckSums: %q, want only the runtime's zip hash", p)
		}
		files = append(files, strings.SplitN(p, ":", 2)[0])
	}
	slices.Sort(files)
	want := []string{"conformance/go.sum", "go.sum", "runtime/events/kafka/go.sum", "runtime/grpc/go.sum", "runtime/otel/go.sum",
		"runtime/watch/informer/go.sum"}
	if !slices.Equal(files, want) {
		t.Errorf("CheckSums names %q, want %q", files, want)
	}
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"-root", tmp, "-check", version}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "changed since the stamp") {
		t.Errorf("release -check %s: exit %d, want 1 naming the stale lines\n%s", version, code, stderr.String())
	}
	if _, err := Stamp(tmp, version); err != nil {
		t.Fatal(err)
	}
	if stale, err := CheckSums(tmp, version); err != nil || len(stale) > 0 {
		t.Errorf("CheckSums after a new stamp: %q (err %v), want nothing", stale, err)
	}
}

// Check names each way a tree is not ready, with the file: a replace in a
// published module, a sibling at another version, a tag that disagrees, and a
// new module that is neither classified nor in the workspace, nor has the
// go.sum lines of the sibling it requires.
func TestCheckNamesEveryProblem(t *testing.T) {
	root := repoRoot(t)
	tmp := t.TempDir()
	if err := CopyTree(root, tmp); err != nil {
		t.Fatal(err)
	}
	version := "v" + chartAppVersion(t, root)
	appendFile(t, filepath.Join(tmp, "runtime/events/kafka/go.mod"), "\nreplace github.com/retryguard/retryguard/runtime => ../..\n")
	writeFile(t, filepath.Join(tmp, "runtime/unlisted/go.mod"),
		"module github.com/retryguard/retryguard/runtime/unlisted\n\ngo 1.26.0\n\nrequire github.com/retryguard/retryguard/runtime v0.0.0\n")
	kustomization := filepath.Join(tmp, kustomizationFile)
	data, err := os.ReadFile(kustomization)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, kustomization, lineRE(t, "the manager image's newTag").ReplaceAllString(string(data), "${1}dev"))
	krew := filepath.Join(tmp, krewFile)
	if data, err = os.ReadFile(krew); err != nil {
		t.Fatal(err)
	}
	writeFile(t, krew, strings.Replace(string(data),
		"/download/"+version+"/kubectl-retryguard_darwin_arm64", "/download/v0.0.9/kubectl-retryguard_darwin_arm64", 1))

	problems, err := Check(tmp, version)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(problems, "\n")
	for _, want := range []string{
		"runtime/events/kafka/go.mod:",
		"replace github.com/retryguard/retryguard/runtime: a published module holds no replace",
		"runtime/unlisted/go.mod:5: requires github.com/retryguard/retryguard/runtime v0.0.0, want " + version,
		"runtime/unlisted/go.mod: a module outside hack/ and test/ must be listed in hack/release/modules.go",
		"go.work: the module runtime/unlisted is not in go.work (go work use ./runtime/unlisted)",
		kustomizationFile + `: the manager image's newTag is "dev", want "` + strings.TrimPrefix(version, "v") + `"`,
		krewFile + ": a uri downloads v0.0.9, want " + version,
		"runtime/unlisted/go.sum: no line for github.com/retryguard/retryguard/runtime " + version + ": a build outside the workspace stops",
		"runtime/unlisted/go.sum: no line for github.com/retryguard/retryguard/runtime " + version + "/go.mod:",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Check: want a problem containing %q, got\n%s", want, got)
		}
	}
	if len(problems) != 8 {
		t.Errorf("Check: %d problems, want 8:\n%s", len(problems), got)
	}
}

func TestCheckVersion(t *testing.T) {
	for v, ok := range map[string]bool{
		"v0.2.0": true, "v1.4.10": true, "v0.3.0-rc.1": true,
		"0.2.0": false, "v0.2": false, "v2.0.0": false, "v0.2.0+build.1": false, "": false, "vX.Y.Z": false,
	} {
		if err := CheckVersion(v); (err == nil) != ok {
			t.Errorf("CheckVersion(%q) = %v, want ok=%v", v, err, ok)
		}
	}
}

// The command checks a tree stamped at the chart's version and prints every
// module's tag; a bad version is a usage error. (The committed tree's sibling
// sums are those of the last stamp, which a later change to a sibling makes
// stale until the next: TestCheckSumsNamesASiblingChangedSinceTheStamp.)
func TestRunCheckPrintsTheTags(t *testing.T) {
	root := t.TempDir()
	if err := CopyTree(repoRoot(t), root); err != nil {
		t.Fatal(err)
	}
	version := "v" + chartAppVersion(t, root)
	if _, err := Stamp(root, version); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"-root", root, "-check", version}, &stdout, &stderr); code != 0 {
		t.Fatalf("release -check %s: exit %d\n%s", version, code, stderr.String())
	}
	want := "git push origin " + version + " contract/" + version + " runtime/" + version + " runtime/watch/informer/" + version +
		" runtime/events/kafka/" + version + " runtime/grpc/" + version + " runtime/otel/" + version + "\n"
	if !strings.HasSuffix(stdout.String(), want) {
		t.Errorf("release -check %s printed\n%s\nwant it to end with %q", version, stdout.String(), want)
	}
	if code := run(t.Context(), []string{"-root", root, "-check", "v2.0.0"}, &stdout, &stderr); code != 2 {
		t.Errorf("release -check v2.0.0: exit %d, want 2", code)
	}
}

// docs/release.md's table of published modules is Published, row for row.
func TestReleaseDocListsThePublishedModules(t *testing.T) {
	root := repoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "release.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, published, err := tree(root, "v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(github\\.com/retryguard/[^`]+)` \\| `([^`]*vX\\.Y\\.Z)` \\|")
	var got, want []string
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		got = append(got, m[1]+" "+m[2])
	}
	for path, dir := range published {
		want = append(want, path+" "+Tag(dir, "vX.Y.Z"))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("docs/release.md lists the published modules and tags\n%v\nwant (hack/release/modules.go)\n%v", got, want)
	}
}

func chartAppVersion(t *testing.T, root string) string {
	t.Helper()
	v, err := lineValue(filepath.Join(root, chartFile), lineRE(t, "appVersion"))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// lineRE is the pattern of the version line versionLines names what.
func lineRE(t *testing.T, what string) *regexp.Regexp {
	t.Helper()
	for _, l := range versionLines {
		if l.what == what {
			return l.re
		}
	}
	t.Fatalf("no version line %q", what)
	return nil
}

func readLines(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(data), "\n")
}

// readLinesIfAny is readLines, with no lines for a file that does not exist.
func readLinesIfAny(t *testing.T, file string) []string {
	t.Helper()
	if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return readLines(t, file)
}

func appendFile(t *testing.T, file, data string) {
	t.Helper()
	f, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// The published modules as committed are tidy, and Tidy, which has to replace
// their siblings by directory meanwhile, leaves no replace behind: tidying a
// copy changes no go.mod and no go.sum.
func TestPublishedModulesAreTidy(t *testing.T) {
	root := repoRoot(t)
	tmp := t.TempDir()
	if err := CopyTree(root, tmp); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	if err := Tidy(commandContext(t), tmp, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	for _, dir := range Published {
		for _, name := range []string{"go.mod", "go.sum"} {
			file := filepath.Join(dir, name)
			// A module without dependencies (the contract) has no go.sum, before or after.
			before, after := readLinesIfAny(t, filepath.Join(root, file)), readLinesIfAny(t, filepath.Join(tmp, file))
			if !slices.Equal(before, after) {
				t.Errorf("%s is not tidy (make tidy): go mod tidy removes %q and adds %q", file, missing(after, before), missing(before, after))
			}
		}
	}
}

// missing lists the lines of b that a lacks.
func missing(a, b []string) []string {
	var out []string
	for _, l := range b {
		if !slices.Contains(a, l) {
			out = append(out, l)
		}
	}
	return out
}
