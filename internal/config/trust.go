package config

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/hermesbox/hbx/internal/account"
	"github.com/hermesbox/hbx/internal/certsdir"
	"github.com/hermesbox/hbx/internal/pathtrust"
)

// CheckTrust refuses the configuration (ErrInvalid) when a
// path it names, or the directory of the hbx binary, could be replaced or
// rewritten by a user other than root, by pathtrust.Check's rule:
//
//   - root's alone (the caller's user too when hbx does not run as root):
//     executor.runtime_dir, backup.dir, executor.env_file,
//     backup.passphrase_file, health.token_file, executor.token_file,
//     registry.certs_dir, registry.auth_file (also
//     refused when group or others may read it), the config file read and
//     the binary's own directory, each with every ancestor;
//   - registry.certs_dir must be a directory whose *.crt files hold PEM
//     certificates (certsdir.Check); below it, each <host[:port]> entry
//     and each file in it are root's alone too (a planted CA would be
//     trusted), and a client key (*.key) is refused when group or others
//     may read it;
//   - the parents of executor.data_dir (it holds hbx's data lock and the
//     supervisor's state), of executor.state_dir (hbx writes the
//     pidfile in it by path) and of supervisor.socket (and its held
//     file) are root's alone like the runtime directory;
//   - executor.data_dir and executor.state_dir themselves may also be
//     executor.user's; when the payload starts they are made 0700
//     and executor.user's (launch.Prepare). One that another user owns or
//     could write (o+w, even sticky) is refused, not taken over: what
//     that user planted inside (symlinks to its own files, hard links, open
//     descriptors) would outlive a chown of the directory.
//
// An unknown executor.user is left to the command that needs it. hbx
// calls it on every configuration it loads (StrictModes).
func (cfg *Config) CheckTrust(srcs *Sources) error {
	var root pathtrust.Trust
	if uid := os.Geteuid(); uid != 0 {
		root.UIDs = []uint32{uint32(uid)}
		root.GIDs = []uint32{uint32(os.Getegid())}
	}
	payload := root
	if cred, err := account.Lookup(cfg.Executor.User); err == nil && cred != nil {
		payload.UIDs = append(append([]uint32(nil), root.UIDs...), cred.Uid)
	}
	for _, it := range cfg.trustItems(srcs, root, payload) {
		if it.path == "" {
			continue
		}
		if err := pathtrust.Check(it.key, it.path, it.ancestorsOnly, it.trust); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	if err := checkCertsDir(cfg.Registry.CertsDir, root); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	// The registry's credentials (a ghcr.io token) are hbx's alone, as the
	// env file's secrets are: the payload and the agent must not read them.
	if f := cfg.Registry.AuthFile; f != "" {
		if st, err := os.Stat(f); err == nil && st.Mode().Perm()&0o077 != 0 {
			return fmt.Errorf("%w: registry.auth_file %s has mode %04o: it holds registry credentials and must be 0600 or stricter", ErrInvalid, f, st.Mode().Perm())
		}
	}
	return nil
}

// trustItem is one path CheckTrust checks, by pathtrust.Check's rule.
type trustItem struct {
	key, path     string
	ancestorsOnly bool
	trust         pathtrust.Trust
}

// trustItems lists the paths CheckTrust checks: root's alone (root) or
// also executor.user's (payload).
func (cfg *Config) trustItems(srcs *Sources, root, payload pathtrust.Trust) []trustItem {
	items := []trustItem{
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
		items = append(items, trustItem{"the directory holding executor.data_dir's lock and supervisor state", filepath.Dir(filepath.Clean(d)), false, root})
	}
	if d := cfg.Executor.StateDir; d != "" {
		// hbx writes and removes the pidfile in the state directory by
		// path: whoever can write its parent could swap the directory
		// for a symlink between the start and that write.
		items = append(items, trustItem{"the directory holding executor.state_dir", filepath.Dir(filepath.Clean(d)), false, root})
	}
	if sock := cfg.Supervisor.Socket; sock != "" {
		// Whoever can write the socket's directory can serve a fake
		// supervisor there, or plant its held file (issue 25 item 2).
		items = append(items, trustItem{"the directory holding supervisor.socket", filepath.Dir(filepath.Clean(sock)), false, root})
	}
	if f := srcs.File(); f.Read {
		items = append(items, trustItem{"config file", f.Path, false, root})
	}
	if exe, err := os.Executable(); err == nil {
		items = append(items, trustItem{"the hbx binary's directory", filepath.Dir(exe), false, root})
	}
	return items
}

// checkCertsDir applies CheckTrust's rule below registry.certs_dir dir
// ("" means none): each <host[:port]> entry and each file in it, symlinks
// followed, must be root's alone, or another user could plant a CA that
// the registry's TLS is checked against; a client key (*.key) must also
// be 0600 or stricter. Then it refuses a dir that is no directory or a CA
// file in it that holds no certificate (certsdir.Check, the pull's own
// check). The error names the key and the path.
func checkCertsDir(dir string, t pathtrust.Trust) error {
	hosts, err := os.ReadDir(dir)
	if dir == "" || err != nil {
		return certsdir.Check(dir, "")
	}
	for _, h := range hosts {
		hp := filepath.Join(dir, h.Name())
		if err := pathtrust.Check("registry.certs_dir", hp, false, t); err != nil {
			return err
		}
		files, err := os.ReadDir(hp)
		if err != nil {
			continue // not a directory: the image library ignores it
		}
		for _, f := range files {
			fp := filepath.Join(hp, f.Name())
			if err := pathtrust.Check("registry.certs_dir", fp, false, t); err != nil {
				return err
			}
			if st, err := os.Stat(fp); err == nil && filepath.Ext(fp) == ".key" && st.Mode().Perm()&0o077 != 0 {
				return fmt.Errorf("registry.certs_dir %s has mode %04o: it is a client key and must be 0600 or stricter", fp, st.Mode().Perm())
			}
		}
	}
	return certsdir.Check(dir, "")
}
