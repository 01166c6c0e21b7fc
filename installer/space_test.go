package installer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/tartest"
	"github.com/hermesbox/hbx/internal/testenv"
)

// tmpfs mounts a size-limited tmpfs for the test (root only).
func tmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		// Not a missing prerequisite: root in a container may not mount.
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

func TestInstallRefusesEarlyWhenShortOfSpace(t *testing.T) {
	e := newEnv(t)
	e.runtime = filepath.Join(tmpfs(t, "64m"), "runtime")
	p := e.reg.publish(t, "executor", goodParts(hostPlat))
	_, err := Install(context.Background(), e.opts(p))
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "free, need about") {
		t.Fatalf("Install() = %v, want ErrNoSpace with the numbers", err)
	}
	if n := e.reg.blobRequests(); n != 1 { // only the config
		t.Errorf("blob requests = %d before refusing, want 1 (the config)", n)
	}
}

func TestInstallCleansUpOnENOSPC(t *testing.T) {
	e := newEnv(t)
	e.runtime = filepath.Join(tmpfs(t, "300m"), "runtime")
	parts := goodParts(hostPlat)
	// 320 MiB of zeros: a few hundred KiB compressed, so the early estimate passes.
	parts.layers = append(parts.layers, layerSpec{tar: tartest.New().File("big", strings.Repeat("\x00", 320<<20), 0o644).Bytes()})
	p := e.reg.publish(t, "executor", parts)
	_, err := Install(context.Background(), e.opts(p, func(o *Options) { o.MaxUncompressedBytes = 1 << 30 }))
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "staging") {
		t.Fatalf("Install() = %v, want ErrNoSpace saying staging was removed", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.runtime, "staging")); len(ents) != 0 {
		t.Errorf("staging holds %d entries after ENOSPC", len(ents))
	}
	if currentTarget(t, e.runtime) != "" {
		t.Errorf("current was set by a failed install")
	}
}
