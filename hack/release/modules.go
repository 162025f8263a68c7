package main

// Published lists the directories, relative to the repository root, of the
// modules a release publishes: each is tagged <dir>/vX.Y.Z (the root vX.Y.Z),
// requires its published siblings at that same version, and holds no replace
// directive, because `go install pkg@version` refuses a module that has one.
// This list is the one home of that fact: hack/release stamps and tags these,
// make release-check installs them from a file-based proxy, and docs/release.md
// is held to it by TestReleaseDocListsThePublishedModules. A module added here
// is added to all three.
var Published = []string{
	".",
	"contract",
	"runtime",
	"runtime/watch/informer",
	"runtime/events/kafka",
	"runtime/grpc",
	"runtime/otel",
}

// NotPublished lists the modules outside hack/ and test/ that are never
// released. Every module under hack/ and test/ is a development tool or a test
// suite and is never released either. Any other module must be in Published or
// here, so that a new module is classified on purpose (TestEveryModuleIsClassified).
var NotPublished = []string{
	"conformance",
	"runtime/benchmarks",
}

// The files that carry the release version besides the go.mod files. The image
// tag is the chart's appVersion (make image, and the chart's default tag), so
// stamping the chart stamps the image.
const (
	chartFile         = "charts/retryguard/Chart.yaml"
	kustomizationFile = "config/manager/kustomization.yaml"
	workFile          = "go.work"
	// krewFile is the plugin's krew manifest: its spec.version and the
	// version in each platform's uri are stamped, and -dist writes each
	// archive's sha256 (dist.go).
	krewFile = "plugins/retryguard.yaml"
)
