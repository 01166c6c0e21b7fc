package launch

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
)

// TestCheckActiveRefusesAsPrepareAndChangesNothing: CheckActive, the
// supervisor's preflight of a restart, refuses what Prepare refuses
// before it touches the disk (an active release that is not the
// configured one, a bad env or token file) with the same error, passes
// where Prepare would start, and creates neither the data nor the state
// directory in any case.
func TestCheckActiveRefusesAsPrepareAndChangesNothing(t *testing.T) {
	rt := installFake(t, "#!/bin/sh\n", cfg)
	for _, c := range []struct {
		name    string
		mut     func(*Options)
		wantErr error
		wantMsg string
	}{
		{"matching release", func(*Options) {}, nil, ""},
		{"no release", func(o *Options) { o.RuntimeDir = t.TempDir() }, ErrNotInstalled, "hbx install"},
		{"other index digest (an edited pin)", func(o *Options) { o.IndexDigest = digest.FromString("other") }, ErrNotInstalled, "configured"},
		{"other platform", func(o *Options) { o.Platform = "linux/arm64" }, ErrNotInstalled, "platform"},
		{"env file readable by others", func(o *Options) {
			o.EnvFile = filepath.Join(t.TempDir(), "env")
			os.WriteFile(o.EnvFile, []byte("A=1\n"), 0o644)
		}, ErrEnvFile, "0600 or stricter"},
		{"token file missing", func(o *Options) {
			o.TokenFile, o.TokenEnv = filepath.Join(t.TempDir(), "key"), "EXECUTOR_AUTH_TOKEN"
		}, ErrTokenFile, "no such file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := baseOptions(t, rt)
			c.mut(&o)
			err := CheckActive(o)
			if c.wantErr == nil && err != nil {
				t.Fatalf("CheckActive() = %v, want nil", err)
			}
			if c.wantErr != nil && (!errors.Is(err, c.wantErr) || !strings.Contains(err.Error(), c.wantMsg)) {
				t.Fatalf("CheckActive() = %v; want %v containing %q", err, c.wantErr, c.wantMsg)
			}
			for _, d := range []string{o.DataDir, o.StateDir} {
				if _, serr := os.Lstat(d); !errors.Is(serr, os.ErrNotExist) {
					t.Errorf("Lstat(%s) = %v after CheckActive; want it not created", d, serr)
				}
			}
			if _, perr := Prepare(o); (perr == nil) != (err == nil) {
				t.Errorf("Prepare() = %v, CheckActive() = %v; want both to pass or both to fail", perr, err)
			}
		})
	}
}
