package pending

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/programname"
	"github.com/hermesbox/hbx/supervisor"
)

// runTestSupervisor serves a real supervisor with the programs names
// (each /bin/sleep, not started) on a socket under a temporary
// directory, until the test ends, and returns a client of it.
func runTestSupervisor(t *testing.T, names ...string) *supervisor.Client {
	t.Helper()
	dir, err := os.MkdirTemp("", "hbxbox") // short: a socket path has at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var progs []supervisor.Program
	for _, n := range names {
		progs = append(progs, supervisor.Program{Name: n, Command: []string{"/bin/sleep", "60"}, Directory: dir,
			Stdout: supervisor.LogFile{Path: filepath.Join(dir, n+".out")}, Stderr: supervisor.LogFile{Path: filepath.Join(dir, n+".err")}})
	}
	sock := filepath.Join(dir, "s.sock")
	s, err := supervisor.New(supervisor.Options{Programs: progs, Socket: sock})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := supervisor.Dial(ctx, sock)
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("Dial(%s) = %v after 30s", sock, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStatusAndCheckSupervised: against a real supervisor, Status picks
// the programs asked, in the order asked, and an unknown name gets the
// supervisor's programs and a "did you mean"; CheckSupervised gives the
// same hints and takes "all" when allowed.
func TestStatusAndCheckSupervised(t *testing.T) {
	c := runTestSupervisor(t, "executor", "hermes")
	ctx := t.Context()
	var note bytes.Buffer
	rep, err := Status(ctx, c, nil, []string{"hermes", "executor"}, &note)
	if err != nil || len(rep.Programs) != 2 || rep.Programs[0].Name != "hermes" || rep.Programs[1].Name != "executor" {
		t.Fatalf("Status(hermes, executor) = %+v, %v; want both in the order asked", rep, err)
	}
	if rep.Change != nil || rep.Note != "" {
		t.Errorf("Status(no config) = change %v, note %q; want neither", rep.Change, rep.Note)
	}
	if rep, err := Status(ctx, c, nil, []string{"all"}, nil); err != nil || len(rep.Programs) != 2 {
		t.Errorf("Status(all) = %+v, %v", rep, err)
	}
	want := `no such program: "hermse" (programs: executor, hermes; did you mean "hermes"?)`
	if _, err := Status(ctx, c, nil, []string{"hermse"}, nil); !errors.Is(err, supervisor.ErrUnknownProgram) || !strings.Contains(err.Error(), want) {
		t.Errorf("Status(hermse) = %v, want %q", err, want)
	}
	if err := programname.CheckSupervised(ctx, c, nil, []string{"hermse"}, true); !errors.Is(err, supervisor.ErrUnknownProgram) || !strings.Contains(err.Error(), want) {
		t.Errorf("programname.CheckSupervised(hermse) = %v, want %q", err, want)
	}
	cfg := &config.Config{Programs: map[string]config.Program{"worker": {Enabled: false}}}
	if err := programname.CheckSupervised(ctx, c, cfg, []string{"worker"}, false); err == nil || !strings.Contains(err.Error(), `program "worker" is disabled`) {
		t.Errorf("programname.CheckSupervised(disabled worker) = %v, want it named disabled", err)
	}
	if err := programname.CheckSupervised(ctx, c, nil, []string{"all", "executor"}, true); err != nil {
		t.Errorf("programname.CheckSupervised(all, executor) = %v, want nil", err)
	}
	if err := programname.CheckSupervised(ctx, c, nil, []string{"all"}, false); err == nil {
		t.Error("programname.CheckSupervised(all, not allowed) = nil, want an unknown program")
	}
}
