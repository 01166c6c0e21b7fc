package main

import (
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/internal/account"
	"github.com/hermesbox/hbx/internal/registrytest"
	"github.com/hermesbox/hbx/internal/testenv"
)

// TestCheckTrust: every command that loads the configuration refuses
// (exit 2, one line naming the path, its owner and mode) a runtime,
// backup, data or state directory, a secret or config file, when the
// path or an ancestor can be written by a user other than root (or, for
// the data and state directories' ancestors, executor.user).
func TestCheckTrust(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to chown")
	}
	const nobody = 65534
	mk := func(t *testing.T, p string, mode os.FileMode, uid int) {
		t.Helper()
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name   string
		setup  func(t *testing.T, sec string) map[string]string // config keys it sets
		wantIn string                                           // "" means accepted
	}{
		{"all root's", func(t *testing.T, sec string) map[string]string { return nil }, ""},
		{"runtime dir's parent is another user's", func(t *testing.T, sec string) map[string]string {
			mk(t, sec+"/storage", 0o755, nobody)
			return map[string]string{"executor.runtime_dir": sec + "/storage/executor-runtime"}
		}, "executor.runtime_dir " + "SEC/storage/executor-runtime: its ancestor SEC/storage is owned by nobody:nogroup with mode 0755"},
		{"runtime dir not created yet below another user's", func(t *testing.T, sec string) map[string]string {
			mk(t, sec+"/storage", 0o755, nobody)
			return map[string]string{"executor.runtime_dir": sec + "/storage/a/b"}
		}, "its ancestor SEC/storage is owned by nobody"},
		{"backup dir world-writable", func(t *testing.T, sec string) map[string]string {
			mk(t, sec+"/backups", 0o777, 0)
			return map[string]string{"backup.dir": sec + "/backups"}
		}, "backup.dir SEC/backups: SEC/backups is owned by root:root with mode 0777, writable by others"},
		{"backup dir executor.user's", func(t *testing.T, sec string) map[string]string {
			mk(t, sec+"/backups", 0o700, nobody)
			return map[string]string{"executor.user": "nobody", "backup.dir": sec + "/backups"}
		}, "backup.dir SEC/backups: SEC/backups is owned by nobody"},
		{"env file another user's", func(t *testing.T, sec string) map[string]string {
			os.WriteFile(sec+"/env", []byte("A=1\n"), 0o600)
			os.Chown(sec+"/env", nobody, nobody)
			return map[string]string{"executor.env_file": sec + "/env"}
		}, "executor.env_file SEC/env: SEC/env is owned by nobody"},
		{"token file in a group-writable dir", func(t *testing.T, sec string) map[string]string {
			mk(t, sec+"/keys", 0o770, nobody)
			os.Chown(sec+"/keys", 0, nobody)
			os.WriteFile(sec+"/keys/token", []byte("k\n"), 0o600)
			return map[string]string{"health.token_file": sec + "/keys/token"}
		}, "health.token_file SEC/keys/token: its ancestor SEC/keys is owned by root:nogroup with mode 0770, writable by a group other than root's"},
		{"passphrase file the agent's", func(t *testing.T, sec string) map[string]string {
			os.WriteFile(sec+"/pass", []byte("p\n"), 0o600)
			os.Chown(sec+"/pass", nobody, nobody)
			return map[string]string{"backup.passphrase_file": sec + "/pass"}
		}, "backup.passphrase_file SEC/pass"},
		{"registry auth file another user's", func(t *testing.T, sec string) map[string]string {
			os.WriteFile(sec+"/auth.json", []byte("{}\n"), 0o600)
			os.Chown(sec+"/auth.json", nobody, nobody)
			return map[string]string{"registry.auth_file": sec + "/auth.json"}
		}, "registry.auth_file SEC/auth.json: SEC/auth.json is owned by nobody"},
		{"registry auth file readable by others", func(t *testing.T, sec string) map[string]string {
			os.WriteFile(sec+"/auth.json", []byte("{}\n"), 0o644)
			os.Chmod(sec+"/auth.json", 0o644)
			return map[string]string{"registry.auth_file": sec + "/auth.json"}
		}, "registry.auth_file SEC/auth.json has mode 0644: it holds registry credentials and must be 0600 or stricter"},
		{"registry auth file root's 0600", func(t *testing.T, sec string) map[string]string {
			os.WriteFile(sec+"/auth.json", []byte("{}\n"), 0o600)
			return map[string]string{"registry.auth_file": sec + "/auth.json"}
		}, ""},
		{"registry certs dir: a host's directory another user's", func(t *testing.T, sec string) map[string]string {
			mk(t, sec+"/certs.d", 0o755, 0)
			mk(t, sec+"/certs.d/registry.box:5000", 0o755, nobody)
			return map[string]string{"registry.certs_dir": sec + "/certs.d"}
		}, "registry.certs_dir SEC/certs.d/registry.box:5000: SEC/certs.d/registry.box:5000 is owned by nobody"},
		{"registry certs dir: a CA file another user's", func(t *testing.T, sec string) map[string]string {
			mk(t, sec+"/certs.d/registry.box", 0o755, 0)
			os.WriteFile(sec+"/certs.d/registry.box/ca.crt", []byte("x\n"), 0o644)
			os.Chown(sec+"/certs.d/registry.box/ca.crt", nobody, nobody)
			return map[string]string{"registry.certs_dir": sec + "/certs.d"}
		}, "registry.certs_dir SEC/certs.d/registry.box/ca.crt: SEC/certs.d/registry.box/ca.crt is owned by nobody"},
		{"registry certs dir: a host entry linked to another user's directory", func(t *testing.T, sec string) map[string]string {
			mk(t, sec+"/certs.d", 0o755, 0)
			mk(t, sec+"/agent", 0o755, nobody)
			os.Symlink(sec+"/agent", sec+"/certs.d/registry.box")
			return map[string]string{"registry.certs_dir": sec + "/certs.d"}
		}, "registry.certs_dir SEC/certs.d/registry.box: SEC/agent is owned by nobody"},
		{"registry certs dir: a client key readable by others", func(t *testing.T, sec string) map[string]string {
			mk(t, sec+"/certs.d/registry.box", 0o755, 0)
			os.WriteFile(sec+"/certs.d/registry.box/client.key", []byte("x\n"), 0o644)
			os.Chmod(sec+"/certs.d/registry.box/client.key", 0o644)
			return map[string]string{"registry.certs_dir": sec + "/certs.d"}
		}, "registry.certs_dir SEC/certs.d/registry.box/client.key has mode 0644: it is a client key and must be 0600 or stricter"},
		{"registry certs dir root's", func(t *testing.T, sec string) map[string]string {
			mk(t, sec+"/certs.d/registry.box", 0o755, 0)
			tls, err := registrytest.WriteTLS(t.TempDir(), "registry.box")
			if err != nil {
				t.Fatal(err)
			}
			ca, err := os.ReadFile(tls.CA)
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(sec+"/certs.d/registry.box/ca.crt", ca, 0o644)
			os.WriteFile(sec+"/certs.d/registry.box/client.key", []byte("x\n"), 0o600)
			return map[string]string{"registry.certs_dir": sec + "/certs.d"}
		}, ""},
		// Found at load, by every command, not only by the pull.
		{"registry certs dir missing", func(t *testing.T, sec string) map[string]string {
			return map[string]string{"registry.certs_dir": sec + "/certs.d"}
		}, "bad registry.certs_dir: stat SEC/certs.d: no such file or directory"},
		{"registry certs dir a file", func(t *testing.T, sec string) map[string]string {
			os.WriteFile(sec+"/certs.d", nil, 0o644)
			return map[string]string{"registry.certs_dir": sec + "/certs.d"}
		}, "bad registry.certs_dir: SEC/certs.d is not a directory"},
		{"registry certs dir: a CA file without a certificate", func(t *testing.T, sec string) map[string]string {
			mk(t, sec+"/certs.d/registry.box", 0o755, 0)
			os.WriteFile(sec+"/certs.d/registry.box/ca.crt", []byte("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"), 0o644)
			return map[string]string{"registry.certs_dir": sec + "/certs.d"}
		}, "bad registry.certs_dir: SEC/certs.d/registry.box/ca.crt holds no PEM certificate"},
		{"data dir's parent another user's", func(t *testing.T, sec string) map[string]string {
			mk(t, sec+"/workspace", 0o755, nobody)
			return map[string]string{"executor.data_dir": sec + "/workspace/data"}
		}, "executor.data_dir SEC/workspace/data: its ancestor SEC/workspace is owned by nobody"},
		{"data dir's parent executor.user's: it holds hbx's data lock and supervisor state", func(t *testing.T, sec string) map[string]string {
			mk(t, sec+"/workspace", 0o755, nobody)
			return map[string]string{"executor.user": "nobody", "executor.data_dir": sec + "/workspace/data", "executor.state_dir": sec + "/workspace/state"}
		}, "the directory holding executor.data_dir's lock and supervisor state SEC/workspace: SEC/workspace is owned by nobody"},
		{"data dir's grandparent executor.user's", func(t *testing.T, sec string) map[string]string {
			mk(t, sec+"/srv", 0o755, nobody)
			mk(t, sec+"/srv/executor", 0o755, 0)
			return map[string]string{"executor.user": "nobody", "executor.data_dir": sec + "/srv/executor/data"}
		}, "its ancestor SEC/srv is owned by nobody"},
		{"state dir's parent executor.user's: hbx writes the pidfile there by path", func(t *testing.T, sec string) map[string]string {
			mk(t, sec+"/home", 0o755, nobody)
			return map[string]string{"executor.user": "nobody", "executor.state_dir": sec + "/home/state"}
		}, "the directory holding executor.state_dir SEC/home: SEC/home is owned by nobody"},
		{"data dir itself 0755 root's (a named volume): made private at start", func(t *testing.T, sec string) map[string]string {
			mk(t, sec+"/data", 0o755, 0)
			return map[string]string{"executor.data_dir": sec + "/data"}
		}, ""},
		{"data dir itself another user's (a volume the agent's uid owned)", func(t *testing.T, sec string) map[string]string {
			mk(t, sec+"/data", 0o700, nobody)
			return map[string]string{"executor.data_dir": sec + "/data"}
		}, "executor.data_dir SEC/data: SEC/data is owned by nobody:nogroup with mode 0700"},
		{"state dir itself world-writable", func(t *testing.T, sec string) map[string]string {
			mk(t, sec+"/state", 0o777, 0)
			return map[string]string{"executor.state_dir": sec + "/state"}
		}, "executor.state_dir SEC/state: SEC/state is owned by root:root with mode 0777, writable by others"},
		{"state dir itself sticky and world-writable", func(t *testing.T, sec string) map[string]string {
			mk(t, sec+"/state", os.ModeSticky|0o777, 0)
			return map[string]string{"executor.state_dir": sec + "/state"}
		}, "executor.state_dir SEC/state: SEC/state is owned by root:root with mode 1777"},
		{"data and state dirs executor.user's", func(t *testing.T, sec string) map[string]string {
			mk(t, sec+"/data", 0o700, nobody)
			mk(t, sec+"/state", 0o755, nobody)
			return map[string]string{"executor.user": "nobody", "executor.data_dir": sec + "/data", "executor.state_dir": sec + "/state"}
		}, ""},
		{"backup dir in a directory of executor.user", func(t *testing.T, sec string) map[string]string {
			mk(t, sec+"/home", 0o700, nobody)
			return map[string]string{"executor.user": "nobody", "backup.dir": sec + "/home/backups"}
		}, "backup.dir SEC/home/backups: its ancestor SEC/home is owned by nobody"},
		{"env file inside the payload's state dir", func(t *testing.T, sec string) map[string]string {
			mk(t, sec+"/state", 0o700, nobody)
			os.WriteFile(sec+"/state/env", []byte("A=1\n"), 0o600)
			return map[string]string{"executor.user": "nobody", "executor.state_dir": sec + "/state", "executor.env_file": sec + "/state/env"}
		}, "executor.env_file SEC/state/env: its ancestor SEC/state is owned by nobody"},
		{"socket inside the payload's state dir: it could serve a fake supervisor there", func(t *testing.T, sec string) map[string]string {
			mk(t, sec+"/state", 0o700, nobody)
			return map[string]string{"executor.user": "nobody", "executor.state_dir": sec + "/state", "supervisor.socket": sec + "/state/hbx.sock"}
		}, "the directory holding supervisor.socket SEC/state: SEC/state is owned by nobody"},
		{"socket in a world-writable directory", func(t *testing.T, sec string) map[string]string {
			mk(t, sec+"/run", 0o777, 0)
			return map[string]string{"supervisor.socket": sec + "/run/hbx/hbx.sock"}
		}, "the directory holding supervisor.socket SEC/run/hbx: its ancestor SEC/run is owned by root:root with mode 0777"},
		{"state dir's parent world-writable", func(t *testing.T, sec string) map[string]string {
			mk(t, sec+"/var", 0o777, 0)
			return map[string]string{"executor.state_dir": sec + "/var/hbx"}
		}, "executor.state_dir SEC/var/hbx: its ancestor SEC/var is owned by root:root with mode 0777"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sec := t.TempDir()
			keys := map[string]string{
				"executor.runtime_dir": sec + "/runtime", "executor.data_dir": sec + "/d", "executor.state_dir": sec + "/s",
				"backup.dir": sec + "/b", "supervisor.socket": sec + "/hbx.sock",
				"executor.user": account.Current(), // not the default: it would create the user executor here
			}
			maps.Copy(keys, c.setup(t, sec))
			sections := map[string][]string{}
			for k, v := range keys {
				sec, key, _ := strings.Cut(k, ".")
				sections[sec] = append(sections[sec], "  "+key+": "+strconv.Quote(v))
			}
			var extra string
			for sec, lines := range sections {
				extra += sec + ":\n" + strings.Join(lines, "\n") + "\n"
			}
			var env []string
			cfgDir := filepath.Join(sec, "etc")
			mk(t, cfgDir, 0o755, 0)
			cfgFile := filepath.Join(cfgDir, "hbx.yaml")
			if err := os.WriteFile(cfgFile, []byte(extra), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{{"config", "show"}, {"run", "executor"}, {"backup"}, {"install"}} {
				_, _, code, err := runTest(t, env, append(args, "--config", cfgFile)...)
				if c.wantIn == "" {
					if err != nil && (strings.Contains(err.Error(), "untrusted") || strings.Contains(err.Error(), "registry.certs_dir")) {
						t.Errorf("hbx %s = %v; want the paths accepted", strings.Join(args, " "), err)
					}
					continue
				}
				want := strings.ReplaceAll(c.wantIn, "SEC", sec)
				if code != 2 || err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("hbx %s = %d, %v; want exit 2 naming %q", strings.Join(args, " "), code, err, want)
				}
			}
		})
	}
	// The config file itself: in a directory another user can write.
	sec := t.TempDir()
	mk(t, sec+"/etc", 0o777, 0)
	cfgFile := sec + "/etc/hbx.yaml"
	os.WriteFile(cfgFile, nil, 0o600)
	_, _, code, err := runTest(t, []string{"HBX_EXECUTOR_RUNTIME_DIR=" + sec + "/r"}, "config", "show", "--config", cfgFile)
	if want := "config file " + cfgFile + ": its ancestor " + sec + "/etc is owned by root:root with mode 0777"; code != 2 || err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("config file in a 0777 dir: %d, %v; want exit 2 naming %q", code, err, want)
	}
}
