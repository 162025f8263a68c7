# Build the manager binary. (Without Docker, `make image` builds the same
# image FROM scratch as an OCI archive.)
FROM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
ARG REVISION=unknown
WORKDIR /workspace
# The runtime is a module of its own, required through a replace directive:
# its go.mod files come first, so that the download layer is cached.
COPY go.mod go.sum ./
COPY runtime/go.mod runtime/go.sum runtime/
COPY runtime/watch/informer/go.mod runtime/watch/informer/go.sum runtime/watch/informer/
RUN go mod download
COPY main.go certrotation.go ./
COPY api/ api/
COPY controllers/ controllers/
COPY webhooks/ webhooks/
COPY runtime/ runtime/
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath \
    -ldflags="-s -w -X main.version=${VERSION} -X main.revision=${REVISION}" -o manager .

# A distroless base: no shell, no package manager, a non-root user.
FROM gcr.io/distroless/static:nonroot
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.source="https://github.com/retryguard/retryguard" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.version="${VERSION}"
WORKDIR /
COPY --from=builder /workspace/manager .
USER 65532:65532
ENTRYPOINT ["/manager"]
