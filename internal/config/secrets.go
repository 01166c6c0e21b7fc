package config

import (
	"errors"
	"fmt"
	"os"
	"strconv"
)

// secretKeys are the keys naming files that hold secrets: each must be a
// regular file not readable or writable by group or others.
var secretKeys = []struct {
	key  string
	path func(*Config) string
}{
	{"executor.env_file", func(c *Config) string { return c.Executor.EnvFile }},
	{"backup.passphrase_file", func(c *Config) string { return c.Backup.PassphraseFile }},
	{"health.token_file", func(c *Config) string { return c.Health.TokenFile }},
	{"executor.token_file", func(c *Config) string { return c.Executor.TokenFile }},
}

// CheckSecretFiles checks, without reading them, the files c names that
// hold secrets (executor.env_file, backup.passphrase_file,
// health.token_file, executor.token_file): each that exists must be a regular file (a symlink
// is followed) of mode 0600 or stricter. A missing file is not a problem
// here; the command that reads it reports it. srcs (may be nil) gives each
// Problem its source. The error wraps ErrInvalid and lists every Problem.
func (c *Config) CheckSecretFiles(srcs *Sources) error {
	var probs []*Problem
	for _, s := range secretKeys {
		p := s.path(c)
		if p == "" {
			continue
		}
		prob := &Problem{Key: s.key, Value: strconv.Quote(p), Source: srcs.Of(s.key)}
		st, err := os.Stat(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			prob.Rule = fmt.Sprintf("cannot be checked: %v", errors.Unwrap(err))
		case !st.Mode().IsRegular():
			prob.Rule = "is not a regular file"
		case st.Mode().Perm()&0o077 != 0:
			prob.Rule = fmt.Sprintf("has mode %04o: it holds secrets and must be 0600 or stricter (chmod 600 %s)", st.Mode().Perm(), p)
		default:
			continue
		}
		probs = append(probs, prob)
	}
	return problemsError(probs)
}
