package installer

import (
	"context"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestValidateShebangAsKernel is a differential test: each entry script
// is validated, then run natively as the payload would run (its PATH the
// image's rootfs dirs then the host's), and validation must pass exactly
// when the run reaches the program the script names. The kernel passes
// everything after a #! interpreter as one argument, so
// "#!/usr/bin/env tool --flag" makes env look for "tool --flag".
func TestValidateShebangAsKernel(t *testing.T) {
	if _, err := exec.LookPath("env"); err != nil {
		t.Skip("no env on the host")
	}
	host := mustPlatform(t, "linux/"+runtime.GOARCH)
	tool := rootFile{"usr/local/bin/tool", "#!/bin/sh\necho ran-tool\n", 0o755}
	for _, line := range []string{
		"#!/usr/bin/env tool",
		"#!/usr/bin/env tool  \t",
		"#!/usr/bin/env\ttool",
		"#! /usr/bin/env tool",
		"#!/usr/bin/env -S tool --flag",
		"#!/usr/bin/env -Stool --flag",
		"#!/usr/bin/env tool --flag",
		"#!/usr/bin/env tool\t--flag",
		"#!/usr/bin/env -i tool",
		"#!/usr/bin/env A=1 tool",
		"#!/usr/bin/env hbxtest-missing",
	} {
		t.Run(line, func(t *testing.T) {
			inst := craftRelease(t, []string{"serve"}, tool, rootFile{"usr/local/bin/serve", line + "\n", 0o755})
			verr := validate(context.Background(), inst, host, Options{})
			prog, err := inst.Program()
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, prog.Path)
			cmd.Dir = prog.Dir
			cmd.Env = []string{"PATH=" + strings.Join(append(prog.PathDirs, DefaultHostPath), ":")}
			out, rerr := cmd.CombinedOutput()
			ran := rerr == nil && strings.Contains(string(out), "ran-tool")
			if ran != (verr == nil) {
				t.Errorf("validate() = %v, but the native run reached the program: %v (run error %v, output %q)", verr, ran, rerr, out)
			}
		})
	}
}
