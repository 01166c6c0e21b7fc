package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/hermesbox/hbx/internal/verbopts"

	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/installer/progress"
	"github.com/hermesbox/hbx/internal/adapters"
	"github.com/hermesbox/hbx/internal/cli"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/guardedinstall"
	"github.com/hermesbox/hbx/internal/supervisorclient"
	"github.com/hermesbox/hbx/internal/ui"
	"github.com/hermesbox/hbx/internal/units"
	"github.com/hermesbox/hbx/launch"
	"github.com/hermesbox/hbx/rehearse"
	"github.com/hermesbox/hbx/release"
	"github.com/hermesbox/hbx/supervisor"
	"github.com/hermesbox/hbx/upgrade"
)

type installOptions struct {
	verify bool
	// noRehearsal: a release change over existing data is not booted
	// on a copy of the data first (as hbx upgrade --no-rehearsal).
	noRehearsal bool
	from        string // an OCI layout directory or archive instead of the registry
	quiet       bool   // no progress, warnings and errors only
	json        bool   // JSON lines of progress events and the result on stdout
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
nothing and makes no network request (docs/install.md#how-hbx-install-works).

Over existing data it changes the active release only the way hbx upgrade
does, and refuses while Executor runs (docs/install.md#under-existing-data):
it rehearses the pinned release on a copy of the data first and refuses one
that would not come up, with nothing changed (--no-rehearsal skips it).
A download is bounded in time (docs/install.md#bounds).

--from PATH reads the image from an OCI image layout directory or an OCI
archive file instead of the registry, with no network request
(docs/install.md#offline-install).`,
		Args: cli.Args(0, 0),
		RunE: g.configured(func(cmd *cobra.Command, _ []string, cfg *config.Config, srcs *config.Sources) error {
			return runInstall(cmd, g, cfg, srcs, o)
		}),
	}
	cmd.Flags().StringVar(&o.from, "from", "", "read the image from the OCI layout directory or OCI archive `PATH` instead of the registry")
	cmd.Flags().BoolVar(&o.verify, "verify", false, "re-hash the active release against its recorded file list and replace it when it differs; re-hash the kept blobs and fetch the active release's missing or damaged ones (install.keep_blobs)")
	cmd.Flags().BoolVar(&o.noRehearsal, "no-rehearsal", false, "do not boot the pinned release on a copy of the data before changing the active release over existing data")
	cmd.Flags().BoolVarP(&o.quiet, "quiet", "q", false, "print nothing but warnings, errors and the result")
	cmd.Flags().BoolVar(&o.json, "json", false, "print progress events and the result as JSON lines on stdout")
	return cmd
}

// installGCPercent is the Go collector's GOGC during `hbx install`, unless
// GOGC is set: what is live is the install's fixed buffers plus about 100
// bytes per file of the image, so the heap may grow 25% over it between
// collections, not 100%, and peak memory barely moves with the image
// (docs/benchmarks.md#memory has the measured figures).
const installGCPercent = 25

func runInstall(cmd *cobra.Command, g *globals, cfg *config.Config, srcs *config.Sources, o installOptions) (err error) {
	if _, set := os.LookupEnv("GOGC"); !set {
		defer debug.SetGCPercent(debug.SetGCPercent(installGCPercent))
	}
	if err := checkFrom("install", o.from); err != nil {
		return err
	}
	opts, err := verbopts.Installer(cmd.Context(), cfg, g.log)
	if err != nil {
		return err
	}
	opts.Verify, opts.From = o.verify, o.from
	out := installOutput{g: g, cfg: cfg, o: o}
	finish, err := out.progress(&opts)
	if err != nil {
		return err
	}
	defer func() { finish(err) }()
	res, err := guardedinstall.Install(cmd.Context(), g.box(cfg, srcs), opts, false, !o.noRehearsal, out.step)
	if err != nil {
		if errors.Is(err, installer.ErrTimeout) {
			err = fmt.Errorf("%w (install.timeout %s, install.min_rate %s/s; install.timeout 0 for no deadline)", err, cfg.Install.Timeout, units.Bytes(cfg.Install.MinRate))
		}
		pruneAfterFailure(cmd.Context(), g, cfg, "hbx install", err) // a release change that rolled itself back, or a refused release staged
		if errors.Is(err, rehearse.ErrRefused) {
			err = refusedHint(err, cfg)
		}
		return fmt.Errorf("install: %w", adapters.OfflineHint(err, o.from, "hbx install"))
	}
	if res.Switch != nil { // a recorded change: its staging and Activate do not clean
		if o.noRehearsal {
			res.Switch.Notes = append(res.Switch.Notes, upgrade.NotRehearsed)
		}
		res.Switch.Notes = append(res.Switch.Notes, pruneAfter(cmd.Context(), g, cfg, "hbx install"))
	}
	if err := out.print(res); err != nil {
		return err
	}
	if !o.json {
		_, _ = io.WriteString(g.stdout, startHint(cmd.Context(), cfg))
	}
	return nil
}

// startHint is the line hbx install adds when a running supervisor has
// Executor FATAL because its release was not installed
// (launch.ErrNotInstalled in its reason): the install does not start it.
// "" otherwise: no supervisor answers within 5s, or Executor is in
// another state.
func startHint(ctx context.Context, cfg *config.Config) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := supervisorclient.Dial(ctx, cfg)
	if err != nil {
		return ""
	}
	sts, err := c.Status(ctx)
	if err != nil {
		return ""
	}
	for _, st := range sts {
		if st.Name == config.ExecutorProgram && st.State == supervisor.Fatal && strings.Contains(st.Detail, launch.ErrNotInstalled.Error()) {
			return "executor is still FATAL (" + launch.ErrNotInstalled.Error() + "): the install does not start it; run `hbx start executor`\n"
		}
	}
	return ""
}

// refusedHint adds to a rehearsal's refusal of hbx install (the pin
// changed) what to do: Executor does not start while executor.image pins
// a release that is not active (launch.ErrNotInstalled).
func refusedHint(err error, cfg *config.Config) error {
	active := "the active release"
	if cur, cerr := release.Current(cfg.Executor.RuntimeDir); cerr == nil {
		active = cur.Meta.Image
	}
	return fmt.Errorf("%w\nexecutor.image still pins %s: pin %s back for Executor to start again, or run hbx install --no-rehearsal to change anyway", err, cfg.Executor.Image, active)
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
		// Warnings and errors only, to the log's destination.
		opts.Logger = slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	case progress.IsTerminal(g.stderr):
		tp := progress.NewTerm(g.stderr)
		opts.Progress = tp
		// Log lines go above the progress line, not into it, and an
		// unfinished progress line ends before the error is printed.
		if opts.Logger, err = cli.NewLogger(tp.LogWriter(), g.logLevel); err != nil {
			return nil, err
		}
		return func(error) { tp.Finish() }, nil
	}
	return func(error) {}, nil
}

// print prints the result: a release change made over existing data, or
// a plain install's.
func (out *installOutput) print(res *guardedinstall.Outcome) error {
	image := out.cfg.Executor.Image
	switch {
	case res.Switch != nil && out.json != nil:
		return out.json.Result(ui.InstallChangeFields(res.Switch, image))
	case res.Switch != nil:
		_, err := io.WriteString(out.g.stdout, ui.InstallChangeText(res.Switch))
		return err
	case out.json != nil:
		return out.json.Result(ui.InstallFields(image, res.Result))
	}
	_, _ = io.WriteString(out.g.stdout, ui.InstallText(image, res.Result, out.o.verify))
	return nil
}

// checkFrom checks the --from path of verb (install, upgrade, restore)
// before anything changes (installer.CheckFrom): a missing path, or one
// neither a directory nor a regular file, is a usage error (exit 2).
func checkFrom(verb, from string) error {
	if from == "" {
		return nil
	}
	if err := installer.CheckFrom(from); err != nil {
		return cli.Usagef("%s: --from: %w", verb, err)
	}
	return nil
}
