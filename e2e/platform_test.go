package e2e

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv"
)

// The platform under test. HBXTEST_PLATFORM (linux/amd64 or linux/arm64,
// default the test binary's own) says which child of the test image the
// boxes install (executor.platform and its pin) and which hbx binary
// runs: HBXTEST_BIN must be an ELF executable of that architecture, or,
// without HBXTEST_BIN, the test builds one with GOARCH set. A platform
// other than the host's runs under qemu-user through binfmt_misc, the
// binary and its payload's Bun both: [checkPlatform] proves that works
// before any test uses it, and fails (never skips) under HBXTEST_E2E=1
// when a piece is missing.
const platformEnv = "HBXTEST_PLATFORM"

// emulation is what running another architecture needs on this host.
type emulation struct {
	machine  elf.Machine
	binfmt   string // the binfmt_misc entry Debian's qemu-user-static registers
	loader   string // the glibc dynamic loader the platform's Bun asks for
	packages string // what installs the loader and the emulator
}

var emulations = map[string]emulation{
	"linux/amd64": {elf.EM_X86_64, "qemu-x86_64", "/lib64/ld-linux-x86-64.so.2", "qemu-user-static binfmt-support libc6:amd64"},
	"linux/arm64": {elf.EM_AARCH64, "qemu-aarch64", "/lib/ld-linux-aarch64.so.1", "qemu-user-static binfmt-support libc6:arm64"},
}

var (
	platformOnce sync.Once
	platformName string
	platformErr  error
)

// platform returns the platform under test, "linux/<arch>", after
// [checkPlatform] passed once for the run.
func platform(t *testing.T) string {
	t.Helper()
	platformOnce.Do(func() { platformName, platformErr = checkPlatform() })
	if platformErr != nil {
		testenv.Unavailable(t, platformErr.Error())
	}
	return platformName
}

// arch is the architecture part of the platform under test ("arm64").
func arch(t *testing.T) string {
	t.Helper()
	return strings.TrimPrefix(platform(t), "linux/")
}

// hostPlatform is the platform the test binary runs as.
func hostPlatform() string { return runtime.GOOS + "/" + runtime.GOARCH }

// emulated reports whether the platform under test is not the host's, so
// hbx and its payload run under qemu-user.
func emulated(t *testing.T) bool {
	t.Helper()
	return platform(t) != hostPlatform()
}

// checkPlatform reads HBXTEST_PLATFORM and, when it is not the host's,
// checks that binfmt_misc runs that architecture's executables with the
// dynamic loader the platform's Bun needs, naming what is missing.
func checkPlatform() (string, error) {
	p := os.Getenv(platformEnv)
	if p == "" {
		return hostPlatform(), nil
	}
	em, ok := emulations[p]
	if !ok {
		return "", fmt.Errorf("%s=%q: not linux/amd64 or linux/arm64", platformEnv, p)
	}
	if p == hostPlatform() {
		return p, nil
	}
	install := "apt-get install " + em.packages + " (after dpkg --add-architecture " + strings.TrimPrefix(p, "linux/") + "), as .ci/run does"
	if _, err := os.Stat("/proc/sys/fs/binfmt_misc/register"); err != nil {
		return "", fmt.Errorf("run %s executables: binfmt_misc is not mounted (%v); mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc", p, err)
	}
	entry, err := os.ReadFile("/proc/sys/fs/binfmt_misc/" + em.binfmt)
	if err != nil {
		return "", fmt.Errorf("run %s executables: no binfmt_misc entry %s (%v); %s", p, em.binfmt, err, install)
	}
	if !strings.HasPrefix(string(entry), "enabled\n") {
		return "", fmt.Errorf("run %s executables: binfmt_misc entry %s is disabled; update-binfmts --enable %s", p, em.binfmt, em.binfmt)
	}
	if _, err := os.Stat(em.loader); err != nil {
		return "", fmt.Errorf("run %s Bun: no dynamic loader %s (%v); %s", p, em.loader, err, install)
	}
	return p, nil
}

// checkBinary checks that the hbx under test is an executable of the
// platform under test and that it runs here: `hbx version` names that
// platform.
func checkBinary(t *testing.T, bin string) error {
	want := platform(t)
	f, err := elf.Open(bin)
	if err != nil {
		return fmt.Errorf("hbx under test %s: %w", bin, err)
	}
	machine := f.Machine
	f.Close()
	if em := emulations[want]; machine != em.machine {
		return fmt.Errorf("hbx under test %s is an %v executable, want %v for %s=%s (make cross builds dist/hbx-linux-%s)",
			bin, machine, em.machine, platformEnv, want, strings.TrimPrefix(want, "linux/"))
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, "version")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("run %s version (%s under binfmt_misc): %v\n%s", bin, want, err, out.String())
	}
	if !strings.Contains(out.String(), "platform: "+want+"\n") {
		return fmt.Errorf("%s version does not name %s:\n%s", bin, want, out.String())
	}
	return nil
}

// emulationScale multiplies the waits of the tests under emulation (qemu
// translates every instruction of hbx and of Bun; see the README's
// "ARM64 under emulation"); HBXTEST_SLOW overrides it. Native runs keep
// their limits.
func emulationScale(t *testing.T) float64 {
	t.Helper()
	if s := os.Getenv("HBXTEST_SLOW"); s != "" {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f < 1 {
			t.Fatalf("HBXTEST_SLOW=%q: not a number of at least 1", s)
		}
		return f
	}
	if emulated(t) {
		// Bun's start, CPU-bound, takes about 20 s under qemu-user on a
		// quiet machine (1 s natively) and over 60 s at load average 14.
		return 10
	}
	return 1
}

// slow scales a wait or a time limit d by [emulationScale].
func slow(t *testing.T, d time.Duration) time.Duration {
	t.Helper()
	return time.Duration(float64(d) * emulationScale(t))
}

// withoutSubreaperNote drops from stderr the note hbx prints when the
// supervisor is not a child subreaper, as under qemu-user.
func withoutSubreaperNote(stderr string) string {
	var keep []string
	for _, l := range strings.SplitAfter(stderr, "\n") {
		if !(strings.HasPrefix(l, "hbx: note: supervisor (pid ") && strings.Contains(l, "not a child subreaper")) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "")
}

// logTiming logs how long what took, under emulation or with
// HBXTEST_TIMINGS=1, to show where an emulated suite's time goes.
func logTiming(t *testing.T, what string, d time.Duration) {
	t.Helper()
	if emulated(t) || os.Getenv("HBXTEST_TIMINGS") == "1" {
		t.Logf("timing: %s: %s", what, d.Round(time.Millisecond))
	}
}

// TestVersionE2E: the hbx under test names its platform, version and
// commit; one of `make cross` (dist/hbx-linux-<arch>) is listed with its
// hash in dist/SHA256SUMS beside it and carries the checkout's commit.
func TestVersionE2E(t *testing.T) {
	requireE2E(t)
	bin := binary(t)
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("hbx version: %v", err)
	}
	fields := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(l, ":")
		fields[k] = strings.TrimSpace(v)
	}
	if fields["platform"] != platform(t) || fields["version"] == "" || fields["commit"] == "" || fields["go"] == "" {
		t.Errorf("hbx version = %q, want platform %s, a version, a commit and the Go version", out, platform(t))
	}
	if os.Getenv("HBXTEST_BIN") == "" {
		return // built by the test without the Makefile's -ldflags
	}
	if fields["version"] == "dev" || fields["commit"] == "unknown" {
		t.Errorf("hbx version = %q: the Makefile's version and commit are not stamped", out)
	}
	if head, err := exec.Command("git", "-C", testenv.RepoRoot(t), "rev-parse", "--short", "HEAD").Output(); err == nil && fields["commit"] != strings.TrimSpace(string(head)) {
		t.Errorf("hbx version names commit %s, the checkout is at %s: a stale binary (rebuild it)", fields["commit"], strings.TrimSpace(string(head)))
	}
	name := filepath.Base(bin)
	if name != "hbx-"+strings.ReplaceAll(platform(t), "/", "-") {
		return // not from make cross
	}
	sums := readFile(t, filepath.Join(filepath.Dir(bin), "SHA256SUMS"))
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	if want := hex.EncodeToString(h.Sum(nil)) + "  " + name + "\n"; !strings.Contains(sums, want) {
		t.Errorf("SHA256SUMS beside %s lacks %q:\n%s", bin, want, sums)
	}
	for _, other := range []string{"hbx-linux-amd64", "hbx-linux-arm64"} {
		if !strings.Contains(sums, "  "+other+"\n") {
			t.Errorf("SHA256SUMS does not list %s:\n%s", other, sums)
		}
	}
}
