package adapters

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/hermesbox/hbx/health"
	"github.com/hermesbox/hbx/internal/pinfile"
	"github.com/hermesbox/hbx/internal/verbopts"
	"github.com/hermesbox/hbx/rehearse"
	"github.com/hermesbox/hbx/release"
	"github.com/hermesbox/hbx/upgrade"
)

// Rehearsal is upgrade.Options.Rehearse for b (package rehearse): the
// staged release booted on a copy of the data as the supervisor would
// start it once pinned (withPin), on a loopback scratch port, and judged
// by the checks of the upgrade's health wait that need no supervisor
// (gateChecks without supervisor and release), the tool set pinned with
// it included, within supervisor.health_wait (what the real start allows). svc, when not nil, holds the
// programs for one copy if the data never holds still.
func (b Box) Rehearsal(svc upgrade.Services) func(context.Context, upgrade.Release) (string, error) {
	over := pinfile.File{Sources: b.Sources}.ToolsOverridden()
	return func(ctx context.Context, r upgrade.Release) (string, error) {
		c := withPin(b.Config, r)
		c.Health.MCPTools = toolsIn(b.Config, r, over)
		inst, err := release.Open(filepath.Join(c.Executor.RuntimeDir, release.ReleasesDir, r.ManifestDigest.Encoded()))
		if err != nil {
			return "", err
		}
		checks := slices.DeleteFunc(gateChecks(c), func(n string) bool { return n == "supervisor" || n == "release" })
		o := rehearse.Options{
			DataDir: c.Executor.DataDir, Release: inst, Launch: verbopts.Launch(c, release.DefaultHostPath),
			Listen: verbopts.SmokeListen(c), Health: verbopts.Health(c, false, nil), Readiness: c.Health.Readiness,
			Checks: checks, Wait: c.Supervisor.HealthWait, Cgroups: true, Logger: b.Log,
		}
		if svc != nil {
			o.Hold = func(ctx context.Context) (func() error, error) {
				h, err := svc.Hold(ctx)
				if err != nil {
					return nil, err
				}
				return h.Release, nil
			}
		}
		o.Hint = func(cause error) string {
			if tools, ok := health.ListedTools(cause); ok {
				return toolSetHint(r, tools)
			}
			return ""
		}
		res, err := rehearse.Run(ctx, o)
		if err != nil {
			return "", err
		}
		held := "nothing stopped"
		if res.Held > 0 {
			held = "programs held " + res.Held.Round(time.Millisecond).String()
		}
		return fmt.Sprintf("rehearsed on a copy of the data in %s (%d files, %d bytes copied in %s, %s; ready in %s)",
			res.Total.Round(time.Millisecond), res.Copied.Files, res.Copied.Bytes, res.Copy.Round(10*time.Microsecond), held, res.Boot.Round(time.Millisecond)), nil
	}
}
