package main

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/retryguard/retryguard/hack/image/oci"
)

const (
	// NonRootUser is the user and group the manager runs as.
	NonRootUser = oci.NonRootUser
	// BinaryPath is the manager in the image; config/manager and the chart
	// name it as the container's command too.
	BinaryPath = "/manager"
	// DefaultRepository is the image's name without its tag.
	DefaultRepository = "retryguard/manager"
	// DefaultSource is the org.opencontainers.image.source label.
	DefaultSource = "https://github.com/retryguard/retryguard"
)

// Metadata is what the image says about itself.
type Metadata struct {
	// Repository and Version make the image's tag, Repository:Version.
	Repository, Version string
	// Revision is the commit the binary was built from; Source is the
	// repository's URL.
	Revision, Source string
	// Created stamps the image and its files; a commit's time keeps a
	// rebuild of the same commit byte-for-byte identical.
	Created time.Time
	// Platform is the binary's GOOS and GOARCH.
	Platform v1.Platform
	// Path is where the binary is and the entrypoint (BinaryPath when
	// empty); Title is the title label (DefaultTitle when empty). The
	// retryguard-proxy sidecar's image is packed with its own.
	Path, Title string
}

// DefaultTitle is the manager image's org.opencontainers.image.title label.
const DefaultTitle = "retryguard-manager"

// Tag is the image's tag, Repository:Version.
func (m Metadata) Tag() (name.Tag, error) {
	t, err := name.NewTag(m.Repository + ":" + m.Version)
	if err != nil {
		return name.Tag{}, fmt.Errorf("repository %q and version %q make no image tag: %w", m.Repository, m.Version, err)
	}
	return t, nil
}

func (m Metadata) validate() error {
	var errs []error
	for field, value := range map[string]string{"version": m.Version, "revision": m.Revision, "source": m.Source} {
		if value == "" {
			errs = append(errs, fmt.Errorf("%s is required (it is an OCI label)", field))
		}
	}
	if m.Version != "" {
		if _, err := m.Tag(); err != nil {
			errs = append(errs, err)
		}
	}
	if m.Created.IsZero() {
		errs = append(errs, errors.New("created is required: the commit's time makes rebuilds identical"))
	}
	if m.Platform.OS == "" || m.Platform.Architecture == "" {
		errs = append(errs, fmt.Errorf("platform %q is incomplete: OS and architecture are required", m.Platform.String()))
	}
	return errors.Join(errs...)
}

// Image returns the manager's image: FROM scratch, one layer holding binary
// at BinaryPath, run as NonRootUser, with the OCI labels from m.
func Image(binary []byte, m Metadata) (v1.Image, error) {
	if len(binary) == 0 {
		return nil, errors.New("the manager binary is empty")
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	path, title := cmp.Or(m.Path, BinaryPath), cmp.Or(m.Title, DefaultTitle)
	return oci.Image(oci.Spec{
		Binary:    binary,
		Path:      path,
		User:      NonRootUser,
		Created:   m.Created,
		Platform:  m.Platform,
		CreatedBy: "make image: COPY " + strings.TrimPrefix(path, "/") + " " + path,
		Labels: map[string]string{
			ocispec.AnnotationSource:   m.Source,
			ocispec.AnnotationRevision: m.Revision,
			ocispec.AnnotationVersion:  m.Version,
			ocispec.AnnotationTitle:    title,
		},
	})
}

// WriteArchiveFile writes the manager's image to path, tagged and stamped
// as m says; see oci.WriteArchiveFile.
func WriteArchiveFile(path string, img v1.Image, m Metadata) error {
	tag, err := m.Tag()
	if err != nil {
		return err
	}
	return oci.WriteArchiveFile(path, img, tag, m.Created)
}
