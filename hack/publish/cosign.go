package publish

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// SBOMType is the attestation type of each image's SBOM, as cosign names it
// (`cosign attest --type cyclonedx`, `cosign verify-attestation --type
// cyclonedx`); SBOMPredicateType is the in-toto predicate type it stands for.
const (
	SBOMType          = "cyclonedx"
	SBOMPredicateType = "https://cyclonedx.org/bom"
)

// Cosign runs the cosign command (hack/gotool.sh cosign). Signing reads the
// private key's password from COSIGN_PASSWORD, as cosign does.
type Cosign struct {
	// Path is the cosign binary.
	Path string
	// CAFile, when set, is the PEM CA the registry's certificate chains to
	// (--registry-cacert).
	CAFile string
	// SigningConfig names the services a signature is recorded with; empty,
	// Offline writes one with none: the key alone vouches for a signature,
	// with no transparency log, no timestamp authority and nothing fetched
	// from Sigstore's TUF repository.
	SigningConfig string
	// TrustedRoot is the verification material for those services; Offline
	// writes an empty one.
	TrustedRoot string
}

// Offline fills in an empty SigningConfig and TrustedRoot with files in dir,
// written by cosign itself so that their format is the one it reads.
func (c *Cosign) Offline(ctx context.Context, dir string) error {
	if c.SigningConfig == "" {
		c.SigningConfig = filepath.Join(dir, "signing-config.json")
		if _, err := c.run(ctx, "signing-config", "create", "--out", c.SigningConfig); err != nil {
			return err
		}
	}
	if c.TrustedRoot == "" {
		c.TrustedRoot = filepath.Join(dir, "trusted-root.json")
		if _, err := c.run(ctx, "trusted-root", "create", "--no-default-fulcio", "--no-default-ctfe", "--no-default-rekor",
			"--no-default-tsa", "--out", c.TrustedRoot); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cosign) registryFlags() []string {
	if c.CAFile == "" {
		return nil
	}
	return []string{"--registry-cacert", c.CAFile}
}

func (c *Cosign) signFlags(key string) []string {
	return append([]string{"--key", key, "--signing-config", c.SigningConfig, "--trusted-root", c.TrustedRoot, "--yes"}, c.registryFlags()...)
}

// verifyFlags skip the transparency log, which a key-signed release without
// one has no entry in: the public key is the whole trust.
func (c *Cosign) verifyFlags(pub string) []string {
	return append([]string{"--key", pub, "--insecure-ignore-tlog"}, c.registryFlags()...)
}

// Sign signs the artifact at ref, which names it by digest: a tag could move
// between the push and the signature.
func (c *Cosign) Sign(ctx context.Context, key, ref string) error {
	if !strings.Contains(ref, "@sha256:") {
		return fmt.Errorf("cosign sign %s: sign by digest (repository@sha256:...), not by tag", ref)
	}
	_, err := c.run(ctx, append(append([]string{"sign"}, c.signFlags(key)...), ref)...)
	return err
}

// AttestSBOM attaches the SBOM at predicate to the image at ref (by digest)
// as a signed CycloneDX attestation.
func (c *Cosign) AttestSBOM(ctx context.Context, key, ref, predicate string) error {
	if !strings.Contains(ref, "@sha256:") {
		return fmt.Errorf("cosign attest %s: attest by digest (repository@sha256:...), not by tag", ref)
	}
	args := append([]string{"attest"}, c.signFlags(key)...)
	_, err := c.run(ctx, append(args, "--type", SBOMType, "--predicate", predicate, ref)...)
	return err
}

// Verify checks that the artifact ref names (by tag or digest) carries a
// signature the public key pub made, and returns the digest it verified.
func (c *Cosign) Verify(ctx context.Context, pub, ref string) (string, error) {
	out, err := c.run(ctx, append(append([]string{"verify"}, c.verifyFlags(pub)...), "--output", "json", ref)...)
	if err != nil {
		return "", err
	}
	var payloads []struct {
		Critical struct {
			Image struct {
				Digest string `json:"docker-manifest-digest"`
			} `json:"image"`
		} `json:"critical"`
	}
	if err := json.Unmarshal(lastJSON(out), &payloads); err != nil {
		return "", fmt.Errorf("cosign verify %s: reading its output: %w\n%s", ref, err, out)
	}
	digest := ""
	for _, p := range payloads {
		if digest != "" && p.Critical.Image.Digest != digest {
			return "", fmt.Errorf("cosign verify %s: signatures of two digests, %s and %s", ref, digest, p.Critical.Image.Digest)
		}
		digest = p.Critical.Image.Digest
	}
	if digest == "" {
		return "", fmt.Errorf("cosign verify %s: no signed digest in its output\n%s", ref, out)
	}
	return digest, nil
}

// BOM is what the suite and the tests read of a verified SBOM.
type BOM struct {
	BOMFormat string `json:"bomFormat"`
	Metadata  struct {
		Component struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"component"`
	} `json:"metadata"`
	Components []Component `json:"components"`
}

// Component is one module a BOM lists.
type Component struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// VerifySBOM checks that the image ref names carries an SBOM attestation the
// public key pub signed, for digest, and returns the SBOM.
func (c *Cosign) VerifySBOM(ctx context.Context, pub, ref, digest string) (*BOM, error) {
	out, err := c.run(ctx, append(append([]string{"verify-attestation"}, c.verifyFlags(pub)...), "--type", SBOMType, ref)...)
	if err != nil {
		return nil, err
	}
	// One DSSE envelope per line, each an in-toto statement in base64.
	for _, line := range bytes.Split(out, []byte("\n")) {
		var env struct {
			Payload string `json:"payload"`
		}
		if json.Unmarshal(line, &env) != nil || env.Payload == "" {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(env.Payload)
		if err != nil {
			return nil, fmt.Errorf("cosign verify-attestation %s: payload: %w", ref, err)
		}
		var st struct {
			PredicateType string `json:"predicateType"`
			Subject       []struct {
				Digest map[string]string `json:"digest"`
			} `json:"subject"`
			Predicate BOM `json:"predicate"`
		}
		if err := json.Unmarshal(raw, &st); err != nil {
			return nil, fmt.Errorf("cosign verify-attestation %s: statement: %w", ref, err)
		}
		if st.PredicateType != SBOMPredicateType {
			continue
		}
		for _, s := range st.Subject {
			if "sha256:"+s.Digest["sha256"] == digest {
				return &st.Predicate, nil
			}
		}
	}
	return nil, fmt.Errorf("cosign verify-attestation %s: no %s attestation for %s in its output", ref, SBOMPredicateType, digest)
}

// GenerateKeyPair writes cosign.key and cosign.pub into dir with cosign
// (COSIGN_PASSWORD is the private key's password) and returns their paths.
func (c *Cosign) GenerateKeyPair(ctx context.Context, dir string) (key, pub string, err error) {
	prefix := filepath.Join(dir, "cosign")
	if _, err := c.run(ctx, "generate-key-pair", "--output-key-prefix", prefix); err != nil {
		return "", "", err
	}
	return prefix + ".key", prefix + ".pub", nil
}

// run runs cosign and returns its stdout; a failure's error holds its
// command line and its stderr, which says why (no signatures found, say).
func (c *Cosign) run(ctx context.Context, args ...string) ([]byte, error) {
	if c.Path == "" {
		return nil, errors.New("cosign: no binary given (hack/gotool.sh cosign builds one)")
	}
	cmd := exec.CommandContext(ctx, c.Path, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Never prompt: a missing password fails instead of waiting on a terminal.
	cmd.Stdin = nil
	cmd.Env = append(os.Environ(), "COSIGN_YES=true")
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("cosign %s: %w\n%s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// lastJSON is the last line of out that holds JSON: cosign verify prints
// its result there, after any notice.
func lastJSON(out []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		if l := bytes.TrimSpace(lines[i]); len(l) > 0 && (l[0] == '[' || l[0] == '{') {
			return l
		}
	}
	return out
}
