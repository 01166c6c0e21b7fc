package config

// RepositoryAllowed reports whether this box may run images of the
// repository name (release.ImageRef.Name, "ghcr.io/o/executor-selfhost"):
// executor.image's repository. It is the one answer to "may this
// repository's release run here" that a restore asks of an archive's
// release (backup.RestoreOptions.AllowedRepository); registry mirrors of
// that repository belong here too.
func (c *Config) RepositoryAllowed(name string) bool {
	ref, rule := parseImageRef(c.Executor.Image)
	return rule == "" && name != "" && ref.Name == name
}
