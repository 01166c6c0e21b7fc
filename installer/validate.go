package installer

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/hermesbox/hbx/release"
)

// validate checks a staged release before activation: the entry program
// and working directory resolve inside the rootfs; when the image's
// platform is the host's, the program runs with --version within timeout.
//
// The run is image code: it runs as cred (the payload's user) when not nil,
// in its own process group, which is killed whole on timeout.
func validate(ctx context.Context, inst *release.Installed, plat Platform, timeout time.Duration, cred *syscall.Credential) (string, error) {
	prog, err := inst.Program()
	if err != nil {
		return "", err
	}
	if plat.OS != runtime.GOOS || plat.Architecture != runtime.GOARCH || timeout <= 0 {
		return "", nil
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog.Path, "--version")
	cmd.Dir = prog.Dir
	cmd.Env = []string{"PATH=" + strings.Join(append(prog.PathDirs, os.Getenv("PATH")), ":"), "HOME=" + os.TempDir()}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // what it left behind in its group
	}
	if err := parent.Err(); err != nil { // interrupted: says nothing about the release
		return "", fmt.Errorf("run %s --version: %w", prog.Args[0], err)
	}
	if ctx.Err() != nil {
		return "", fmt.Errorf("%w: %s --version did not finish within %s", release.ErrCorrupt, prog.Args[0], timeout)
	}
	if err != nil {
		return "", fmt.Errorf("%w: %s --version: %w: %s", release.ErrCorrupt, prog.Args[0], err, firstLine(out))
	}
	return firstLine(out), nil
}

func firstLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
