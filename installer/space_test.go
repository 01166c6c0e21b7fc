package installer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/internal/tartest"
	"github.com/hermesbox/hbx/internal/testenv"
)

func TestInstallRefusesEarlyWhenShortOfSpace(t *testing.T) {
	e := newEnv(t)
	e.runtime = filepath.Join(testenv.Tmpfs(t, "64m"), "runtime")
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
	e.runtime = filepath.Join(testenv.Tmpfs(t, "300m"), "runtime")
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
