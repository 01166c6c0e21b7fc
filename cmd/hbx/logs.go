package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"slices"

	"github.com/hermesbox/hbx/internal/verbopts"

	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/internal/cli"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/pathtrust"
	"github.com/hermesbox/hbx/internal/programname"
	"github.com/hermesbox/hbx/internal/regfile"
	"github.com/hermesbox/hbx/internal/supervisorclient"
	"github.com/hermesbox/hbx/supervisor"
)

// logsOptions are the inputs of runLogs.
type logsOptions struct {
	cfg    *config.Config // its supervisor.socket; names disabled programs in errors
	req    supervisor.LogsRequest
	stdout io.Writer
	stderr io.Writer // the note that the files come from disk
}

// newLogsCommand builds `hbx logs`.
func newLogsCommand(g *globals) *cobra.Command {
	var o logsOptions
	cmd := &cobra.Command{
		Use:   "logs NAME",
		Short: "Print a supervised program's log",
		Long: `Logs prints the last lines of a program's stdout log (--stderr: its stderr
log; --file: the log it writes itself, programs.<name>.log_file, such as
the Hermes gateway's logs/gateway.log); -f keeps printing what the program
writes until interrupted.

When no supervisor runs (after hbx shutdown), it reads the files on disk
instead (<supervisor.log_dir>/NAME.out.log, NAME.err.log, or the
program's log_file) and says so on stderr; -f then is refused, since
only the supervisor follows a log across rotations.`,
		Args: cli.Args(1, 1),
		RunE: g.configured(func(cmd *cobra.Command, args []string, cfg *config.Config, _ *config.Sources) error {
			if o.req.Lines < 0 {
				return cli.Usagef("--lines: \"%d\" is not a line count (want 0 or more)", o.req.Lines)
			}
			if o.req.Stderr && o.req.File {
				return cli.Usagef("--stderr and --file: want one log")
			}
			o.cfg, o.req.Name, o.stdout, o.stderr = cfg, args[0], g.stdout, g.stderr
			return runLogs(cmd.Context(), o)
		}),
	}
	cmd.Flags().BoolVarP(&o.req.Follow, "follow", "f", false, "keep printing new output")
	cmd.Flags().IntVarP(&o.req.Lines, "lines", "n", 10, "print the last N lines first")
	cmd.Flags().BoolVar(&o.req.Stderr, "stderr", false, "the stderr log instead of stdout")
	cmd.Flags().BoolVar(&o.req.File, "file", false, "the log the program writes itself (programs.<name>.log_file)")
	return cmd
}

// runLogs copies the log to opts.stdout.
func runLogs(ctx context.Context, opts logsOptions) error {
	c, err := supervisorclient.Dial(ctx, opts.cfg)
	if errors.Is(err, supervisor.ErrNotRunning) {
		return logsFromDisk(opts, err)
	}
	if err != nil {
		return err
	}
	if err := programname.CheckSupervised(ctx, c, opts.cfg, []string{opts.req.Name}, false); err != nil {
		return fmt.Errorf("logs: %w", err)
	}
	if err := c.Logs(ctx, opts.req, opts.stdout); err != nil {
		return fmt.Errorf("logs: %w", err)
	}
	return nil
}

// logsFromDisk prints the last lines of the log opts asks for from the
// file on disk, once notRunning (wrapping supervisor.ErrNotRunning) said
// no supervisor answers. A log the supervisor writes (under
// supervisor.log_dir, root's) must be in a directory only root can write
// to; no log may be a symbolic link (the program's user controls the
// directory of its own log_file; hbx reads as root). Follow needs the
// supervisor. A missing file is notRunning with the path.
func logsFromDisk(opts logsOptions, notRunning error) error {
	name := opts.req.Name
	pc, ok := programOf(opts.cfg, name)
	if !ok {
		var known []string
		if opts.cfg != nil {
			known = slices.Sorted(maps.Keys(opts.cfg.Programs))
		}
		return fmt.Errorf("logs: %w (%w)", programname.Check(opts.cfg, known, []string{name}, false), notRunning)
	}
	if opts.req.Follow {
		return fmt.Errorf("logs: -f follows the log through the supervisor: %w; without -f, hbx logs prints the file on disk", notRunning)
	}
	paths := verbopts.LogPaths(opts.cfg, name, pc)
	path := paths.Stdout
	switch {
	case opts.req.File && paths.Own == "":
		return fmt.Errorf("logs: %w", supervisor.NoOwnLog(name))
	case opts.req.File:
		path = paths.Own
	case opts.req.Stderr:
		path = paths.Stderr
	}
	if !opts.req.File {
		if err := pathtrust.Check("the log of program "+name, path, false, pathtrust.Trust{}); err != nil {
			return fmt.Errorf("logs: %w", err)
		}
	}
	f, err := regfile.OpenNoFollow(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("logs: %w; and there is no log file %s", notRunning, path)
	}
	if err != nil {
		return fmt.Errorf("logs: %w", err)
	}
	defer f.Close()
	fmt.Fprintf(opts.stderr, "hbx: no supervisor is running; printing the file on disk: %s\n", path)
	if err := supervisor.WriteLastLines(f, opts.req.Lines, opts.stdout); err != nil {
		return fmt.Errorf("logs: read %s: %w", path, err)
	}
	return nil
}

// programOf returns cfg's program name, if cfg (which may be nil) has one.
func programOf(cfg *config.Config, name string) (config.Program, bool) {
	if cfg == nil {
		return config.Program{}, false
	}
	p, ok := cfg.Programs[name]
	return p, ok
}
