package supervisor

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/account"
)

// TestProgramEnvironmentIsClean: a program's /proc/PID/environ holds its
// own Environment, PATH, HOME, USER, LOGNAME and SHELL of its user and
// the SUPERVISOR_* variables, and nothing of the supervisor's own
// environment.
func TestProgramEnvironmentIsClean(t *testing.T) {
	t.Setenv("HBXTEST_SUPERVISOR_OWN", "leak")
	dir := progDir(t, "prog")
	prog := helperProgram(t, dir, "prog", "sleep", "")
	sock := filepath.Join(t.TempDir(), "s.sock")
	s := runSupervisor(t, Options{Programs: []Program{prog}, Env: []string{}, Socket: sock})
	st := waitState(t, s, "prog", 20*time.Second, Running)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", st.PID))
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	prof, err := account.LookupProfile("")
	if err != nil {
		t.Fatal(err)
	}
	want := append([]string{"PATH=" + DefaultPath, "HOME=" + prof.Home, "USER=" + prof.Name, "LOGNAME=" + prof.Name, "SHELL=" + prof.Shell},
		prog.Environment...)
	want = append(want, "SUPERVISOR_ENABLED=1", "SUPERVISOR_PROCESS_NAME=prog", "SUPERVISOR_GROUP_NAME=prog", "SUPERVISOR_SERVER_URL=unix://"+sock)
	slices.Sort(env)
	slices.Sort(want)
	if !slices.Equal(env, want) {
		t.Errorf("environ of the program = %q, want %q", env, want)
	}
	for _, kv := range os.Environ() {
		if slices.Contains(env, kv) && !slices.Contains(want, kv) {
			t.Errorf("the program inherited the supervisor's %s", kv)
		}
	}
}
