// Module image packs the manager binary into an OCI image without a container
// engine or a registry, in a module of its own so that go-containerregistry's
// dependencies never move the operator's. `make image` drives it.
module github.com/retryguard/retryguard/hack/image

go 1.26.0

require (
	github.com/google/go-containerregistry v0.22.1
	github.com/opencontainers/image-spec v1.1.1
)

require (
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	golang.org/x/sync v0.22.0 // indirect
)
