package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	digest "github.com/opencontainers/go-digest"
	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/internal/account"
	"github.com/hermesbox/hbx/internal/buildinfo"
	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/internal/units"
	"github.com/hermesbox/hbx/launch"
	"github.com/hermesbox/hbx/release"
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

// installerOptions maps the configuration onto an install request.
// Validation checks the staged programs are executable by executor.user,
// and install.smoke_command runs as the payload would (see smokeFunc).
func installerOptions(g *globals, cfg *config.Config) (installer.Options, error) {
	runAs, err := account.Lookup(cfg.Executor.User)
	if err != nil {
		return installer.Options{}, fmt.Errorf("executor.user: %w", err)
	}
	hostPath := release.DefaultHostPath // as the payload runs: never the caller's PATH
	return installer.Options{
		RunAs:                runAs,
		HostPath:             hostPath,
		Smoke:                smokeFunc(cfg, hostPath),
		Image:                cfg.Executor.Image,
		Platform:             cfg.Executor.Platform,
		PlatformDigest:       platformPin(cfg),
		RuntimeDir:           cfg.Executor.RuntimeDir,
		MaxUncompressedBytes: cfg.Install.MaxUncompressedBytes,
		KeepBlobs:            cfg.Install.KeepBlobs,
		LockWait:             cfg.Install.LockWait,
		Timeout:              cfg.Install.Timeout,
		MinRate:              cfg.Install.MinRate,
		Registry: installer.RegistryOptions{
			InsecureHosts: cfg.Registry.InsecureHosts,
			AuthFile:      cfg.Registry.AuthFile,
			CertsDir:      cfg.Registry.CertsDir,
			StallTimeout:  cfg.Registry.StallTimeout,
			Retries:       cfg.Registry.Retries,
		},
		HbxVersion: buildinfo.Version,
		Logger:     g.log,
	}, nil
}

// smokeFunc runs install.smoke_command in a staged release as `hbx run
// executor` would run the payload (user, PATH, working directory,
// environment, argument mapping), within install.validate_timeout; nil
// when no smoke command is configured. It never gets the live data or
// state directory nor the configured port: the payload may be running
// on them (it holds the data lock), and a smoke command that starts the
// server whatever its arguments would be a second writer of Executor's
// database. It gets a scratch data and state directory beside the staged
// release (removed after, or with the staging area by the next install)
// and a free loopback port.
func smokeFunc(cfg *config.Config, hostPath string) installer.SmokeFunc {
	argv := cfg.Install.SmokeCommand
	if len(argv) == 0 {
		return nil
	}
	return func(ctx context.Context, inst *release.Installed) (err error) {
		scratch, err := os.MkdirTemp(filepath.Dir(inst.Dir), ".smoke-")
		if err != nil {
			return fmt.Errorf("prepare smoke command %q: %w", strings.Join(argv, " "), err)
		}
		defer func() {
			if rerr := os.RemoveAll(scratch); rerr != nil && err == nil {
				err = fmt.Errorf("remove the smoke command's scratch directory: %w", rerr)
			}
		}()
		if err := os.Chmod(scratch, 0o755); err != nil { // executor.user reaches its dirs inside
			return fmt.Errorf("prepare smoke command %q: %w", strings.Join(argv, " "), err)
		}
		o := launchOptions(cfg, hostPath)
		o.DataDir, o.StateDir = filepath.Join(scratch, "data"), filepath.Join(scratch, "state")
		o.Listen = smokeListen(cfg)
		if o.Port, err = freePort(o.Listen); err != nil {
			return fmt.Errorf("prepare smoke command %q: %w", strings.Join(argv, " "), err)
		}
		o.HostPort = o.Port
		spec, err := launch.PrepareCommand(o, inst, argv)
		if err != nil {
			return fmt.Errorf("prepare smoke command %q: %w", strings.Join(argv, " "), err)
		}
		return launch.Smoke(ctx, spec, cfg.Install.ValidateTimeout)
	}
}

// freePort returns a TCP port free on the address listen now.
func freePort(listen string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(listen, "0"))
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// platformPin is the pinned child manifest digest for the configured
// platform ("" when not pinned); see config.Config.PlatformPin.
func platformPin(cfg *config.Config) digest.Digest {
	return digest.Digest(cfg.PlatformPin())
}

// installGCPercent is the Go collector's GOGC during `hbx install`, unless
// GOGC is set: the heap may grow 25% over what is live between
// collections, not 100%. What is live is the install's fixed buffers
// (read-ahead, hash queue: about 10 MiB) plus about 100 bytes per file of
// the image (its hash for files.json, the layer's path set), so peak memory
// barely moves with the image: 32 MiB peak RSS on the 20k-file bench image,
// 30 MiB on the 10k-file one (42 and 37 MiB at GOGC=100), for a few more
// collections of a small heap. A fixed memory limit would be flatter up to
// a size and then make the collector run without pause; this does not.
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
	var step func(string)
	switch {
	case o.json:
		jp := newJSONProgress(g.stdout)
		opts.Progress = jp
		step = jp.step
		// The result line is printed whatever happens, with the error.
		defer func() {
			if err != nil {
				jp.result(map[string]any{"changed": false, "image": cfg.Executor.Image, "error": err.Error()})
			}
		}()
	case o.quiet:
		opts.Logger = quietLogger(g)
	case isTerminal(g.stderr):
		tp := newTermProgress(g.stderr)
		opts.Progress = tp
		// Log lines go above the progress line, not into it, and an
		// unfinished progress line ends before the error is printed.
		defer tp.finish()
		if opts.Logger, err = newLogger(tp.logWriter(), g.logLevel); err != nil {
			return err
		}
	}
	out, err := guardedInstall(cmd.Context(), g, cfg, srcs, opts, false, step)
	if err != nil {
		if errors.Is(err, installer.ErrTimeout) {
			return fmt.Errorf("install: %w (install.timeout %s, install.min_rate %s/s; install.timeout 0 for no deadline)", err, cfg.Install.Timeout, units.Bytes(cfg.Install.MinRate))
		}
		return fmt.Errorf("install: %w", err)
	}
	if sw := out.sw; sw != nil {
		if o.json {
			jp := opts.Progress.(*jsonProgress)
			return jp.result(map[string]any{
				"changed": true, "reason": "release change over existing data, with a pre-change backup", "image": cfg.Executor.Image,
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
		_, err := io.WriteString(g.stdout, b.String())
		return err
	}
	res := out.res
	m := res.Release.Meta
	if o.json {
		return opts.Progress.(*jsonProgress).result(map[string]any{
			"changed": res.Changed, "reason": res.Reason, "image": cfg.Executor.Image,
			"platform": m.Platform, "index_digest": m.IndexDigest, "manifest_digest": m.ManifestDigest,
			"fetched": res.Fetched, "reused": res.Reused, "duration_ms": res.Duration.Milliseconds(),
		})
	}
	if !res.Changed {
		state := "up to date"
		if o.verify {
			state = "up to date, every file verified against files.json"
		}
		fmt.Fprintf(g.stdout, "%s: %s (%s, manifest %s)\n", state, cfg.Executor.Image, m.Platform, m.ManifestDigest)
		return nil
	}
	fmt.Fprintf(g.stdout, "installed %s (%s, manifest %s) in %s: %d blobs fetched, %d reused; reason: %s\n",
		cfg.Executor.Image, m.Platform, m.ManifestDigest, res.Duration.Round(1e6), res.Fetched, res.Reused, res.Reason)
	return nil
}

// quietLogger keeps warnings and errors of g's logger's destination.
func quietLogger(g *globals) *slog.Logger {
	return slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
