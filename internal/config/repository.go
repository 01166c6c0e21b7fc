package config

import "github.com/hermesbox/hbx/release"

// RepositoryAllowed reports whether this box may run images of the
// repository name (release.ImageRef.Name, "ghcr.io/o/executor-selfhost"):
// executor.image's repository, or a repository that registry.mirrors
// declares to be the same one, in either direction (a location of the
// configured repository's mirrors, or a prefix whose mirrors lead to the
// configured repository: "old=new" lets a box pinned to new restore an
// archive of old, and one pinned to old restore an archive of new). It is
// the one answer to "may this repository's release run here" that a
// restore asks of an archive's release (backup.RestoreOptions.AllowedRepository).
func (c *Config) RepositoryAllowed(name string) bool {
	ref, rule := parseImageRef(c.Executor.Image)
	if rule != "" || name == "" {
		return false
	}
	mirrors := c.RegistryMirrors()
	for _, loc := range release.Locations(ref.Name, mirrors) {
		if loc == name {
			return true
		}
	}
	for _, loc := range release.Locations(name, mirrors) {
		if loc == ref.Name {
			return true
		}
	}
	return false
}

// RegistryMirrors returns registry.mirrors parsed, in their configured
// order; an entry that does not parse (Load refuses those) is left out.
func (c *Config) RegistryMirrors() []release.Mirror {
	var out []release.Mirror
	for _, s := range c.Registry.Mirrors {
		if m, err := release.ParseMirror(s); err == nil {
			out = append(out, m)
		}
	}
	return out
}
