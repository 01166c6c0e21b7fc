package ociarchive

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/hermesbox/hbx/internal/testenv"
)

// testStore builds a blob directory holding a two-platform index, the
// amd64 child manifest, its config and two layers; it returns the store,
// the index and manifest digests and the blobs' bytes by digest.
func testStore(t *testing.T) (Dir, digest.Digest, digest.Digest, map[digest.Digest][]byte) {
	t.Helper()
	dir := t.TempDir()
	blobs := map[digest.Digest][]byte{}
	put := func(b []byte) v1.Descriptor {
		d := digest.FromBytes(b)
		blobs[d] = b
		p := filepath.Join(dir, "sha256", d.Encoded())
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return v1.Descriptor{Digest: d, Size: int64(len(b))}
	}
	mustJSON := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cfg := put([]byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}`))
	cfg.MediaType = v1.MediaTypeImageConfig
	l1 := put(bytes.Repeat([]byte("layer one "), 5000))
	l1.MediaType = v1.MediaTypeImageLayerGzip
	l2 := put([]byte("layer two"))
	l2.MediaType = v1.MediaTypeImageLayerGzip
	m := mustJSON(v1.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: v1.MediaTypeImageManifest, Config: cfg, Layers: []v1.Descriptor{l1, l2}})
	md := put(m)
	idx := mustJSON(map[string]any{
		"schemaVersion": 2, "mediaType": v1.MediaTypeImageIndex,
		"manifests": []map[string]any{
			{"mediaType": v1.MediaTypeImageManifest, "digest": md.Digest, "size": md.Size, "platform": map[string]string{"os": "linux", "architecture": "amd64"}},
			{"mediaType": v1.MediaTypeImageManifest, "digest": digest.FromString("never fetched"), "size": 7, "platform": map[string]string{"os": "linux", "architecture": "arm64"}},
		},
	})
	id := put(idx)
	return Dir(dir), id.Digest, md.Digest, blobs
}

// readArchive returns the archive's entries: name to content ("/" suffix
// for directories), checking the deterministic headers.
func readArchive(t *testing.T, b []byte) (map[string]string, []string) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	got := map[string]string{}
	var order []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || h.ModTime.Unix() != 0 {
			t.Errorf("entry %s: uid %d gid %d uname %q gname %q mtime %v, want 0 0 \"\" \"\" epoch", h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime)
		}
		c, _ := io.ReadAll(tr)
		got[h.Name] = string(c)
		order = append(order, h.Name)
	}
	return got, order
}

func TestWriteLayout(t *testing.T) {
	s, id, md, blobs := testStore(t)
	img, err := StoredImage(s, "v1.2.3", id, md)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	st, err := Write(context.Background(), &buf, img, s)
	if err != nil {
		t.Fatal(err)
	}
	got, order := readArchive(t, buf.Bytes())
	var wantBlobBytes int64
	want := map[string]string{"blobs/": "", "blobs/sha256/": "", "oci-layout": `{"imageLayoutVersion":"1.0.0"}`}
	for d, b := range blobs {
		want["blobs/sha256/"+d.Encoded()] = string(b)
		wantBlobBytes += int64(len(b))
	}
	var idx v1.Index
	if err := json.Unmarshal([]byte(got["index.json"]), &idx); err != nil {
		t.Fatalf("parse index.json: %v", err)
	}
	want["index.json"] = got["index.json"]
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("archive entries (-got +want):\n%s", diff)
	}
	wantTop := []v1.Descriptor{{MediaType: v1.MediaTypeImageIndex, Digest: id, Size: int64(len(blobs[id])), Annotations: map[string]string{v1.AnnotationRefName: "v1.2.3"}}}
	if diff := cmp.Diff(idx.Manifests, wantTop); diff != "" {
		t.Errorf("index.json manifests (-got +want):\n%s", diff)
	}
	for i := 1; i < len(order); i++ {
		if order[i-1] >= order[i] {
			t.Errorf("entries out of order: %q before %q", order[i-1], order[i])
		}
	}
	if want := (Stats{Blobs: len(blobs), BlobBytes: wantBlobBytes, Bytes: int64(buf.Len())}); st != want {
		t.Errorf("Write stats = %+v, want %+v", st, want)
	}
}

// TestWriteDeterministic: two archives of one image are byte-identical,
// whatever the blob files' times and the order of Image.Blobs.
func TestWriteDeterministic(t *testing.T) {
	s, id, md, _ := testStore(t)
	img, err := StoredImage(s, "v1", id, md)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
	if _, err := WriteFile(context.Background(), a, img, s); err != nil {
		t.Fatal(err)
	}
	filepath.Walk(string(s), func(p string, _ os.FileInfo, _ error) error {
		return os.Chtimes(p, epoch.AddDate(30, 0, 0), epoch.AddDate(30, 0, 0))
	})
	img.Blobs[1], img.Blobs[len(img.Blobs)-1] = img.Blobs[len(img.Blobs)-1], img.Blobs[1]
	if _, err := WriteFile(context.Background(), b, img, s); err != nil {
		t.Fatal(err)
	}
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if !bytes.Equal(ab, bb) {
		t.Errorf("two archives of one image differ (%d and %d bytes)", len(ab), len(bb))
	}
	if fi, err := os.Stat(a); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("archive mode = %v (%v), want 0644", fi.Mode(), err)
	}
}

// TestWriteFileRefuses: a missing or damaged blob, a missing directory,
// a non-regular file at the path and a cancelled context fail with nothing at the path (and
// no temporary beside it); an existing archive stays as it was.
func TestWriteFileRefuses(t *testing.T) {
	layer := func(img Image) v1.Descriptor { return img.Blobs[len(img.Blobs)-2] }
	tests := []struct {
		name    string
		damage  func(t *testing.T, s Dir, img Image)
		path    func(dir string) string
		cancel  bool // the context is done (Ctrl-C)
		wantErr error
		wantMsg string // in the error, when set
	}{
		{name: "cancelled", cancel: true, wantErr: context.Canceled},
		{name: "missing layer", damage: func(t *testing.T, s Dir, img Image) {
			os.Remove(filepath.Join(string(s), "sha256", layer(img).Digest.Encoded()))
		}, wantErr: ErrMissing},
		{name: "flipped byte in a layer", damage: func(t *testing.T, s Dir, img Image) {
			p := filepath.Join(string(s), "sha256", layer(img).Digest.Encoded())
			b, _ := os.ReadFile(p)
			b[len(b)/2] ^= 1
			os.WriteFile(p, b, 0o600)
		}, wantErr: ErrDigestMismatch},
		{name: "truncated layer", damage: func(t *testing.T, s Dir, img Image) {
			os.Truncate(filepath.Join(string(s), "sha256", layer(img).Digest.Encoded()), 10)
		}, wantErr: ErrDigestMismatch},
		{name: "directory missing", path: func(dir string) string { return filepath.Join(dir, "no", "x.tar") }, wantErr: os.ErrNotExist},
		{name: "directory at path", path: func(dir string) string {
			os.Mkdir(filepath.Join(dir, "d.tar"), 0o755)
			return filepath.Join(dir, "d.tar")
		}, wantErr: ErrNotRegular, wantMsg: "d.tar: not a regular file: it is a directory"},
		{name: "symlink at path", path: func(dir string) string {
			os.Symlink("elsewhere.tar", filepath.Join(dir, "l.tar"))
			return filepath.Join(dir, "l.tar")
		}, wantErr: ErrNotRegular, wantMsg: "l.tar: not a regular file: it is a symlink"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, id, md, _ := testStore(t)
			img, err := StoredImage(s, "v1", id, md)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			path := filepath.Join(dir, "image.tar")
			if tt.path != nil {
				path = tt.path(dir)
			} else if err := os.WriteFile(path, []byte("the old archive"), 0o644); err != nil {
				t.Fatal(err)
			}
			if tt.damage != nil {
				tt.damage(t, s, img)
			}
			before := listDir(t, dir)
			ctx, cancel := context.WithCancel(context.Background())
			if tt.cancel {
				cancel()
			}
			defer cancel()
			_, err = WriteFile(ctx, path, img, s)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("WriteFile() = %v, want %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("WriteFile() = %v, want it to say %q", err, tt.wantMsg)
			}
			if diff := cmp.Diff(listDir(t, dir), before); diff != "" {
				t.Errorf("directory changed by a failed WriteFile (-got +want):\n%s", diff)
			}
			if tt.path == nil {
				if b, _ := os.ReadFile(path); string(b) != "the old archive" {
					t.Errorf("existing archive = %q after a failed write, want it unchanged", b)
				}
			}
		})
	}
}

// TestWriteFileReplaces: an existing regular file at the path is replaced
// by the new archive.
func TestWriteFileReplaces(t *testing.T) {
	s, id, md, _ := testStore(t)
	img, err := StoredImage(s, "v1", id, md)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "image.tar")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := WriteFile(context.Background(), path, img, s)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Size() != st.Bytes || fi.Mode().Perm() != 0o644 {
		t.Errorf("archive = %v (%v), want %d bytes mode 0644", fi, err, st.Bytes)
	}
}

// TestStoredImageRefuses: the top document or the manifest missing,
// damaged, or not listed by the index.
func TestStoredImageRefuses(t *testing.T) {
	s, id, md, _ := testStore(t)
	if _, err := StoredImage(s, "v1", id, digest.FromString("other")); err == nil {
		t.Error("StoredImage(manifest not in the index) = nil error")
	}
	os.WriteFile(filepath.Join(string(s), "sha256", md.Encoded()), []byte("{}"), 0o600)
	if _, err := StoredImage(s, "v1", id, md); !errors.Is(err, ErrDigestMismatch) {
		t.Errorf("StoredImage(damaged manifest) = %v, want %v", err, ErrDigestMismatch)
	}
	os.Remove(filepath.Join(string(s), "sha256", id.Encoded()))
	if _, err := StoredImage(s, "v1", id, md); !errors.Is(err, ErrMissing) {
		t.Errorf("StoredImage(missing index) = %v, want %v", err, ErrMissing)
	}
}

// listDir lists dir's entries with their sizes.
func listDir(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, e := range ents {
		fi, _ := e.Info()
		out[e.Name()] = fi.Size()
	}
	return out
}

// TestStoreEntriesNotRegular: a stored blob that is a FIFO, a symlink (to
// a FIFO, /dev/zero or a good copy elsewhere) or a directory is missing
// (ErrMissing, naming it), found without blocking or reading through the
// link, and WriteFile leaves nothing at its path.
func TestStoreEntriesNotRegular(t *testing.T) {
	s, id, md, blobs := testStore(t)
	img, err := StoredImage(s, "v1", id, md)
	if err != nil {
		t.Fatal(err)
	}
	layer := img.Blobs[len(img.Blobs)-1].Digest
	p := filepath.Join(string(s), "sha256", layer.Encoded())
	good := filepath.Join(t.TempDir(), "copy")
	if err := os.WriteFile(good, blobs[layer], 0o600); err != nil {
		t.Fatal(err)
	}
	for name, mk := range map[string]func() error{
		"FIFO":              func() error { return syscall.Mkfifo(p, 0o600) },
		"symlink to a FIFO": func() error { syscall.Mkfifo(p+".fifo", 0o600); return os.Symlink(p+".fifo", p) },
		"symlink /dev/zero": func() error { return os.Symlink("/dev/zero", p) },
		"symlink elsewhere": func() error { return os.Symlink(good, p) },
		"directory":         func() error { return os.Mkdir(p, 0o700) },
	} {
		t.Run(name, func(t *testing.T) {
			os.Remove(p)
			os.Remove(p + ".fifo")
			if err := mk(); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "image.tar")
			done := make(chan error, 1)
			go func() {
				_, err := WriteFile(context.Background(), out, img, s)
				done <- err
			}()
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				t.Fatal("WriteFile still running after a minute: it hangs")
			}
			if !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), layer.String()) || strings.Contains(err.Error(), "\n") {
				t.Errorf("WriteFile(a stored blob that is a %s) = %v, want one line, ErrMissing naming %s", name, err, layer)
			}
			if ents, _ := os.ReadDir(filepath.Dir(out)); len(ents) != 0 {
				t.Errorf("WriteFile left %d entries", len(ents))
			}
		})
	}
}

// TestWriteFileRemovesLeftovers: the temporary file a killed WriteFile
// left beside the archive is removed by the next one; one a live writer
// holds locked, one owned by another user, one of another archive's name
// and a symlink of a leftover's name are left alone.
func TestWriteFileRemovesLeftovers(t *testing.T) {
	s, id, md, _ := testStore(t)
	img, err := StoredImage(s, "v1", id, md)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "image.tar")
	mk := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stale := mk(".tmp-image.tar-0123456789ab")
	live := mk(".tmp-image.tar-00000000000a")
	lf, err := os.Open(live)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	foreign := mk(".tmp-image.tar-00000000000b")
	if err := os.Chown(foreign, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	other := mk(".tmp-other.tar-0123456789ab")
	link := filepath.Join(dir, ".tmp-image.tar-00000000000c")
	if err := os.Symlink(other, link); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteFile(context.Background(), out, img, s); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed write's temporary file is still there: %v", err)
	}
	for _, p := range []string{live, foreign, other, link} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s was removed: %v", filepath.Base(p), err)
		}
	}
}

// TestWriteFileFullDisk: an archive that does not fit its filesystem (a
// 1 MiB tmpfs) fails with one line naming the path and ENOSPC, leaving
// nothing in the directory, and an archive already at the path as it was.
func TestWriteFileFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		// Not a missing prerequisite: root in a container may not mount.
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	s, id, md, _ := testStore(t)
	img, err := StoredImage(s, "v1", id, md)
	if err != nil {
		t.Fatal(err)
	}
	// A 2 MiB layer of random bytes (incompressible; the archive is not
	// compressed anyway) added to the store and the image.
	big := make([]byte, 2<<20)
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	d := digest.FromBytes(big)
	if err := os.WriteFile(filepath.Join(string(s), "sha256", d.Encoded()), big, 0o600); err != nil {
		t.Fatal(err)
	}
	img.Blobs = append(img.Blobs, v1.Descriptor{MediaType: v1.MediaTypeImageLayer, Digest: d, Size: int64(len(big))})
	out := filepath.Join(dir, "image.tar")
	if err := os.WriteFile(out, []byte("the old archive"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = WriteFile(context.Background(), out, img, s)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), out) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("WriteFile() on a full disk = %v, want one line, ENOSPC, naming %s", err, out)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("directory after the failure holds %d entries, want only the old archive", len(ents))
	}
	if b, _ := os.ReadFile(out); string(b) != "the old archive" {
		t.Errorf("the old archive became %d bytes", len(b))
	}
}
