package launch

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestPrepareUnderUmask077: under root's hardened umask 077 the missing
// parents of the data and state directories that Prepare creates are
// still 0755: 0700 parents kept executor.user out of its own 0700 data
// directory.
func TestPrepareUnderUmask077(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	rt := installFake(t, "#!/bin/sh\n", cfg)
	o := baseOptions(t, rt)
	base := t.TempDir()
	o.DataDir = filepath.Join(base, "srv/executor/data")
	o.StateDir = filepath.Join(base, "var/lib/hbx/state")
	if _, err := Prepare(o); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"srv", "srv/executor", "var", "var/lib", "var/lib/hbx"} {
		st, err := os.Stat(filepath.Join(base, d))
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != 0o755 {
			t.Errorf("%s: mode %04o, want 0755", d, got)
		}
	}
}
