package config

import (
	"errors"
	"fmt"

	"github.com/hermesbox/hbx/release"
)

// ImageRef is a parsed, pinned image reference: a tag and a sha256 digest
// (release.ImageRef, whose parser this package uses).
type ImageRef = release.ImageRef

// ParseImageRef is release.ParseImageRef with an error that wraps
// ErrInvalid and names s and the rule it breaks.
func ParseImageRef(s string) (ImageRef, error) {
	r, rule := parseImageRef(s)
	if rule != "" {
		return ImageRef{}, &valueError{what: "image reference", value: s, rule: rule}
	}
	return r, nil
}

// parseImageRef is ParseImageRef returning the broken rule instead of an error.
func parseImageRef(s string) (ImageRef, string) {
	r, err := release.ParseImageRef(s)
	return r, ruleOf(err)
}

// ParsePlatform splits an OCI platform "os/arch[/variant]" into its parts
// with release.ParsePlatform. The error wraps ErrInvalid.
func ParsePlatform(s string) (os, arch, variant string, err error) {
	os, arch, variant, rule := parsePlatform(s)
	if rule != "" {
		return "", "", "", &valueError{what: "platform", value: s, rule: rule}
	}
	return os, arch, variant, nil
}

// parsePlatform is ParsePlatform returning the broken rule instead of an error.
func parsePlatform(s string) (os, arch, variant, rule string) {
	p, err := release.ParsePlatform(s)
	return p.OS, p.Architecture, p.Variant, ruleOf(err)
}

// ruleOf is the rule a release.RuleError says is broken, "" for nil.
func ruleOf(err error) string {
	var re *release.RuleError
	if errors.As(err, &re) {
		return re.Rule
	}
	if err != nil {
		return err.Error()
	}
	return ""
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
