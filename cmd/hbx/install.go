package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/installer/progress"
	"github.com/hermesbox/hbx/internal/box"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/units"
	"github.com/hermesbox/hbx/upgrade"
)

type installOptions struct {
	verify bool
	quiet  bool // no progress, warnings and errors only
	json   bool // JSON lines of progress events and the result on stdout
}

// newInstallCommand builds `hbx install`.
func newInstallCommand(g *globals) *cobra.Command {
	var o installOptions
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Install the pinned Executor image into the runtime directory",
		Long: `Install resolves executor.image by its digest, picks the manifest for
executor.platform (checked against executor.platform_digests when pinned),
fetches and verifies every blob, applies the layers into a staged release and
activates it atomically. When the active release already matches, it does
nothing and makes no network request; a release that previous names is
reactivated in place, without a download.

The active release changes under existing data only the way hbx upgrade
changes it. While Executor runs (the supervisor reports it, or the data
directory's lock is held), install refuses to replace the active release
with another and points to hbx upgrade; a no-op and a --verify repair of
the same release go ahead. When nothing runs but the data directory has
entries, install stages the new release, takes a pre-change backup (as
hbx upgrade does; backup.passphrase_file is required, or it refuses),
records the change in <runtime_dir>/upgrade.json and activates it, so hbx
rollback can undo it. A first install (no release, or no data) is plain.

A download is bounded by install.timeout plus the image's size at
install.min_rate. Ctrl-C (or that deadline) activates nothing; complete
blobs are kept for the next run.`,
		Args: wantArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, srcs, err := g.loadConfig(cmd)
			if err != nil {
				return err
			}
			return runInstall(cmd, g, cfg, srcs, o)
		},
	}
	cmd.Flags().BoolVar(&o.verify, "verify", false, "re-hash the active release against its recorded file list and replace it when it differs")
	cmd.Flags().BoolVarP(&o.quiet, "quiet", "q", false, "print nothing but warnings, errors and the result")
	cmd.Flags().BoolVar(&o.json, "json", false, "print progress events and the result as JSON lines on stdout")
	return cmd
}

// installGCPercent is the Go collector's GOGC during `hbx install`, unless
// GOGC is set: what is live is the install's fixed buffers plus about 100
// bytes per file of the image, so the heap may grow 25% over it between
// collections, not 100%, and peak memory barely moves with the image (the
// README's Benchmarks, "Memory", has the measured figures).
const installGCPercent = 25

func runInstall(cmd *cobra.Command, g *globals, cfg *config.Config, srcs *config.Sources, o installOptions) (err error) {
	if _, set := os.LookupEnv("GOGC"); !set {
		defer debug.SetGCPercent(debug.SetGCPercent(installGCPercent))
	}
	opts, err := installerOptions(g, cfg)
	if err != nil {
		return err
	}
	opts.Verify = o.verify
	out := installOutput{g: g, cfg: cfg, o: o}
	finish, err := out.progress(&opts)
	if err != nil {
		return err
	}
	defer func() { finish(err) }()
	res, err := g.box(cfg, srcs).GuardedInstall(cmd.Context(), opts, false, out.step)
	if err != nil {
		if errors.Is(err, installer.ErrTimeout) {
			return fmt.Errorf("install: %w (install.timeout %s, install.min_rate %s/s; install.timeout 0 for no deadline)", err, cfg.Install.Timeout, units.Bytes(cfg.Install.MinRate))
		}
		return fmt.Errorf("install: %w", err)
	}
	if res.Switch != nil {
		return out.printSwitch(res.Switch)
	}
	return out.printInstall(res.Result)
}

// installOutput is where hbx install's progress and result go: JSON lines
// (--json), warnings only (--quiet), a progress line on a terminal, or
// the log.
type installOutput struct {
	g    *globals
	cfg  *config.Config
	o    installOptions
	json *progress.JSON
	step func(string) // steps of a recorded change (JSON only)
}

// progress sets opts' progress and logger for the output chosen; finish,
// called with the command's error, ends it (the JSON result line of a
// failure, the end of an unfinished progress line).
func (out *installOutput) progress(opts *installer.Options) (finish func(error), err error) {
	g := out.g
	switch {
	case out.o.json:
		out.json = progress.NewJSON(g.stdout)
		opts.Progress, out.step = out.json, out.json.Step
		// The result line is printed whatever happens, with the error.
		return func(err error) {
			if err != nil {
				out.json.Result(map[string]any{"changed": false, "image": out.cfg.Executor.Image, "error": err.Error()})
			}
		}, nil
	case out.o.quiet:
		opts.Logger = quietLogger(g)
	case progress.IsTerminal(g.stderr):
		tp := progress.NewTerm(g.stderr)
		opts.Progress = tp
		// Log lines go above the progress line, not into it, and an
		// unfinished progress line ends before the error is printed.
		if opts.Logger, err = newLogger(tp.LogWriter(), g.logLevel); err != nil {
			return nil, err
		}
		return func(error) { tp.Finish() }, nil
	}
	return func(error) {}, nil
}

// printSwitch prints a release change made over existing data.
func (out *installOutput) printSwitch(sw *upgrade.Result) error {
	if out.json != nil {
		return out.json.Result(map[string]any{
			"changed": true, "reason": "release change over existing data, with a pre-change backup", "image": out.cfg.Executor.Image,
			"platform": sw.New.Platform, "index_digest": sw.New.Index, "manifest_digest": sw.New.Manifest,
			"old": sw.Old, "new": sw.New, "backup": sw.Backup, "notes": sw.Notes, "recovered": sw.Recovered,
			"duration_ms": sw.Duration.Milliseconds(),
		})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "installed %s (%s, manifest %s) in %s, replacing %s over existing data\n", sw.New.Image, sw.New.Platform, sw.New.Manifest, sw.Duration.Round(time.Millisecond), sw.Old.Image)
	fmt.Fprintf(&b, "  pre-change backup: %s (hbx rollback undoes this change)\n", sw.Backup)
	if sw.Recovered != "" {
		fmt.Fprintf(&b, "  first %s\n", sw.Recovered)
	}
	for _, n := range sw.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	_, err := io.WriteString(out.g.stdout, b.String())
	return err
}

// printInstall prints a plain install's result.
func (out *installOutput) printInstall(res *installer.Result) error {
	m, image := res.Release.Meta, out.cfg.Executor.Image
	if out.json != nil {
		return out.json.Result(map[string]any{
			"changed": res.Changed, "reason": res.Reason, "image": image,
			"platform": m.Platform, "index_digest": m.IndexDigest, "manifest_digest": m.ManifestDigest,
			"fetched": res.Fetched, "reused": res.Reused, "fetched_bytes": res.FetchedBytes, "reused_bytes": res.ReusedBytes,
			"duration_ms": res.Duration.Milliseconds(),
		})
	}
	if !res.Changed {
		state := "up to date"
		if out.o.verify {
			state = "up to date, every file verified against files.json"
		}
		fmt.Fprintf(out.g.stdout, "%s: %s (%s, manifest %s)\n", state, image, m.Platform, m.ManifestDigest)
		return nil
	}
	fmt.Fprintf(out.g.stdout, "installed %s (%s, manifest %s) in %s: %d blobs fetched (%d bytes), %d reused (%d bytes); reason: %s\n",
		image, m.Platform, m.ManifestDigest, res.Duration.Round(1e6), res.Fetched, res.FetchedBytes, res.Reused, res.ReusedBytes, res.Reason)
	return nil
}

// quietLogger keeps warnings and errors of g's logger's destination.
func quietLogger(g *globals) *slog.Logger {
	return slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// installerOptions is box.InstallerOptions logging to g.log.
func installerOptions(g *globals, cfg *config.Config) (installer.Options, error) {
	return box.InstallerOptions(cfg, g.log)
}
