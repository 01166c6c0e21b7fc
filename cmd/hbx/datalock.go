package main

import (
	"context"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/datalock"
)

// lockData takes the data directory's lock (internal/datalock) for
// command. With stopLeftovers, processes that a dead owner left holding it
// (a supervisor or hbx run executor killed with SIGKILL) get the executor
// program's stopsignal, then SIGKILL after its stopwaitsecs, and each is
// logged; without, they are named in the error.
func lockData(ctx context.Context, g *globals, cfg *config.Config, command string, stopLeftovers bool) (*datalock.Lock, error) {
	pc := cfg.Programs[config.ExecutorProgram]
	l, err := datalock.Acquire(ctx, cfg.Executor.DataDir, datalock.Options{
		Command:       command,
		StopLeftovers: stopLeftovers,
		StopSignal:    unix.SignalNum("SIG" + strings.TrimPrefix(strings.ToUpper(pc.StopSignal), "SIG")),
		StopWait:      time.Duration(pc.StopWaitSecs) * time.Second,
	})
	if err != nil {
		return nil, err
	}
	for _, p := range l.Stopped {
		g.log.Warn("stopped a process left running on the data directory by an owner that is gone",
			"pid", p.PID, "command", p.Command, "lock", l.Path(), "sigkill_after_stopwaitsecs", l.Killed)
	}
	return l, nil
}

// lockDataUnsupervised takes the data lock for command when no supervisor
// answers (svc is nil), so that nothing starts the payload while command
// changes or reads the data, and refuses when something runs it (hbx run
// executor, a supervisor on another socket). With a supervisor, its hold
// keeps the programs stopped and it keeps the lock. release is never nil.
func lockDataUnsupervised(ctx context.Context, g *globals, cfg *config.Config, svc *supervisorServices, command string) (release func(), err error) {
	if svc != nil {
		return func() {}, nil
	}
	l, err := lockData(ctx, g, cfg, command, false)
	if err != nil {
		return func() {}, err
	}
	return func() {
		if err := l.Release(); err != nil {
			g.log.Warn("release the data lock", "err", err)
		}
	}, nil
}

// supervisorStateDir is the supervisor's own state (its lock, one marker
// file per program) for cfg: beside the data directory, like its lock, so
// there is one per box whatever the socket: /workspace/executor/data ->
// /workspace/executor/.data.supervisor.
func supervisorStateDir(cfg *config.Config) string {
	d := filepath.Clean(cfg.Executor.DataDir)
	return filepath.Join(filepath.Dir(d), "."+filepath.Base(d)+".supervisor")
}
