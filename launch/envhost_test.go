package launch

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEnvFileHostIsLoopbackOnly: an EXECUTOR_HOST in executor.env_file
// (which comes after hbx's settings) that is not a loopback IP literal
// (0.0.0.0, ::, an interface address, a name) is invalid configuration
// (ErrEnvFile, exit 2) naming the file, the key and the rule, before
// anything is made, whether the supervisor's preflight (CheckActive) or
// the start (Prepare) reads it; a loopback one passes. With
// executor.exposure network (the Docker box's executor container, which
// listens on 0.0.0.0 by design) any value passes.
func TestEnvFileHostIsLoopbackOnly(t *testing.T) {
	rt := installFake(t, "#!/bin/sh\n", cfg)
	for _, tc := range []struct {
		name, lines string
		network     bool
		refused     bool
	}{
		{name: "all IPv4 addresses", lines: "EXECUTOR_HOST=0.0.0.0\n", refused: true},
		{name: "all IPv6 addresses", lines: "EXECUTOR_HOST=::\n", refused: true},
		{name: "quoted, exported", lines: "export EXECUTOR_HOST=\"0.0.0.0\"\n", refused: true},
		{name: "an interface address", lines: "EXECUTOR_HOST=192.0.2.7\n", refused: true},
		{name: "a name", lines: "EXECUTOR_HOST=localhost\n", refused: true},
		{name: "empty", lines: "EXECUTOR_HOST=\n", refused: true},
		{name: "IPv4-mapped loopback", lines: "EXECUTOR_HOST=::ffff:127.0.0.1\n", refused: true},
		{name: "a loopback one, then all addresses", lines: "EXECUTOR_HOST=127.0.0.1\nEXECUTOR_HOST=0.0.0.0\n", refused: true},
		{name: "loopback", lines: "EXECUTOR_HOST=127.0.0.1\n"},
		{name: "another loopback address", lines: "EXECUTOR_HOST=127.0.0.2\n"},
		{name: "IPv6 loopback", lines: "EXECUTOR_HOST=::1\n"},
		{name: "not set", lines: "A=0.0.0.0\n"},
		{name: "network exposure: all IPv4 addresses", lines: "EXECUTOR_HOST=0.0.0.0\n", network: true},
		{name: "network exposure: all IPv6 addresses", lines: "EXECUTOR_HOST=::\n", network: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := baseOptions(t, rt)
			o.Network = tc.network
			o.EnvFile = filepath.Join(t.TempDir(), "executor.env")
			if err := os.WriteFile(o.EnvFile, []byte(tc.lines), 0o600); err != nil {
				t.Fatal(err)
			}
			err := CheckActive(o)
			if !tc.refused {
				if err != nil {
					t.Fatalf("CheckActive() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrEnvFile) {
				t.Fatalf("CheckActive() = %v, want ErrEnvFile", err)
			}
			for _, want := range []string{o.EnvFile, "EXECUTOR_HOST", "loopback only", "executor.exposure: network"} {
				if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
					t.Errorf("CheckActive() = %q; want one line naming %q", err, want)
				}
			}
			if _, perr := Prepare(o); !errors.Is(perr, ErrEnvFile) {
				t.Errorf("Prepare() = %v; want ErrEnvFile as CheckActive", perr)
			}
			for _, d := range []string{o.DataDir, o.StateDir} {
				if _, serr := os.Lstat(d); !errors.Is(serr, os.ErrNotExist) {
					t.Errorf("Lstat(%s) = %v after the refusal; want it not created", d, serr)
				}
			}
		})
	}
}
