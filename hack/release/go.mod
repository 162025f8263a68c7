// Module release cuts a Retryguard release: it stamps every published
// module's sibling requirements, the chart and the kustomize image tag with one
// version, prints (or creates) the module tags, and builds the file-based module
// proxy that make release-check installs from. It is a module of its own, never
// published, so that the operator does not take its dependencies.
module github.com/retryguard/retryguard/hack/release

go 1.26.0

require golang.org/x/mod v0.41.0
