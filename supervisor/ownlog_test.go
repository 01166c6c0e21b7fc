package supervisor

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLogsOwnFile: Logs with File prints the log a program writes itself
// (Program.OwnLog); a symbolic link there, a directory, or a program
// without one is refused with the reason and what to read instead.
func TestLogsOwnFile(t *testing.T) {
	dir := progDir(t, "p")
	own := filepath.Join(dir, "logs", "gateway.log")
	p := shProgram(t, dir, "p", `mkdir -p "$D/logs"; printf 'one\ntwo\nthree\n' >> "$D/logs/gateway.log"; exec sleep 1000`)
	p.OwnLog = own
	link := shProgram(t, progDir(t, "link"), "link", `exec sleep 1000`)
	link.OwnLog = filepath.Join(dir, "link.log")
	if err := os.Symlink("/etc/shadow", link.OwnLog); err != nil {
		t.Fatal(err)
	}
	isDir := shProgram(t, progDir(t, "dir"), "dir", `exec sleep 1000`)
	isDir.OwnLog = dir
	none := shProgram(t, progDir(t, "none"), "none", `exec sleep 1000`)
	executor := shProgram(t, progDir(t, "executor"), "executor", `exec sleep 1000`)
	sock := filepath.Join(socketDir(t), "hbx.sock")
	runSupervisor(t, Options{Programs: []Program{p, link, isDir, none, executor}, Socket: sock})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, want, wantErr string }{
		{"p", "two\nthree\n", ""},
		{"link", "", "is not a regular file"},
		{"dir", "", "is not a regular file"},
		{"none", "", "program none has no log file of its own (programs.none.log_file is not set): its output is in `hbx logs none` and `hbx logs none --stderr`"},
		{"executor", "", "program executor has no log file of its own (programs.executor.log_file cannot be set): its output is in `hbx logs executor` and `hbx logs executor --stderr`"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			for {
				out.Reset()
				err = c.Logs(ctx, LogsRequest{Name: tc.name, File: true, Lines: 2}, &out)
				if err != nil || out.String() == tc.want || ctx.Err() != nil {
					break
				}
				time.Sleep(20 * time.Millisecond) // the program writes it
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("Logs(%s, file) = %v, want %q", tc.name, err, tc.wantErr)
				}
				return
			}
			if err != nil || out.String() != tc.want {
				t.Errorf("Logs(%s, file) = %q, %v; want %q", tc.name, out.String(), err, tc.want)
			}
		})
	}
}
