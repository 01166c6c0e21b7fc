package adapters

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"

	"github.com/hermesbox/hbx/backup"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/release"
	"github.com/hermesbox/hbx/supervisor"
	"github.com/hermesbox/hbx/upgrade"
)

// stubSupervised is a Supervised that records what a change asked of it.
type stubSupervised struct {
	probe  supervisor.Probe
	probes []supervisor.Probe // what SetProbe was given, in order
	wait   error              // what WaitHealthy returns
}

func (s *stubSupervised) Hold(context.Context) (backup.Hold, error)   { return nil, nil }
func (s *stubSupervised) WaitHealthy(context.Context) error           { return s.wait }
func (s *stubSupervised) WaitRunning(context.Context, []string) error { return nil }
func (s *stubSupervised) Gone() <-chan struct{}                       { return nil }
func (s *stubSupervised) Close()                                      {}
func (s *stubSupervised) SetProbe(p supervisor.Probe) supervisor.Probe {
	old := s.probe
	s.probe, s.probes = p, append(s.probes, p)
	return old
}

// testBox is a box on a temp directory whose hooks record their calls in
// calls.
func testBox(t *testing.T, svc Supervised, calls *[]string) Box {
	dir := t.TempDir()
	cfg := config.Defaults()
	cfg.Executor.RuntimeDir, cfg.Executor.DataDir = dir+"/runtime", dir+"/data"
	return Box{Config: &cfg, Log: slog.New(slog.DiscardHandler), Hooks: Hooks{
		Dial: func(context.Context, *config.Config) (Supervised, error) {
			*calls = append(*calls, "dial")
			return svc, nil
		},
		LockUnsupervised: func(_ context.Context, _ *config.Config, command string) (func(), error) {
			*calls = append(*calls, "lock "+command)
			return func() { *calls = append(*calls, "unlock") }, nil
		},
		RecoverRestore: func(_ context.Context, _ *config.Config, _ *config.Sources, s Supervised) error {
			*calls = append(*calls, "recover-restore")
			return nil
		},
	}}
}

// TestChangeOptions: without a supervisor a change takes the data lock as
// its command and undoes an interrupted restore first; with one it holds
// the programs through it and takes no lock; a failed restore recovery
// gives the lock back, and unlock is never nil.
func TestChangeOptions(t *testing.T) {
	var calls []string
	b := testBox(t, nil, &calls)
	opts, unlock, err := b.ChangeOptions(t.Context(), nil, "hbx rollback", nil)
	if err != nil || opts.Services != nil || opts.Runtime == nil || opts.Data == nil {
		t.Fatalf("ChangeOptions without a supervisor = %+v, %v", opts, err)
	}
	unlock()
	if want := []string{"dial", "lock hbx rollback", "recover-restore", "unlock"}; !slices.Equal(calls, want) {
		t.Errorf("calls = %q, want %q", calls, want)
	}

	calls = nil
	b = testBox(t, &stubSupervised{}, &calls)
	opts, unlock, err = b.ChangeOptions(t.Context(), nil, "hbx upgrade", nil)
	if err != nil || opts.Services == nil {
		t.Fatalf("ChangeOptions with a supervisor = %+v, %v; want its services", opts, err)
	}
	unlock()
	if want := []string{"dial", "recover-restore"}; !slices.Equal(calls, want) {
		t.Errorf("calls = %q, want %q", calls, want)
	}

	calls = nil
	b = testBox(t, nil, &calls)
	failed := errors.New("restore journal unreadable")
	b.RecoverRestore = func(context.Context, *config.Config, *config.Sources, Supervised) error { return failed }
	_, unlock, err = b.ChangeOptions(t.Context(), nil, "hbx upgrade", nil)
	if !errors.Is(err, failed) || unlock == nil {
		t.Fatalf("ChangeOptions with a failed restore recovery = %v (unlock nil: %t)", err, unlock == nil)
	}
	unlock()
	if want := []string{"dial", "lock hbx upgrade", "unlock"}; !slices.Equal(calls, want) {
		t.Errorf("calls = %q, want %q (the lock given back once)", calls, want)
	}
}

// TestServicesWaitHealthyRestoresProbe: the wait after a change judges
// the pinned release's readiness, then gives the supervisor's services
// their own probe back, also when the wait fails.
func TestServicesWaitHealthyRestoresProbe(t *testing.T) {
	var calls []string
	own := supervisor.ProbeFunc(func(context.Context) error { return nil })
	svc := &stubSupervised{probe: own, wait: errors.New("executor is FATAL")}
	b := testBox(t, svc, &calls)
	s := &changeServices{svc: svc, box: b}
	if err := s.WaitHealthy(t.Context(), upgrade.Release{Target: release.Target{Image: b.Config.Executor.Image}}); err == nil || err.Error() != "executor is FATAL" {
		t.Fatalf("WaitHealthy = %v, want the supervisor's wait error", err)
	}
	if len(svc.probes) != 2 || svc.probes[1] == nil {
		t.Fatalf("SetProbe calls = %d, want 2 (the pinned probe, then the own one back)", len(svc.probes))
	}
	if err := svc.probe.Check(t.Context()); err != nil {
		t.Errorf("the probe left in place fails (%v): not the services' own", err)
	}
}
