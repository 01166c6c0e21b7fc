package backup

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/testenv"
)

// fileCaps gives p the file capability cap_setuid+ep with setcap
// (libcap2-bin), as a real box would show it.
func fileCaps(t *testing.T, p string) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "setting file capabilities needs root")
	}
	if out, err := exec.Command("setcap", "cap_setuid+ep", p).CombinedOutput(); err != nil {
		t.Fatalf("setcap cap_setuid+ep %s: %v: %s", p, err, out)
	}
	if out, err := exec.Command("getcap", p).Output(); err != nil || !strings.Contains(string(out), "cap_setuid") {
		t.Fatalf("getcap %s = %q, %v; want cap_setuid", p, out, err)
	}
}

// aclUserRead is the system.posix_acl_access value of u::rwx, u:uid:r,
// g::r-x, m::r-x, o::r-x (linux/posix_acl_xattr.h: version 2, then tag,
// perm, id, little-endian).
func aclUserRead(uid uint32) []byte {
	b := []byte{2, 0, 0, 0}
	for _, e := range []struct {
		tag, perm uint16
		id        uint32
	}{{0x01, 7, 0xffffffff}, {0x02, 4, uid}, {0x04, 5, 0xffffffff}, {0x10, 5, 0xffffffff}, {0x20, 5, 0xffffffff}} {
		b = append(b, byte(e.tag), byte(e.tag>>8), byte(e.perm), byte(e.perm>>8), byte(e.id), byte(e.id>>8), byte(e.id>>16), byte(e.id>>24))
	}
	return b
}

// hasXattr reports whether p (not followed) has the attribute name.
func hasXattr(t *testing.T, p, name string) bool {
	t.Helper()
	_, err := unix.Lgetxattr(p, name, nil)
	switch {
	case err == nil:
		return true
	case errors.Is(err, unix.ENODATA):
		return false
	}
	t.Fatalf("getxattr %s %s: %v", p, name, err)
	return false
}

// TestRestoreDropsPrivilegedXattrs: a file capability (security.capability)
// never survives a restore, authenticated or not, nor trusted.* or another
// security.* name; an unauthenticated archive keeps user.* only, an
// authenticated one user.* and POSIX ACLs. What was dropped is said in the
// result's notes.
func TestRestoreDropsPrivilegedXattrs(t *testing.T) {
	requireXattrs(t, t.TempDir())
	tests := []struct {
		name      string
		encrypted bool
		// kept and dropped name the attributes of "tool" after restore.
		kept, dropped []string
	}{
		{"unauthenticated", false, []string{"user.k"}, []string{"security.capability", "trusted.evil", "system.posix_acl_access"}},
		{"authenticated", true, []string{"user.k", "system.posix_acl_access"}, []string{"security.capability", "trusted.evil"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBox(t)
			write(t, b.data, "db 0600 archived")
			tool := filepath.Join(b.data, "tool")
			sh, err := os.ReadFile("/usr/bin/cat")
			must(t, err)
			must(t, os.WriteFile(tool, sh, 0o755))
			fileCaps(t, tool)
			must(t, unix.Setxattr(tool, "trusted.evil", []byte("x"), 0))
			must(t, unix.Setxattr(tool, "user.k", []byte("v"), 0))
			must(t, unix.Setxattr(tool, "system.posix_acl_access", aclUserRead(65533), 0))
			res := b.backup(func(o *Options) { o.Encrypt = tt.encrypted })
			must(t, os.RemoveAll(b.data))
			must(t, os.MkdirAll(b.data, 0o700))
			opts := b.restoreOptions(res.Path)
			opts.Owner = Owner{65534, 65534}
			r, err := Restore(context.Background(), opts)
			if err != nil {
				t.Fatalf("Restore() = %v", err)
			}
			for _, k := range tt.kept {
				if !hasXattr(t, tool, k) {
					t.Errorf("%s lost, want it kept", k)
				}
			}
			notes := strings.Join(r.Notes, "\n")
			for _, k := range tt.dropped {
				if hasXattr(t, tool, k) {
					t.Errorf("%s restored, want it dropped", k)
				}
				if !strings.Contains(notes, k) {
					t.Errorf("notes %q do not name the dropped %s", notes, k)
				}
			}
		})
	}
}

// TestRestoreDropsXattrsWrittenInTheTar: a hand-made plain tar (no
// manifest, so not authenticated) carrying SCHILY.xattr records gets
// user.* only.
func TestRestoreDropsXattrsWrittenInTheTar(t *testing.T) {
	requireXattrs(t, t.TempDir())
	if os.Geteuid() != 0 {
		testenv.Missing(t, "writing trusted.* and security.capability needs root")
	}
	b := newBox(t)
	archive := filepath.Join(t.TempDir(), "hand.tar")
	f, err := os.Create(archive)
	must(t, err)
	tw := tar.NewWriter(f)
	caps := "\x01\x00\x00\x02\x80\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" // v2, effective, cap_setuid
	must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: 0o700, Format: tar.FormatPAX}))
	must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "tool", Mode: 0o755, Size: 2, Format: tar.FormatPAX, PAXRecords: map[string]string{
		xattrPrefix + "security.capability":    caps,
		xattrPrefix + "trusted.overlay.opaque": "y",
		xattrPrefix + "security.selinux":       "system_u:object_r:shadow_t:s0",
		xattrPrefix + "user.k":                 "v",
	}}))
	_, err = tw.Write([]byte("hi"))
	must(t, err)
	must(t, tw.Close())
	must(t, f.Close())
	opts := b.restoreOptions(archive)
	opts.Owner = Owner{65534, 65534}
	if _, err := Restore(context.Background(), opts); err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	tool := filepath.Join(b.data, "tool")
	for _, k := range []string{"security.capability", "trusted.overlay.opaque", "security.selinux"} {
		if k != "security.selinux" && hasXattr(t, tool, k) { // an SELinux host labels every file itself
			t.Errorf("%s restored from a plain tar", k)
		}
	}
	if !hasXattr(t, tool, "user.k") {
		t.Errorf("user.k lost")
	}
}

// TestRestorePlainArchiveSymlinkThroughSymlink: a symlink whose target
// stays inside lexically but climbs through another symlink is refused
// from an unauthenticated archive, nothing changed; one that resolves
// inside is restored. hbx backup verify's plan (PlanVerified) says so
// beforehand.
func TestRestorePlainArchiveSymlinkThroughSymlink(t *testing.T) {
	deep := "a/b/c/d/e/f/g/h"
	ups := strings.TrimSuffix(strings.Repeat("../", strings.Count(deep, "/")+1), "/")
	tests := []struct {
		name    string
		links   [][2]string // path, target
		wantErr error
	}{
		{"escapes through a symlink", [][2]string{{deep + "/top", ups}, {"esc", deep + "/top/" + ups + "/etc/shadow"}}, ErrImageRefused},
		{"climbs an absolute symlink", [][2]string{{"sys", "/etc"}, {"esc", "sys/../etc/shadow"}}, ErrImageRefused},
		{"loop", [][2]string{{"x", "y"}, {"y", "x"}}, ErrImageRefused},
		{"stays inside through a symlink", [][2]string{{deep + "/top", ups}, {"ok", deep + "/top/db"}}, nil},
		{"dangling inside", [][2]string{{"gone", "a/missing"}}, nil},
		{"climbs lexically from a missing name", [][2]string{{"gone", "missing/../../x"}}, ErrImageRefused},
		{"climbs back in from a missing name", [][2]string{{"gone", "missing/../db"}}, nil},
		{"climbs lexically", [][2]string{{"a/up", "../../x"}}, ErrImageRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBox(t)
			write(t, b.data, "db 0600 archived", deep+"/ 0700")
			for _, l := range tt.links {
				must(t, os.Symlink(l[1], filepath.Join(b.data, l[0])))
			}
			res := b.backup(func(o *Options) { o.Encrypt = false })
			must(t, os.WriteFile(b.data+"/db", []byte("live"), 0o600))
			for _, l := range tt.links {
				must(t, os.Remove(filepath.Join(b.data, l[0])))
			}
			opts := b.restoreOptions(res.Path)
			opts.Owner = Owner{65534, 65534}
			vres, err := Verify(context.Background(), res.Path, nil)
			if err != nil {
				t.Fatalf("Verify() = %v", err)
			}
			if perr := PlanVerified(opts, vres).Err(); !errors.Is(perr, tt.wantErr) || (perr == nil) != (tt.wantErr == nil) {
				t.Errorf("PlanVerified().Err() = %v, want %v (symlinks out: %q)", perr, tt.wantErr, vres.SymlinksOut)
			}
			_, err = Restore(context.Background(), opts)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("Restore() = %v, want %v", err, tt.wantErr)
			}
			want := "archived"
			if err != nil {
				want = "live"
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("Restore() error has several lines: %q", err)
				}
			}
			if got, _ := os.ReadFile(b.data + "/db"); string(got) != want {
				t.Errorf("db = %q, want %q", got, want)
			}
			if r, err := filepath.EvalSymlinks(filepath.Join(b.data, "esc")); err == nil && !strings.HasPrefix(r, b.data+"/") {
				t.Errorf("esc resolves to %s, outside %s", r, b.data)
			}
		})
	}
}

// TestRestoreConfiguredDigestUnderAnotherName: an archive naming the
// configured index digest under another repository acts on the configured
// image name (install, awaited runtime), authenticated or not; one from a
// repository the box may not run is refused, nothing changed.
func TestRestoreConfiguredDigestUnderAnotherName(t *testing.T) {
	_, idx, _ := strings.Cut(priorImage, "@")
	tests := []struct {
		name, image string
		encrypted   bool
		wantErr     error
	}{
		{"plain, a mirror's name", "mirror.example/x:v1@" + idx, false, nil},
		{"authenticated, a mirror's name", "mirror.example/x:v1@" + idx, true, nil},
		{"plain, a foreign repository", "evil.example:5000/y:v1@" + idx, false, ErrImageRefused},
		{"authenticated, a foreign repository", "evil.example:5000/y:v1@" + idx, true, ErrImageRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBox(t)
			write(t, b.data, "db 0600 archived database")
			res := b.backup(func(o *Options) { o.Image, o.Encrypt = tt.image, tt.encrypted })
			must(t, os.WriteFile(b.data+"/db", []byte("live"), 0o600))
			rt := &stubRuntime{err: fmt.Errorf("fetch index: %w: connection refused", ErrRuntimeUnavailable), runtimeDir: b.runtime}
			cfg := &pinRecorder{image: priorImage}
			opts := b.restoreOptions(res.Path)
			opts.Runtime, opts.Config, opts.Image, opts.Platform = rt, cfg, priorImage, "linux/amd64"
			opts.AllowedRepository = func(name string) bool { return name == "127.0.0.1:5000/x" || name == "mirror.example/x" }
			_, err := Restore(context.Background(), opts)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("Restore() = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				if len(rt.installs) > 0 {
					t.Errorf("a refused restore installed %q", rt.installs)
				}
				if got, _ := os.ReadFile(b.data + "/db"); string(got) != "live" {
					t.Errorf("db = %q after a refused restore, want the live one", got)
				}
				return
			}
			if got := strings.Join(rt.installs, ","); got != priorImage {
				t.Errorf("installed %q, want the configured %q", got, priorImage)
			}
			j, err := readJournal(b.data)
			if err != nil || j == nil || j.Awaiting == nil {
				t.Fatalf("journal = %+v, %v; want one awaiting the runtime", j, err)
			}
			if j.Awaiting.Image != priorImage {
				t.Errorf("journal awaits %q, want the configured %q", j.Awaiting.Image, priorImage)
			}
			if cfg.image != priorImage {
				t.Errorf("pinned %q, want %q", cfg.image, priorImage)
			}
		})
	}
}
