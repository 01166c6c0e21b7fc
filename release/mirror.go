package release

import (
	"errors"
	"strings"

	"go.podman.io/image/v5/docker/reference"
)

// ErrBadMirror: a registry.mirrors entry is not PREFIX=LOCATION.
var ErrBadMirror = errors.New("invalid mirror")

// mirrorForm is what a registry.mirrors entry looks like.
const mirrorForm = "(want PREFIX=LOCATION, each a fully qualified repository or registry/namespace without tag or digest, e.g. ghcr.io/rhyssullivan/executor-selfhost=ghcr.io/usefulsoftwareco/executor-selfhost)"

// Mirror is one other location of the repositories under Prefix
// (registry.mirrors, as a [[registry.mirror]] of containers'
// registries.conf): an image whose name is Prefix, or starts with Prefix
// and "/", may also be fetched from Location with the rest of its name
// appended. Images are always pulled by digest here, so every mirror is
// "mirror-by-digest-only".
type Mirror struct {
	Prefix, Location string
}

// ParseMirror parses "PREFIX=LOCATION"; the error is a *RuleError
// wrapping ErrBadMirror that names s and the rule.
func ParseMirror(s string) (Mirror, error) {
	prefix, loc, ok := strings.Cut(s, "=")
	if !ok || !isRepoPrefix(prefix) || !isRepoPrefix(loc) {
		return Mirror{}, &RuleError{What: "registry mirror", Value: s, Rule: "is not PREFIX=LOCATION " + mirrorForm, err: ErrBadMirror}
	}
	if prefix == loc {
		return Mirror{}, &RuleError{What: "registry mirror", Value: s, Rule: "names the same location twice " + mirrorForm, err: ErrBadMirror}
	}
	return Mirror{Prefix: prefix, Location: loc}, nil
}

// isRepoPrefix reports whether s is a fully qualified repository or
// registry/namespace prefix as the reference grammar writes it (a domain
// with a dot, a port or "localhost", then path components), with no tag
// or digest, written in its normalized form.
func isRepoPrefix(s string) bool {
	if !strings.Contains(s, "/") {
		return false
	}
	n, err := reference.ParseNormalizedNamed(s)
	if err != nil || n.Name() != s {
		return false
	}
	_, tagged := n.(reference.Tagged)
	_, digested := n.(reference.Digested)
	return !tagged && !digested
}

// Locations returns the repository names to fetch name (a normalized
// repository name, ImageRef.Name) from, in the order to try them, as
// registries.conf orders them: the locations of the mirrors whose prefix
// is the longest that matches name (in their configured order), then
// name itself. Without a matching mirror it is name alone.
func Locations(name string, mirrors []Mirror) []string {
	best := -1
	for _, m := range mirrors {
		if matchesPrefix(name, m.Prefix) && len(m.Prefix) > best {
			best = len(m.Prefix)
		}
	}
	var out []string
	for _, m := range mirrors {
		if len(m.Prefix) == best && matchesPrefix(name, m.Prefix) {
			loc := m.Location + strings.TrimPrefix(name, m.Prefix)
			if loc != name && !contains(out, loc) {
				out = append(out, loc)
			}
		}
	}
	return append(out, name)
}

// matchesPrefix: name is prefix, or below it at a path boundary.
func matchesPrefix(name, prefix string) bool {
	return name == prefix || strings.HasPrefix(name, prefix+"/")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
