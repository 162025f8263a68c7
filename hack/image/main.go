// Command image packs the manager binary into an OCI image without a
// container engine or a registry, for `make image`:
//
//	go run . -binary ../../bin/image/manager -output ../../bin/image/retryguard-manager.tar \
//	    -version 0.1.0 -revision "$(git rev-parse HEAD)" -created "$(git log -1 --format=%ct)"
//
// The image is FROM scratch: the static manager at /manager as the
// entrypoint, user 65532:65532, the OCI source, revision and version labels,
// and nothing else (no shell). The tarball is an OCI image layout that also
// carries docker-archive's manifest.json, so both of these load it:
//
//	ctr -n k8s.io images import bin/image/retryguard-manager.tar
//	docker load -i bin/image/retryguard-manager.tar
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	m := Metadata{Platform: v1.Platform{OS: "linux"}}
	binary := fs.String("binary", "", "the static manager binary to pack (required)")
	output := fs.String("output", "", "where to write the image tarball (required)")
	created := fs.String("created", "", "the image's time in Unix seconds, normally the commit's (required)")
	fs.StringVar(&m.Repository, "repository", DefaultRepository, "the image's name without its tag")
	fs.StringVar(&m.Version, "version", "", "the image's tag and version label (required)")
	fs.StringVar(&m.Revision, "revision", "", "the commit the binary was built from (required)")
	fs.StringVar(&m.Source, "source", DefaultSource, "the source repository's URL")
	fs.StringVar(&m.Platform.Architecture, "arch", runtime.GOARCH, "the binary's GOARCH")
	fs.StringVar(&m.Path, "path", BinaryPath, "where the binary goes in the image, its entrypoint")
	fs.StringVar(&m.Title, "title", DefaultTitle, "the image's title label")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *binary == "" || *output == "" {
		return fmt.Errorf("-binary and -output are required")
	}
	secs, err := strconv.ParseInt(*created, 10, 64)
	if err != nil {
		return fmt.Errorf("-created %q: want Unix seconds, such as `git log -1 --format=%%ct`", *created)
	}
	m.Created = time.Unix(secs, 0).UTC()
	raw, err := os.ReadFile(*binary)
	if err != nil {
		return err
	}
	img, err := Image(raw, m)
	if err != nil {
		return err
	}
	if err := WriteArchiveFile(*output, img, m); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	tag, _ := m.Tag()
	fmt.Printf("%s %s (%s/%s) written to %s\n", tag, digest, m.Platform.OS, m.Platform.Architecture, *output)
	return nil
}
