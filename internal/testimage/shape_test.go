// SPDX-License-Identifier: Apache-2.0

package testimage_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hermesbox/hbx/internal/testimage"
)

// shapeTree builds the image of shape for amd64 and applies its layers; it
// returns the rootfs and the image.
func shapeTree(t *testing.T, shape string) (string, *testimage.Image, layoutImage) {
	t.Helper()
	dir := t.TempDir()
	img, err := testimage.BuildLayout(dir, testimage.Options{BunTarballs: fakeBunTarballs(t), Platforms: []string{"linux/amd64"}, Shape: shape})
	if err != nil {
		t.Fatalf("BuildLayout(shape %q) = %v", shape, err)
	}
	_, _, images := readLayout(t, dir)
	root := t.TempDir()
	applyLayers(t, dir, images[0], root)
	return root, img, images[0]
}

func TestShapeWrapper(t *testing.T) {
	root, img, li := shapeTree(t, testimage.ShapeWrapper)
	deb, _, _ := shapeTree(t, testimage.ShapeDebian)
	c := li.config.Config
	if len(c.Entrypoint) != 0 || !cmp.Equal(c.Cmd, []string{"executor-web"}) || c.WorkingDir != testimage.AppDir {
		t.Errorf("config Entrypoint %q Cmd %q WorkingDir %q, want none, [executor-web], %s", c.Entrypoint, c.Cmd, c.WorkingDir, testimage.AppDir)
	}
	p := filepath.Join(root, "usr/local/bin/executor-web")
	b, err := os.ReadFile(p)
	if err != nil || !strings.HasPrefix(string(b), "#!/bin/sh\n") || !strings.Contains(string(b), "exec bun run src/serve.ts") {
		t.Errorf("executor-web = %q, %v; want a #!/bin/sh script that starts the server", b, err)
	}
	if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("executor-web mode %v, %v; want 0755", st.Mode(), err)
	}
	if _, err := os.Stat(filepath.Join(deb, "usr/local/bin/executor-web")); err == nil {
		t.Error("the Debian shape has executor-web")
	}
	if img.Manifests["linux/amd64"] == "" {
		t.Error("no amd64 manifest")
	}
}

// TestShapeDistroless: no shell anywhere in the rootfs, and Bun started
// directly on the bundled server.
func TestShapeDistroless(t *testing.T) {
	root, _, li := shapeTree(t, testimage.ShapeDistroless)
	c := li.config.Config
	if len(c.Entrypoint) != 0 || !cmp.Equal(c.Cmd, []string{"bun", "run", "dist-server/serve.js"}) || c.WorkingDir != testimage.AppDir {
		t.Errorf("config Entrypoint %q Cmd %q WorkingDir %q, want none, [bun run dist-server/serve.js], %s", c.Entrypoint, c.Cmd, c.WorkingDir, testimage.AppDir)
	}
	if !strings.Contains(li.config.History[0].CreatedBy, "distroless") {
		t.Errorf("history %q does not say distroless", li.config.History[0].CreatedBy)
	}
	if _, err := os.Stat(filepath.Join(root, "app/apps/host-selfhost/dist-server/serve.js")); err != nil {
		t.Errorf("bundled server: %v", err)
	}
	shells := regexp.MustCompile(`^(sh|bash|dash|ash|zsh|busybox|docker-entrypoint\.sh)$`)
	shebangShell := regexp.MustCompile(`^#!\s*\S*/(sh|bash|dash|ash|zsh|busybox)\b`)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "bin" || rel == "usr/bin" || rel == "sbin" {
			t.Errorf("the rootfs has /%s", rel)
		}
		if shells.MatchString(d.Name()) || strings.HasSuffix(d.Name(), ".sh") {
			t.Errorf("the rootfs has a shell or shell script: /%s", rel)
		}
		// The fake Bun of this test is a script; the image's is Bun's ELF.
		if d.Type().IsRegular() && rel != "usr/local/bin/bun" {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if shebangShell.Match(b) {
				t.Errorf("/%s is a shell script: %q", rel, bytes.SplitN(b, []byte("\n"), 2)[0])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestShapeRejected(t *testing.T) {
	_, err := testimage.BuildLayout(t.TempDir(), testimage.Options{BunTarballs: fakeBunTarballs(t), Shape: "alpine"})
	if err == nil || !strings.Contains(err.Error(), `shape "alpine"`) {
		t.Fatalf("BuildLayout(shape alpine) = %v, want a refusal naming the shape", err)
	}
}
