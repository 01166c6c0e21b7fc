package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hermesbox/hbx/internal/verbopts"

	"github.com/spf13/cobra"

	"github.com/hermesbox/hbx/health"
	"github.com/hermesbox/hbx/internal/cli"
	"github.com/hermesbox/hbx/internal/ui"
)

// healthOptions are the inputs of runHealth.
type healthOptions struct {
	checks health.Options
	only   []string      // check names; empty: all
	json   bool          // print the report as JSON
	wait   time.Duration // retry until all pass or this long has passed; 0: once
	start  bool          // with wait: retry only while a program is STARTING or BACKOFF (--wait-start)
	stdout io.Writer
}

// newHealthCommand builds `hbx health`.
func newHealthCommand(g *globals) *cobra.Command {
	var f healthFlags
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Check that the box works: Executor's HTTP and MCP surface, the supervisor, the release, listeners, the data directory",
		Long: `Health runs every acceptance check of the box and prints one line per
check: pass, fail or skip, its name, how long it took and why.

  api-health  GET /api/health answers 200 with a JSON "status" of "ok"
              (with the key when one is configured, as for web-ui)
  web-ui      GET / answers 200 with an HTML page (the setup UI)
  mcp-auth    POST /mcp (initialize) without a key answers 401 with a
              WWW-Authenticate Bearer challenge; a made-up key is refused
  mcp-tools   with the key, an MCP session lists exactly health.mcp_tools
              (skipped without a key)
  supervisor  every supervised program is RUNNING (skipped when no
              supervisor runs)
  release     the active release is the configured image (index digest,
              platform, pinned manifest digest) and no upgrade, rollback or
              restore is half done (in progress, or interrupted: it names
              what to run); --deep also re-hashes its manifest and config
              and checks the program they name
  listeners   every TCP listener of the executor's process tree is on
              loopback, and executor.listen:executor.port is one of them
              (executor.exposure network: it listens on exactly that
              address and port, nowhere else)
  data-dir    executor.data_dir exists, is owned by executor.user, has
              mode 0700 or stricter and is not a mount point

The MCP key comes from the file health.token_file (mode 0600 or
stricter) or, with --token-stdin, from the first line of standard input;
never from the command line, and it is never printed. Each check is
bounded by health.timeout. --json prints one document:
{"status": "pass|fail", "checks": [{"name", "status", "reason",
"duration_ms"}]}.

Exit status: 0 when no check failed (skips do not fail), 1 when one did,
2 for a bad configuration or command line.`,
		Args: cli.Args(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd, g) },
	}
	fl := cmd.Flags()
	fl.BoolVar(&f.asJSON, "json", false, "print one JSON document")
	fl.DurationVar(&f.wait, "wait", 0, "retry until every check passes or this much time has passed, e.g. 60s (for boot scripts); a FATAL program ends it at once")
	fl.DurationVar(&f.waitStart, "wait-start", 0, "retry while a supervised program is STARTING or BACKOFF (installing, starting), up to this long; any other failure, a FATAL program among them, ends it at once (the container healthcheck)")
	fl.StringSliceVar(&f.only, "only", nil, "run only these checks, comma-separated: "+strings.Join(health.Names(), ","))
	fl.BoolVar(&f.deep, "deep", false, "release: also re-hash the recorded manifest and config and check the program they name")
	fl.BoolVar(&f.tokenStdin, "token-stdin", false, "read the MCP bearer key from the first line of standard input")
	return cmd
}

// healthFlags are the flags of hbx health.
type healthFlags struct {
	asJSON, deep, tokenStdin bool
	wait, waitStart          time.Duration
	only                     []string
}

// run loads the configuration, checks the flags and calls runHealth.
func (f *healthFlags) run(cmd *cobra.Command, g *globals) error {
	cfg, _, err := g.loadConfig(cmd)
	if err != nil {
		return err
	}
	if f.wait < 0 || f.waitStart < 0 {
		return cli.Usagef("--wait %s, --wait-start %s: want durations of 0 or more", f.wait, f.waitStart)
	}
	if f.wait > 0 && f.waitStart > 0 {
		return cli.Usagef("--wait and --wait-start: give one")
	}
	opts := healthOptions{checks: verbopts.Health(cfg, f.deep, g.log), only: f.only, json: f.asJSON, wait: f.wait, stdout: g.stdout}
	if f.waitStart > 0 {
		opts.wait, opts.start = f.waitStart, true
	}
	if f.tokenStdin {
		key, err := health.ReadKey(cmd.InOrStdin())
		if err != nil {
			return &cli.UsageError{Err: fmt.Errorf("--token-stdin: %w", err)}
		}
		opts.checks.Key = key
	}
	return runHealth(cmd.Context(), opts)
}

// runHealth runs the checks once, or until they pass with opts.wait, and
// prints the report. A failed check makes the error wrap health.ErrFailed;
// an unknown check name is a usage error.
func runHealth(ctx context.Context, opts healthOptions) error {
	if err := verbopts.CheckHealthNames(opts.only); err != nil {
		return cli.Usagef("--only: %w", err)
	}
	wait := health.Wait
	if opts.start {
		wait = health.WaitStart
	}
	rep, err := wait(ctx, opts.checks, opts.only, opts.wait, 0) // wait 0: one run
	if errors.Is(err, health.ErrUnknownCheck) {
		return &cli.UsageError{Err: fmt.Errorf("--only: %w", err)}
	}
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	if opts.json {
		enc := json.NewEncoder(opts.stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		_, err = io.WriteString(opts.stdout, ui.HealthText(rep))
	}
	if err != nil {
		return err
	}
	if err := rep.Err(); err != nil {
		return fmt.Errorf("health: %w", err)
	}
	return nil
}
