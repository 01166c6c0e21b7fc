package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestNamedFIFOsNeverBlock: every file an operator names (the config, the
// env, token and passphrase files, an archive) may be a FIFO by mistake;
// hbx refuses it at once, naming it, instead of blocking in open(2)
// where no signal reaches a clean exit.
func TestNamedFIFOsNeverBlock(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("executor:\n  image: %s\n  runtime_dir: %s\n  data_dir: %s\n  state_dir: %s\nbackup:\n  dir: %s\n",
		testImage, filepath.Join(dir, "rt"), filepath.Join(dir, "data"), filepath.Join(dir, "state"), filepath.Join(dir, "backups"))
	tests := []struct {
		name     string
		config   string // "" means the config file is the FIFO
		args     []string
		wantCode int
	}{
		{"config file", "", []string{"config", "show"}, 2},
		{"env file", base + "  passphrase_file: \"\"\n", []string{"run", "executor"}, 2},
		{"passphrase file", base + "  passphrase_file: " + fifo + "\n", []string{"config", "show"}, 2},
		{"archive", base, []string{"backup", "verify", fifo}, 2},
		{"token file", base + "health:\n  token_file: " + fifo + "\n", []string{"config", "show"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := fifo
			if tt.config != "" {
				body := tt.config
				if tt.name == "env file" {
					body = strings.Replace(body, "  state_dir:", "  env_file: "+fifo+"\n  state_dir:", 1)
				}
				cfg = writeConfig(t, body)
			}
			type res struct {
				out  string
				code int
				err  error
			}
			done := make(chan res, 1)
			go func() {
				stdout, stderr, code, err := runTest(t, []string{"PATH=/bin"}, append([]string{"--config", cfg}, tt.args...)...)
				done <- res{fmt.Sprint(err) + "\n" + stdout + stderr, code, err}
			}()
			select {
			case r := <-done:
				if r.code == 0 || !strings.Contains(r.out, fifo) || !strings.Contains(r.out, "not a regular file") {
					t.Errorf("hbx %s with %s a FIFO = %s (exit %d), want an error naming %s as a FIFO", strings.Join(tt.args, " "), tt.name, r.out, r.code, fifo)
				}
				if r.code != tt.wantCode {
					t.Errorf("hbx %s with %s a FIFO exit %d, want %d (%v)", strings.Join(tt.args, " "), tt.name, r.code, tt.wantCode, r.err)
				}
			case <-time.After(20 * time.Second):
				// Unblock the stuck open so the test binary can end.
				if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
					f.Close()
				}
				t.Fatalf("hbx %s with %s a FIFO still blocked after 20s", strings.Join(tt.args, " "), tt.name)
			}
		})
	}
}
