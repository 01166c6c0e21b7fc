package pending

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/programname"
	"github.com/hermesbox/hbx/supervisor"
	"github.com/hermesbox/hbx/upgrade"
)

// StatusReport is what hbx status shows: the programs asked about, then a
// release change half done or, failing that, a recovery's note.
type StatusReport struct {
	Programs []supervisor.Status
	Change   error  // Change's error; nil when none (or no configuration)
	Note     string // upgrade.RecoveryNote; "" when Change is set or there is none
}

// Status asks the supervisor behind c for the programs names (all when
// empty or "all"), in the order asked, noting on note (nil: nowhere) a
// supervisor that is not a child subreaper, and reads cfg's pending change
// and recovery note (cfg may be nil: neither). An unknown name is
// programname.Check's error.
func Status(ctx context.Context, c *supervisor.Client, cfg *config.Config, names []string, note io.Writer) (*StatusReport, error) {
	all, err := c.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	// A supervisor that could not become a child subreaper says so
	// (qemu-user); an older one has no /v1/info.
	if in, err := c.Info(ctx); err == nil && in.NotSubreaper != "" && note != nil {
		fmt.Fprintf(note, "hbx: note: supervisor (pid %d) is %s\n", in.PID, in.NotSubreaper)
	}
	if in, err := c.Info(ctx); err == nil && in.NoCgroups != "" && note != nil {
		fmt.Fprintf(note, "hbx: note: no cgroups: %s\n", in.NoCgroups)
	}
	rep := &StatusReport{Programs: all}
	if len(names) > 0 && !slices.Contains(names, "all") {
		known := make([]string, len(all))
		for i, s := range all {
			known[i] = s.Name
		}
		if err := programname.Check(cfg, known, names, false); err != nil {
			return nil, err
		}
		rep.Programs = nil
		for _, n := range names {
			rep.Programs = append(rep.Programs, all[slices.Index(known, n)])
		}
	}
	if cfg != nil {
		if rep.Change = Change(cfg); rep.Change == nil {
			rep.Note = upgrade.RecoveryNote(cfg.Executor.RuntimeDir)
		}
	}
	return rep, nil
}

// Err is the report's failure, one line: the programs not RUNNING
// (*supervisor.NotRunningError) and the pending change
// (*ChangeError) together, either, or nil.
func (r *StatusReport) Err() error {
	return r.err(r.Change)
}

// ErrAfterText is Err for printing after the text (ui.StatusText), which names the pending
// change in full already: a change with a brief form (data restored
// without its runtime: "release change: restored data awaits runtime
// IMAGE") is given in that form, still a *ChangeError; the others
// (shorter, and naming the command to run) in full, as Err.
func (r *StatusReport) ErrAfterText() error {
	var cp *ChangeError
	if !errors.As(r.Change, &cp) || cp.brief == "" {
		return r.Err()
	}
	return r.err(&ChangeError{msg: "release change: " + cp.Brief(), brief: cp.brief})
}

func (r *StatusReport) err(change error) error {
	err := supervisor.NotRunning(r.Programs)
	switch {
	case change == nil:
		return err
	case err == nil:
		return change
	}
	return fmt.Errorf("%w; %w", err, change)
}

// NoSupervisorStatus is hbx status's error when no supervisor answers
// (dialErr wraps supervisor.ErrNotRunning): with a release change half
// done, or data restored without its runtime (Change), that
// change (naming the image awaited and what to run) and the socket, in
// one line, a *ChangeError (exit 3: the box is not running, and
// why); else dialErr. cfg nil: dialErr.
func NoSupervisorStatus(cfg *config.Config, dialErr error) error {
	if cfg == nil || !errors.Is(dialErr, supervisor.ErrNotRunning) {
		return dialErr
	}
	if cerr := Change(cfg); cerr != nil {
		return fmt.Errorf("%w; no supervisor is running on %s", cerr, cfg.Supervisor.Socket)
	}
	return dialErr
}
