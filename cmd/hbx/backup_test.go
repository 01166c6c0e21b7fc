package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// backupBox writes a config for a box in a temp directory, with a
// passphrase file of mode passMode (0 for none), and a small data
// directory.
func backupBox(t *testing.T, passMode os.FileMode) (cfg, root string) {
	t.Helper()
	root = t.TempDir()
	data := filepath.Join(root, "data")
	if err := os.MkdirAll(filepath.Join(data, "db"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "db/main.sqlite"), []byte("rows"), 0o600); err != nil {
		t.Fatal(err)
	}
	pass := ""
	if passMode != 0 {
		pass = filepath.Join(root, "pass")
		if err := os.WriteFile(pass, []byte("s3cret passphrase\n"), passMode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(pass, passMode); err != nil {
			t.Fatal(err)
		}
	}
	cfg = writeConfig(t, fmt.Sprintf(`executor:
  data_dir: %s/data
  runtime_dir: %s/runtime
  state_dir: %s/state
supervisor:
  socket: %s/hbx.sock
backup:
  dir: %s/backups
  passphrase_file: %q
`, root, root, root, root, root, pass))
	return cfg, root
}

func TestBackupCommands(t *testing.T) {
	cfg, root := backupBox(t, 0o600)
	out, _, code, err := runTest(t, nil, "backup", "--json", "--config", cfg)
	if code != 0 {
		t.Fatalf("hbx backup = %d, %v", code, err)
	}
	var res struct {
		Event string `json:"event"`
		Path  string `json:"path"`
		Files int    `json:"files"`
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil || res.Event != "result" || res.Files != 1 || !strings.HasSuffix(res.Path, ".tar.gz.gpg") {
		t.Fatalf("hbx backup --json last line = %q (%v), want the result", lines[len(lines)-1], err)
	}
	for _, want := range []string{`"event":"locked"`, `"event":"scanned"`, `"event":"written"`, `"event":"verified"`} {
		if !strings.Contains(out, want) {
			t.Errorf("hbx backup --json output lacks %s:\n%s", want, out)
		}
	}
	out, _, code, _ = runTest(t, nil, "backup", "list", "--config", cfg)
	if code != 0 || !strings.Contains(out, res.Path) || !strings.Contains(out, "sha256:e40b2179") {
		t.Errorf("hbx backup list = %d:\n%s\nwant the archive and the configured image's digest", code, out)
	}
	out, _, code, _ = runTest(t, nil, "backup", "verify", res.Path, "--config", cfg)
	if code != 0 || !strings.HasPrefix(out, "ok: ") {
		t.Errorf("hbx backup verify = %d: %s", code, out)
	}

	// A damaged archive: exit 1 naming what is wrong.
	b, _ := os.ReadFile(res.Path)
	b[len(b)/2] ^= 1
	bad := filepath.Join(root, "bad.tar.gz.gpg")
	os.WriteFile(bad, b, 0o600)
	_, _, code, err = runTest(t, nil, "backup", "verify", bad, "--config", cfg)
	if code != 1 || err == nil || !strings.Contains(err.Error(), "archive is damaged") {
		t.Errorf("hbx backup verify of a damaged archive = %d, %v; want 1, damaged", code, err)
	}

	// Restore without a supervisor, a runtime or a registry (issue 17):
	// the runtime cannot be fetched, the data comes back with nothing
	// started, and the output says what to run next.
	os.WriteFile(filepath.Join(root, "data/db/main.sqlite"), []byte("changed"), 0o600)
	out, _, code, err = runTest(t, nil, "restore", res.Path, "--config", cfg)
	if code != exitNotRunning || !strings.Contains(out, "NOT started") || !strings.Contains(out, "hbx install --from FILE") ||
		err == nil || !strings.Contains(err.Error(), "restored, not started: the data awaits runtime ") {
		t.Errorf("hbx restore without a runtime = %d, %v:\n%s\nwant 3 (done, not running), the data back, NOT started and what to run", code, err, out)
	}
	// hbx status without a supervisor: exit 3, one line naming the
	// awaited image, not just "no supervisor is running".
	_, _, code, err = runTest(t, nil, "status", "--config", cfg)
	if code != exitNotRunning || err == nil || !strings.Contains(err.Error(), "sha256:e40b2179") || strings.Contains(err.Error(), "\n") {
		t.Errorf("hbx status on data awaiting its runtime, no supervisor = %d, %v; want 3 and one line naming the image", code, err)
	}
	if testing.Verbose() {
		t.Logf("hbx status: %v", err)
	}
	// Again with --json: the same exit status after the result line.
	os.WriteFile(filepath.Join(root, "data/db/main.sqlite"), []byte("changed"), 0o600)
	out, _, code, _ = runTest(t, nil, "restore", "--json", res.Path, "--config", cfg)
	if code != exitNotRunning || !strings.Contains(out, `"without_runtime"`) {
		t.Errorf("hbx restore --json without a runtime = %d:\n%s\nwant 3 and the result naming without_runtime", code, out)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "data/db/main.sqlite")); string(got) != "rows" {
		t.Errorf("data after a restore without a runtime = %q, want the archive's", got)
	}
}

func TestBackupRefusals(t *testing.T) {
	noPass, _ := backupBox(t, 0)
	loose, _ := backupBox(t, 0o644)
	plain, root := backupBox(t, 0)
	tests := []struct {
		name     string
		cfg      string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"no passphrase and no terminal", noPass, []string{"backup"}, 1, "no passphrase: set backup.passphrase_file, or run hbx on a terminal"},
		{"passphrase file readable by others", loose, []string{"backup"}, 2, "must be 0600 or stricter"},
		{"unknown subcommand", noPass, []string{"backup", "nope"}, 2, `unknown command "nope" for "hbx backup"`},
		{"verify needs an archive", noPass, []string{"backup", "verify"}, 2, "backup verify: takes one argument, got 0 (usage: hbx backup verify ARCHIVE [flags])"},
		{"verify takes one archive", noPass, []string{"backup", "verify", "a", "b"}, 2, "backup verify: takes one argument, got 2"},
		{"restore needs an archive", noPass, []string{"restore"}, 2, "restore: takes one argument, got 0 (usage: hbx restore ARCHIVE [flags])"},
		{"missing archive", noPass, []string{"backup", "verify", "/nonexistent.tar.gz.gpg"}, 2, "open archive: no such file"},
		{"bad compression", noPass, []string{"backup", "--backup-compression=xz"}, 2, `backup.compression: "xz" is not a compression`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, code, err := runTest(t, nil, append(tt.args, "--config", tt.cfg)...)
			if code != tt.wantCode || err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("hbx %q = %d, %v; want %d containing %q", tt.args, code, err, tt.wantCode, tt.wantErr)
			}
		})
	}
	// --no-encrypt works without a passphrase and says what it wrote.
	out, errOut, code, err := runTest(t, nil, "backup", "--no-encrypt", "--config", plain, "--log-level", "warn")
	if code != 0 || !strings.Contains(out, ".tar.gz\n") || !strings.Contains(out, "NOT encrypted") {
		t.Errorf("hbx backup --no-encrypt = %d, %v:\n%s", code, err, out)
	}
	if !strings.Contains(errOut, "warning: --no-encrypt") {
		t.Errorf("hbx backup --no-encrypt printed no warning; stderr:\n%s", errOut)
	}
	if ents, _ := filepath.Glob(filepath.Join(root, "backups", "*.tar.gz")); len(ents) != 1 {
		t.Errorf("archives after --no-encrypt: %q", ents)
	}
}

// TestBackupListShowsPreUpgrade: hbx backup list shows the pre-upgrade
// archives hbx upgrade and hbx install leave in backup.dir beside
// backup.name's, marked as such, newest first, in text and JSON.
func TestBackupListShowsPreUpgrade(t *testing.T) {
	cfg, root := backupBox(t, 0o600)
	out, _, code, err := runTest(t, nil, "backup", "--json", "--config", cfg)
	if code != 0 {
		t.Fatalf("hbx backup = %d, %v", code, err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var res struct {
		Path string `json:"path"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatal(err)
	}
	// An older pre-upgrade archive, as hbx upgrade names it.
	pre := filepath.Join(root, "backups", "pre-upgrade-20200102T030405Z.tar.gz.gpg")
	b, err := os.ReadFile(res.Path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pre, b, 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, code, _ = runTest(t, nil, "backup", "list", "--config", cfg)
	rows := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(rows) != 3 || !strings.Contains(rows[1], res.Path) || !strings.Contains(rows[2], pre) ||
		!strings.Contains(rows[2], "pre-upgrade") || strings.Contains(rows[1], "pre-upgrade") {
		t.Errorf("hbx backup list = %d:\n%s\nwant the backup, then the pre-upgrade archive marked pre-upgrade", code, out)
	}
	out, _, code, _ = runTest(t, nil, "backup", "list", "--json", "--config", cfg)
	var list []struct {
		Path string `json:"path"`
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list) != 2 ||
		list[0].Path != res.Path || list[0].Kind != "backup" || list[1].Path != pre || list[1].Kind != "pre-upgrade" {
		t.Errorf("hbx backup list --json = %d, %v:\n%s\nwant kind backup then pre-upgrade", code, err, out)
	}
}
