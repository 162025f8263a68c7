// Command publish is `make release-push`: it pushes the image archives named
// as arguments and the chart to an OCI registry, signs each with cosign and
// attests each image's SBOM (package publish), then prints what it pushed:
//
//	COSIGN_PASSWORD=… go run ./cmd/publish -registry registry.example.com -key cosign.key \
//	    -cosign "$(hack/gotool.sh cosign)" -sbom-tool "$(hack/gotool.sh cyclonedx-gomod)" \
//	    -chart charts/retryguard bin/image/retryguard-manager.tar bin/image/retryguard-proxy.tar
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/retryguard/retryguard/hack/publish"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("publish", flag.ContinueOnError)
	var o publish.Options
	fs.StringVar(&o.Registry, "registry", "", "the registry, and a path under it, to push to: host[:port][/path] (required)")
	fs.StringVar(&o.CAFile, "ca", "", "a PEM CA the registry's certificate chains to, trusted besides the system's")
	fs.StringVar(&o.Chart, "chart", "", "the chart's directory (required)")
	fs.StringVar(&o.Key, "key", "", "cosign's private key; COSIGN_PASSWORD holds its password (required)")
	fs.StringVar(&o.Cosign.Path, "cosign", "", "the cosign binary (required)")
	fs.StringVar(&o.Cosign.SigningConfig, "signing-config", "",
		"a Sigstore signing config naming a transparency log to record the signatures in; empty: none, the key alone")
	fs.StringVar(&o.Cosign.TrustedRoot, "trusted-root", "", "the Sigstore trusted root for -signing-config's services")
	fs.StringVar(&o.SBOMTool, "sbom-tool", "", "the cyclonedx-gomod binary (required)")
	fs.StringVar(&o.OutDir, "out", "", "a directory to keep each image's SBOM in, <name>.cdx.json")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: publish -registry host[/path] -key cosign.key -cosign PATH -sbom-tool PATH -chart DIR IMAGE.tar...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.Images = fs.Args()
	o.Logf = func(format string, a ...any) { fmt.Fprintf(os.Stderr, "publish: "+format+"\n", a...) }
	rel, err := publish.Publish(ctx, o)
	if err != nil {
		return err
	}
	for _, a := range append(rel.Images, rel.Chart) {
		fmt.Printf("%s %s\n", a.Tag, a.Digest)
	}
	return nil
}
