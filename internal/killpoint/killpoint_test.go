package killpoint

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// childEnv makes the test binary the child: it passes the kill point and
// the hold point, then prints "passed".
const childEnv = "HBXTEST_KILLPOINT_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		At(BeforeSwitch)
		Hold(SupervisorRecovery)
		os.Stdout.WriteString("passed\n")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestPointsFollowTheBuildTag runs the test binary with HBXTEST_KILL_AT
// and HBXTEST_HOLD_AT set: a product build (no tag hbxtest; `make test`)
// passes both points as if the variables were unset, and an hbxtest
// build (`go test -tags hbxtest`, also run by `make test`) dies with
// SIGKILL at the kill point. The hold file exists throughout: a product
// build must not wait for it.
func TestPointsFollowTheBuildTag(t *testing.T) {
	hold := filepath.Join(t.TempDir(), "hold")
	if err := os.WriteFile(hold, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, env  string
		armedDies  bool
		inertPrint string
	}{
		{"kill", Env + "=" + BeforeSwitch, true, "passed\n"},
		{"kill other point", Env + "=" + AfterPin, false, "passed\n"},
		{"hold, file absent", HoldEnv + "=" + SupervisorRecovery + "=" + hold + ".absent", false, "passed\n"},
	}
	if !Armed {
		tests = append(tests, struct {
			name, env  string
			armedDies  bool
			inertPrint string
		}{"hold, file present", HoldEnv + "=" + SupervisorRecovery + "=" + hold, false, "passed\n"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"=1", tt.env)
			out, err := cmd.Output()
			var ee *exec.ExitError
			killed := errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
			if Armed && tt.armedDies {
				if !killed {
					t.Fatalf("hbxtest build with %s: err %v, output %q; want killed by SIGKILL", tt.env, err, out)
				}
				return
			}
			if err != nil || string(out) != tt.inertPrint {
				t.Fatalf("build (Armed=%v) with %s: err %v, output %q; want %q and exit 0", Armed, tt.env, err, out, tt.inertPrint)
			}
		})
	}
}

// TestArmedOnlyWithTag: Armed is true exactly when the binary's build
// settings (debug.ReadBuildInfo, as `go version -m` shows them) name the
// tag hbxtest, the setting the e2e suite checks on the hbx it runs.
func TestArmedOnlyWithTag(t *testing.T) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("debug.ReadBuildInfo: no build information in the test binary")
	}
	tagged := false
	for _, s := range info.Settings {
		if s.Key == "-tags" && slices.Contains(strings.Split(s.Value, ","), Tag) {
			tagged = true
		}
	}
	if Armed != tagged {
		t.Errorf("Armed = %v, build settings name tag %s: %v", Armed, Tag, tagged)
	}
}
