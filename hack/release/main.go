// Command release cuts a Retryguard release (docs/release.md):
//
//	go -C hack/release run . v0.2.0         stamp the tree at v0.2.0, print the tags
//	go -C hack/release run . -check v0.2.0  change nothing; fail unless the tree is stamped at v0.2.0
//	go -C hack/release run . -tag v0.2.0    check, then create the tags at HEAD (the stamp committed)
//	go -C hack/release run . -dist DIR v0.2.0  build the plugin's archives into DIR, write their sha256 into the krew manifest
//	go -C hack/release run . -tidy          go mod tidy every published module (make tidy)
//
// Stamping sets every requirement of a published module (Published) to the
// version, and the go.sum lines of those requirements (sums.go), the chart's
// version and appVersion, the krew manifest's version and uris, and the
// kustomize image tag; the image make image builds is tagged with the chart's
// appVersion. -check and -tag verify those go.sum lines against the tree
// (CheckSums). The tags are vX.Y.Z for the root module and <dir>/vX.Y.Z for
// each nested published one.
//
// Exit status: 0 done, 1 the tree is not ready (each problem printed), 2 usage.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	// The go commands it starts run in process groups of their own
	// (goCommand), out of the terminal's reach: on SIGINT or SIGTERM they
	// are killed with the context.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("release", flag.ContinueOnError)
	fl.SetOutput(stderr)
	root := fl.String("root", "", "the repository root (default: the enclosing git work tree)")
	checkOnly := fl.Bool("check", false, "change nothing; fail unless the tree is stamped at the version")
	tag := fl.Bool("tag", false, "check that the tree is stamped and committed, then create the tags at HEAD")
	dist := fl.String("dist", "", "build the plugin's archives for every platform of the krew manifest into `DIR`, and write their sha256 into it")
	tidy := fl.Bool("tidy", false, "go mod tidy every published module, its published siblings replaced by their directories meanwhile")
	fl.Usage = func() {
		fmt.Fprintln(stderr, "usage: release [-root DIR] [-check | -tag] vX.Y.Z\n       release [-root DIR] -dist DIR vX.Y.Z\n       release [-root DIR] -tidy")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil || fl.NArg() != 1 && !*tidy || *tidy && (fl.NArg() != 0 || *checkOnly || *tag) || *checkOnly && *tag {
		if err == nil {
			fl.Usage()
		}
		return 2
	}
	version := fl.Arg(0)
	if err := CheckVersion(version); err != nil && !*tidy {
		fmt.Fprintln(stderr, "release:", err)
		return 2
	}
	if *root == "" {
		out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
		if err != nil {
			fmt.Fprintln(stderr, "release: not in a git work tree; pass -root:", err)
			return 2
		}
		*root = strings.TrimSpace(string(out))
	}

	if *tidy {
		if err := Tidy(ctx, *root, stdout); err != nil {
			fmt.Fprintln(stderr, "release:", err)
			return 1
		}
		return 0
	}
	if *dist != "" {
		archives, err := Dist(ctx, *root, version, *dist, func(string, string) bool { return true })
		if err != nil {
			fmt.Fprintln(stderr, "release:", err)
			return 1
		}
		for _, a := range archives {
			fmt.Fprintln(stdout, "built", a)
		}
		fmt.Fprintf(stdout, "wrote their sha256 into %s; commit it, and attach the archives to the %s release\n", krewFile, version)
		return 0
	}
	if !*checkOnly && !*tag {
		changed, err := Stamp(*root, version)
		if err != nil {
			fmt.Fprintln(stderr, "release:", err)
			return 1
		}
		for _, f := range changed {
			fmt.Fprintln(stdout, "stamped", f)
		}
	}
	problems, err := Check(*root, version)
	if err != nil {
		fmt.Fprintln(stderr, "release:", err)
		return 1
	}
	stale, err := CheckSums(*root, version)
	if err != nil {
		fmt.Fprintln(stderr, "release:", err)
		return 1
	}
	problems = append(problems, stale...)
	if len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(stderr, p)
		}
		fmt.Fprintf(stderr, "release: the tree is not ready for %s: %d problems\n", version, len(problems))
		return 1
	}
	tags := Tags(version)
	if !*tag {
		fmt.Fprintf(stdout, "the tree is stamped at %s; commit it, run make release-check, then tag it:\n", version)
		fmt.Fprintf(stdout, "  go -C hack/release run . -tag %s\n  git push origin %s\n", version, strings.Join(tags, " "))
		return 0
	}
	if err := createTags(*root, version, tags); err != nil {
		fmt.Fprintln(stderr, "release:", err)
		return 1
	}
	fmt.Fprintf(stdout, "tagged HEAD: %s\npush them together: git push origin %s\n", strings.Join(tags, " "), strings.Join(tags, " "))
	return 0
}

// createTags tags HEAD with every module's tag, refusing a tree with
// uncommitted changes, untracked files that git does not ignore among them:
// the tags must name the stamped commit, and the go.sum lines hash the files
// a clone holds once the work tree is committed (cloneFiles).
func createTags(root, version string, tags []string) error {
	status, err := exec.Command("git", "-C", root, "status", "--porcelain").Output()
	if err != nil {
		return fmt.Errorf("git status: %w", err)
	}
	if len(status) > 0 {
		return fmt.Errorf("uncommitted changes; commit the stamped tree before tagging it:\n%s", status)
	}
	for _, t := range tags {
		out, err := exec.Command("git", "-C", root, "tag", "-a", t, "-m", "Retryguard "+version).CombinedOutput()
		if err != nil {
			return fmt.Errorf("git tag %s: %w\n%s", t, err, out)
		}
	}
	return nil
}
