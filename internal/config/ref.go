package config

import (
	"fmt"
	"strings"

	"github.com/opencontainers/go-digest"
	"go.podman.io/image/v5/docker/reference"
)

// ImageRef is a parsed, pinned image reference: a tag and a sha256 digest.
type ImageRef struct {
	// Name is the repository with its domain, "ghcr.io/rhyssullivan/executor-selfhost".
	// A familiar Docker Hub name is normalized ("oven/bun" is
	// "docker.io/oven/bun"); a fully qualified one is kept as given.
	Name string
	// Domain is the registry, host[:port]: "ghcr.io", "127.0.0.1:5000".
	Domain string
	// Path is the repository within Domain, "rhyssullivan/executor-selfhost".
	Path string
	// Tag is the tag, "v1.5.12". It is informational: Digest pins the image.
	Tag string
	// Digest is the sha256 digest of the manifest or index the reference pins.
	Digest digest.Digest
}

// String returns the reference as Name:Tag@Digest.
func (r ImageRef) String() string {
	return r.Name + ":" + r.Tag + "@" + r.Digest.String()
}

// ParseImageRef parses s, which must follow the Docker reference grammar and
// carry both an explicit tag and a sha256 digest of 64 lowercase hex digits,
// e.g. "ghcr.io/o/executor:v1.5.12@sha256:e40b…". The error wraps ErrInvalid
// and names s and the rule it breaks.
func ParseImageRef(s string) (ImageRef, error) {
	r, rule := parseImageRef(s)
	if rule != "" {
		return ImageRef{}, &valueError{what: "image reference", value: s, rule: rule}
	}
	return r, nil
}

// pinnedForm is the shape an image reference must have.
const pinnedForm = "(want name:tag@sha256:<64 hex>)"

// parseImageRef is ParseImageRef returning the broken rule instead of an error.
func parseImageRef(s string) (ImageRef, string) {
	if s == "" {
		return ImageRef{}, "is empty " + pinnedForm
	}
	named, err := reference.ParseNormalizedNamed(s)
	if err != nil {
		return ImageRef{}, "is not an image reference: " + err.Error() + " " + pinnedForm
	}
	tagged, hasTag := named.(reference.NamedTagged)
	canon, hasDigest := named.(reference.Canonical)
	switch {
	case !hasTag && !hasDigest:
		return ImageRef{}, "has no tag and no digest " + pinnedForm
	case !hasTag:
		return ImageRef{}, "has no tag " + pinnedForm
	case !hasDigest:
		return ImageRef{}, "has no digest " + pinnedForm
	}
	d := canon.Digest()
	if d.Algorithm() != digest.SHA256 {
		return ImageRef{}, fmt.Sprintf("has a %s digest %s", d.Algorithm(), pinnedForm)
	}
	if err := d.Validate(); err != nil {
		return ImageRef{}, "has an invalid digest: " + err.Error()
	}
	return ImageRef{
		Name:   named.Name(),
		Domain: reference.Domain(named),
		Path:   reference.Path(named),
		Tag:    tagged.Tag(),
		Digest: d,
	}, ""
}

// ParsePlatform splits an OCI platform "os/arch[/variant]", e.g.
// "linux/arm64" or "linux/arm/v7", into its parts. Each part is non-empty
// and made of lowercase letters, digits and underscores. The error wraps
// ErrInvalid.
func ParsePlatform(s string) (os, arch, variant string, err error) {
	os, arch, variant, rule := parsePlatform(s)
	if rule != "" {
		return "", "", "", &valueError{what: "platform", value: s, rule: rule}
	}
	return os, arch, variant, nil
}

// parsePlatform is ParsePlatform returning the broken rule instead of an error.
func parsePlatform(s string) (os, arch, variant, rule string) {
	const bad = "is not a platform (want os/arch[/variant], e.g. linux/arm64)"
	parts := strings.Split(s, "/")
	if len(parts) < 2 || len(parts) > 3 {
		return "", "", "", bad
	}
	for _, p := range parts {
		if p == "" || strings.Trim(p, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
			return "", "", "", bad
		}
	}
	parts = append(parts, "")
	return parts[0], parts[1], parts[2], ""
}

// valueError is a value that breaks a rule outside any config key, e.g. an
// image reference given on the command line. It wraps ErrInvalid.
type valueError struct {
	what  string // "image reference"
	value string
	rule  string
}

// Error renders e as `image reference "x" has no tag (...)`.
func (e *valueError) Error() string {
	return fmt.Sprintf("%s %q %s", e.what, e.value, e.rule)
}

// Unwrap returns ErrInvalid.
func (e *valueError) Unwrap() error { return ErrInvalid }
