package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/hermesbox/hbx/internal/account"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/pathtrust"
)

// checkTrust refuses the configuration (config.ErrInvalid, exit 2) when a
// path it names, or the directory of the hbx binary, could be replaced or
// rewritten by a user other than root, by pathtrust.Check's rule:
//
//   - root's alone (the caller's user too when hbx does not run as root):
//     executor.runtime_dir, backup.dir, executor.env_file,
//     backup.passphrase_file, health.token_file, executor.token_file,
//     registry.certs_dir, registry.auth_file (also
//     refused when group or others may read it), the config file read and
//     the binary's own directory, each with every ancestor;
//   - the parents of executor.data_dir (it holds hbx's data lock and the
//     supervisor's state) and of executor.state_dir (hbx writes the
//     pidfile in it by path) are root's alone like the runtime directory;
//   - executor.data_dir and executor.state_dir themselves may also be
//     executor.user's; when the payload starts they are made 0700
//     and executor.user's (launch.Prepare). One that another user owns or
//     could write (o+w, even sticky) is refused, not taken over: what
//     that user planted inside (symlinks to its own files, hard links, open
//     descriptors) would outlive a chown of the directory.
//
// An unknown executor.user is left to the command that needs it.
func checkTrust(cfg *config.Config, srcs *config.Sources) error {
	var root pathtrust.Trust
	if uid := os.Geteuid(); uid != 0 {
		root.UIDs = []uint32{uint32(uid)}
		root.GIDs = []uint32{uint32(os.Getegid())}
	}
	payload := root
	if cred, err := account.Lookup(cfg.Executor.User); err == nil && cred != nil {
		payload.UIDs = append(append([]uint32(nil), root.UIDs...), cred.Uid)
	}
	type item struct {
		key, path     string
		ancestorsOnly bool
		trust         pathtrust.Trust
	}
	items := []item{
		{"executor.runtime_dir", cfg.Executor.RuntimeDir, false, root},
		{"backup.dir", cfg.Backup.Dir, false, root},
		{"executor.env_file", cfg.Executor.EnvFile, false, root},
		{"backup.passphrase_file", cfg.Backup.PassphraseFile, false, root},
		{"health.token_file", cfg.Health.TokenFile, false, root},
		{"executor.token_file", cfg.Executor.TokenFile, false, root},
		{"registry.certs_dir", cfg.Registry.CertsDir, false, root},
		{"registry.auth_file", cfg.Registry.AuthFile, false, root},
		{"executor.data_dir", cfg.Executor.DataDir, false, payload},
		{"executor.state_dir", cfg.Executor.StateDir, false, payload},
	}
	if d := cfg.Executor.DataDir; d != "" {
		// Beside the data directory are hbx's own: the data lock
		// (internal/datalock) and the supervisor's state (its lock,
		// markers and process-group records), which root opens, writes
		// and acts on. Whoever can write there can plant symlinks or a
		// whole directory for them.
		items = append(items, item{"the directory holding executor.data_dir's lock and supervisor state", filepath.Dir(filepath.Clean(d)), false, root})
	}
	if d := cfg.Executor.StateDir; d != "" {
		// hbx writes and removes the pidfile in the state directory by
		// path: whoever can write its parent could swap the directory
		// for a symlink between the start and that write.
		items = append(items, item{"the directory holding executor.state_dir", filepath.Dir(filepath.Clean(d)), false, root})
	}
	if f := srcs.File(); f.Read {
		items = append(items, item{"config file", f.Path, false, root})
	}
	if exe, err := os.Executable(); err == nil {
		items = append(items, item{"the hbx binary's directory", filepath.Dir(exe), false, root})
	}
	for _, it := range items {
		if it.path == "" {
			continue
		}
		if err := pathtrust.Check(it.key, it.path, it.ancestorsOnly, it.trust); err != nil {
			return fmt.Errorf("%w: %w", config.ErrInvalid, err)
		}
	}
	// The registry's credentials (a ghcr.io token) are hbx's alone, as the
	// env file's secrets are: the payload and the agent must not read them.
	if f := cfg.Registry.AuthFile; f != "" {
		if st, err := os.Stat(f); err == nil && st.Mode().Perm()&0o077 != 0 {
			return fmt.Errorf("%w: registry.auth_file %s has mode %04o: it holds registry credentials and must be 0600 or stricter", config.ErrInvalid, f, st.Mode().Perm())
		}
	}
	return nil
}
