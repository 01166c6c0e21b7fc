package release

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/internal/atomicfile"
)

// pruneChildEnv makes the test binary a child that prunes the runtime
// directory the variable names, so a test can kill it with -9.
const pruneChildEnv = "HBXTEST_PRUNE_CHILD"

func TestMain(m *testing.M) {
	if rd := os.Getenv(pruneChildEnv); rd != "" {
		if _, err := Prune(rd, true, nil, slog.New(slog.DiscardHandler)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// prunableRelease writes releases/<hex of name> with a release.json naming
// index, manifest, config and one layer blob of its own (blob content
// "<name>-<what>", written to the blob store) and files regular files
// of 4 KiB under rootfs; it returns the manifest hex.
func prunableRelease(t *testing.T, rd, name string, files int) string {
	t.Helper()
	blob := func(what string) digest.Digest {
		b := []byte(name + "-" + what)
		d := digest.FromBytes(b)
		p := filepath.Join(rd, BlobsDir, "sha256", d.Encoded())
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return d
	}
	m := Meta{Format: MetaFormat, Image: "reg.example/x:" + name + "@" + digest.FromString(name+"-index").String(),
		IndexDigest: blob("index"), ManifestDigest: blob("manifest"), ConfigDigest: blob("config"),
		Platform: "linux/amd64", Layers: []digest.Digest{blob("layer")}}
	dir := filepath.Join(rd, ReleasesDir, m.ManifestDigest.Encoded())
	for i := range files {
		p := filepath.Join(dir, RootfsDir, fmt.Sprintf("d%d", i%10), fmt.Sprintf("f%d", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, 4096), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := json.Marshal(m)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, MetaFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return m.ManifestDigest.Encoded()
}

func linkAs(t *testing.T, rd, link, hex string) {
	t.Helper()
	os.Remove(filepath.Join(rd, link))
	if err := os.Symlink(filepath.Join(ReleasesDir, hex), filepath.Join(rd, link)); err != nil {
		t.Fatal(err)
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestPruneKeeps: Prune keeps current, previous and what keep wants,
// removes every other release with the blobs only it listed, and says
// what it freed; a second run has nothing to remove.
func TestPruneKeeps(t *testing.T) {
	rd := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	a, b, c, d := prunableRelease(t, rd, "a", 20), prunableRelease(t, rd, "b", 20), prunableRelease(t, rd, "c", 20), prunableRelease(t, rd, "d", 20)
	linkAs(t, rd, CurrentLink, d)
	linkAs(t, rd, PreviousLink, c)
	nBlobs, _ := CompleteBlobs(filepath.Join(rd, BlobsDir))
	keepB := func(m Meta) bool { return m.ManifestDigest.Encoded() == b }
	p, err := Prune(rd, true, keepB, log)
	if err != nil {
		t.Fatalf("Prune() = %v", err)
	}
	want := []string{b, c, d}
	slices.Sort(want)
	if got := dirNames(t, filepath.Join(rd, ReleasesDir)); !slices.Equal(got, want) {
		t.Errorf("releases after Prune = %q, want %q (a %s removed)", got, want, a)
	}
	if !slices.Equal(p.Releases, []string{a}) || p.Blobs != 4 || p.ReleaseBytes < 20*4096 || p.BlobBytes == 0 {
		t.Errorf("Prune() = %+v, want release a, 4 blobs, at least 80 KiB freed", p)
	}
	if n, _ := CompleteBlobs(filepath.Join(rd, BlobsDir)); n != nBlobs-4 {
		t.Errorf("blobs after Prune = %d, want %d", n, nBlobs-4)
	}
	if !strings.Contains(p.String(), "removed 1 release (") || !strings.Contains(p.String(), "4 blobs") {
		t.Errorf("Pruned.String() = %q, want the release and blobs freed", p)
	}
	if got := dirNames(t, rd); slices.Contains(got, ScratchDir) {
		t.Errorf("runtime directory after Prune = %q, want no %s left", got, ScratchDir)
	}
	if p, err := Prune(rd, true, keepB, log); err != nil || len(p.Releases) != 0 || p.Blobs != 0 || p.String() != "nothing to remove" {
		t.Errorf("second Prune() = %+v (%q), %v; want nothing to remove", p, p, err)
	}
}

// TestPruneFollowsNoLink: a symlink planted under releases/ and a release
// directory owned by another user that holds a symlink out are removed
// without touching what the links name; a releases/ that is itself a
// symlink is refused, nothing removed.
func TestPruneFollowsNoLink(t *testing.T) {
	rd, outside := t.TempDir(), t.TempDir()
	log := slog.New(slog.DiscardHandler)
	precious := filepath.Join(outside, "precious")
	if err := os.WriteFile(precious, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	cur := prunableRelease(t, rd, "cur", 1)
	linkAs(t, rd, CurrentLink, cur)
	other := prunableRelease(t, rd, "other", 3)
	otherDir := filepath.Join(rd, ReleasesDir, other)
	if err := os.Symlink(outside, filepath.Join(otherDir, RootfsDir, "out")); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		filepath.Walk(otherDir, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 65534, 65534) })
	}
	planted := strings.Repeat("e", 64)
	if err := os.Symlink(outside, filepath.Join(rd, ReleasesDir, planted)); err != nil {
		t.Fatal(err)
	}
	p, err := Prune(rd, true, nil, log)
	if err != nil {
		t.Fatalf("Prune() = %v", err)
	}
	if got := dirNames(t, filepath.Join(rd, ReleasesDir)); !slices.Equal(got, []string{cur}) {
		t.Errorf("releases after Prune = %q, want only current %s", got, cur)
	}
	if b, err := os.ReadFile(precious); err != nil || string(b) != "keep me" {
		t.Errorf("the file a link named = %q, %v; want it untouched", b, err)
	}
	if len(p.Releases) != 2 {
		t.Errorf("Prune() removed %q, want the planted link and the other user's release", p.Releases)
	}

	// releases/ itself a symlink: refused.
	rd2 := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(rd2, ReleasesDir)); err != nil {
		t.Fatal(err)
	}
	if _, err := Prune(rd2, true, nil, log); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("Prune() over a releases symlink = %v, want a refusal", err)
	}
	if _, err := os.Stat(precious); err != nil {
		t.Errorf("Prune over a releases symlink removed %s: %v", precious, err)
	}
}

// TestPruneKilledConverges kills a pruning child with -9 at random
// moments: every release left under releases/ is whole (its files all
// there), and the next Prune leaves only current and previous and no
// scratch directory.
func TestPruneKilledConverges(t *testing.T) {
	const files, rounds = 500, 6
	midway := 0
	for round := range rounds {
		rd := t.TempDir()
		cur, prev := prunableRelease(t, rd, "cur", 1), prunableRelease(t, rd, "prev", 1)
		victims := []string{prunableRelease(t, rd, "v1", files), prunableRelease(t, rd, "v2", files)}
		linkAs(t, rd, CurrentLink, cur)
		linkAs(t, rd, PreviousLink, prev)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), pruneChildEnv+"="+rd)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		// Kill a random moment after the first release went aside (or at
		// once when the child is done first): the window a plain
		// RemoveAll under releases/ would leave half a release in.
		waitRemoving(rd, victims, exited)
		time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
		cmd.Process.Signal(syscall.SIGKILL)
		<-exited
		if aside, _ := filepath.Glob(filepath.Join(rd, ScratchDir, asidePrefix+"*")); len(aside) > 0 {
			midway++
		}
		for _, v := range victims {
			dir := filepath.Join(rd, ReleasesDir, v)
			if _, err := os.Lstat(dir); os.IsNotExist(err) {
				continue
			}
			n := 0
			filepath.WalkDir(filepath.Join(dir, RootfsDir), func(_ string, d os.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					n++
				}
				return nil
			})
			if _, err := Open(dir); err != nil || n != files {
				t.Errorf("round %d: %s after kill -9 has %d of %d files (release.json: %v): a half-removed release under releases/", round, v, n, files, err)
			}
		}
		if _, err := Prune(rd, true, nil, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatalf("round %d: Prune after kill = %v", round, err)
		}
		want := []string{cur, prev}
		slices.Sort(want)
		if got := dirNames(t, filepath.Join(rd, ReleasesDir)); !slices.Equal(got, want) {
			t.Errorf("round %d: releases after the next Prune = %q, want %q", round, got, want)
		}
		if got := dirNames(t, rd); slices.Contains(got, ScratchDir) {
			t.Errorf("round %d: runtime directory = %q, want no %s", round, got, ScratchDir)
		}
	}
	t.Logf("%d of %d kills landed while a release was half deleted aside", midway, rounds)
}

// waitRemoving polls until the removal of one of the victims of rd has
// begun (its release.json or its first file is gone from under
// releases/), or exited is closed.
func waitRemoving(rd string, victims []string, exited <-chan struct{}) {
	for {
		select {
		case <-exited:
			return
		default:
		}
		for _, v := range victims {
			dir := filepath.Join(rd, ReleasesDir, v)
			for _, p := range []string{filepath.Join(dir, MetaFile), filepath.Join(dir, RootfsDir, "d0", "f0")} {
				if _, err := os.Lstat(p); err != nil {
					return
				}
			}
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestPruneBlobsFigures: PruneBlobs returns the complete blobs it removed
// and their bytes (a temporary goes too, uncounted): with keepBlobs only
// those no release lists, without it the whole store; Prune reports the
// same figures.
func TestPruneBlobsFigures(t *testing.T) {
	for _, tc := range []struct {
		name      string
		keepBlobs bool
		prune     bool // through Prune, not PruneBlobs
		left      int  // complete blobs left: release a's four, or none
	}{
		{"keep blobs", true, false, 4},
		{"no blob cache", false, false, 0},
		{"through Prune", true, true, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rd := t.TempDir()
			a := prunableRelease(t, rd, "a", 1)
			linkAs(t, rd, CurrentLink, a)
			dir := filepath.Join(rd, BlobsDir, "sha256")
			for _, n := range []int{10, 20, 30} {
				b := make([]byte, n)
				if err := os.WriteFile(filepath.Join(dir, digest.FromBytes(b).Encoded()), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(dir, atomicfile.TempPrefix+"partial"), make([]byte, 1000), 0o644); err != nil {
				t.Fatal(err)
			}
			allN, allSize := CompleteBlobs(filepath.Join(rd, BlobsDir))
			wantN, wantSize := 3, int64(60)
			if !tc.keepBlobs {
				wantN, wantSize = allN, allSize
			}
			var n int
			var size int64
			if tc.prune {
				p, err := Prune(rd, tc.keepBlobs, nil, slog.New(slog.DiscardHandler))
				if err != nil {
					t.Fatalf("Prune() = %v", err)
				}
				n, size = p.Blobs, p.BlobBytes
			} else {
				n, size = PruneBlobs(rd, tc.keepBlobs, slog.New(slog.DiscardHandler))
			}
			if n != wantN || size != wantSize {
				t.Errorf("removed %d blobs, %d bytes; want %d, %d", n, size, wantN, wantSize)
			}
			if left, _ := CompleteBlobs(filepath.Join(rd, BlobsDir)); left != tc.left {
				t.Errorf("%d blobs left, want %d", left, tc.left)
			}
			if _, err := os.Stat(filepath.Join(dir, atomicfile.TempPrefix+"partial")); !os.IsNotExist(err) {
				t.Errorf("temporary after pruning: %v, want it removed", err)
			}
		})
	}
}
