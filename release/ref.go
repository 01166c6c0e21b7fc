package release

import (
	"errors"
	"fmt"
	"strings"

	digest "github.com/opencontainers/go-digest"
	"go.podman.io/image/v5/docker/reference"
)

// Errors of ParseImageRef and ParsePlatform, wrapped by their *RuleError.
var (
	// ErrBadReference: the image reference lacks an explicit tag or a full
	// sha256 digest, or does not parse.
	ErrBadReference = errors.New("invalid image reference")
	// ErrBadPlatform: the platform is not os/arch[/variant].
	ErrBadPlatform = errors.New("invalid platform")
)

// RuleError is a value that breaks a rule of its grammar. It reads
// `image reference "x" has no tag (want name:tag@sha256:<64 hex>)` and
// wraps ErrBadReference or ErrBadPlatform.
type RuleError struct {
	What  string // "image reference", "platform"
	Value string // as given
	Rule  string // the rule broken, "has no tag (want ...)"
	err   error  // ErrBadReference or ErrBadPlatform
}

// Error renders e as `<What> "<Value>" <Rule>`.
func (e *RuleError) Error() string { return fmt.Sprintf("%s %q %s", e.What, e.Value, e.Rule) }

// Unwrap returns ErrBadReference or ErrBadPlatform.
func (e *RuleError) Unwrap() error { return e.err }

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

// Canonical returns r as the distribution reference type the registry
// client takes (name, tag and digest). r must come from ParseImageRef.
func (r ImageRef) Canonical() reference.Canonical {
	named, err := reference.ParseNormalizedNamed(r.String())
	if err != nil {
		panic(fmt.Sprintf("release: image reference %q did not come from ParseImageRef: %v", r, err))
	}
	return named.(reference.Canonical)
}

// pinnedForm is the shape an image reference must have.
const pinnedForm = "(want name:tag@sha256:<64 hex>)"

// ParseImageRef parses s, which must follow the Docker reference grammar and
// carry both an explicit tag and a sha256 digest of 64 lowercase hex digits,
// e.g. "ghcr.io/o/executor:v1.5.12@sha256:e40b…". The error is a
// *RuleError naming s and the rule it breaks. It is hbx's only image
// reference parser.
func ParseImageRef(s string) (ImageRef, error) { return parseRef(s, true, pinnedForm) }

// taggedForm is the shape ParseTagRef wants.
const taggedForm = "(want name:tag or name:tag@sha256:<64 hex>)"

// ParseTagRef is ParseImageRef with the digest optional: name:tag or
// name:tag@sha256:<64 hex> (Digest "" when none), the reference hbx
// resolve takes. The error is a *RuleError.
func ParseTagRef(s string) (ImageRef, error) { return parseRef(s, false, taggedForm) }

// parseRef parses s, with its digest required when pinned; form is the
// shape named in errors.
func parseRef(s string, pinned bool, form string) (ImageRef, error) {
	fail := func(rule string) (ImageRef, error) {
		return ImageRef{}, &RuleError{What: "image reference", Value: s, Rule: rule, err: ErrBadReference}
	}
	if s == "" {
		return fail("is empty " + form)
	}
	named, err := reference.ParseNormalizedNamed(s)
	if err != nil {
		return fail("is not an image reference: " + err.Error() + " " + form)
	}
	tagged, hasTag := named.(reference.NamedTagged)
	canon, hasDigest := named.(reference.Canonical)
	switch {
	case !hasTag && !hasDigest:
		return fail("has no tag and no digest " + form)
	case !hasTag:
		return fail("has no tag " + form)
	case !hasDigest && pinned:
		return fail("has no digest " + form)
	}
	r := ImageRef{Name: named.Name(), Domain: reference.Domain(named), Path: reference.Path(named), Tag: tagged.Tag()}
	if !hasDigest {
		return r, nil
	}
	d := canon.Digest()
	if d.Algorithm() != digest.SHA256 {
		return fail(fmt.Sprintf("has a %s digest %s", d.Algorithm(), form))
	}
	if err := d.Validate(); err != nil {
		return fail("has an invalid digest: " + err.Error())
	}
	r.Digest = d
	return r, nil
}

// Platform is os/arch[/variant] as image-spec image-index.md "platform".
type Platform struct{ OS, Architecture, Variant string }

// String returns "os/arch" or "os/arch/variant".
func (p Platform) String() string {
	if p.Variant != "" {
		return p.OS + "/" + p.Architecture + "/" + p.Variant
	}
	return p.OS + "/" + p.Architecture
}

// ParsePlatform parses an OCI platform "os/arch[/variant]", e.g.
// "linux/arm64" or "linux/arm/v7". Each part is non-empty and made of
// lowercase letters, digits and underscores. The error is a *RuleError.
// It is hbx's only platform parser.
func ParsePlatform(s string) (Platform, error) {
	parts := strings.Split(s, "/")
	ok := len(parts) >= 2 && len(parts) <= 3
	for _, p := range parts {
		ok = ok && p != "" && strings.Trim(p, "abcdefghijklmnopqrstuvwxyz0123456789_") == ""
	}
	if !ok {
		return Platform{}, &RuleError{What: "platform", Value: s, Rule: "is not a platform (want os/arch[/variant], e.g. linux/arm64)", err: ErrBadPlatform}
	}
	parts = append(parts, "")
	return Platform{OS: parts[0], Architecture: parts[1], Variant: parts[2]}, nil
}
