package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testimage"
)

// rewriteArchive copies the plain .tar.gz src to a new file with its
// manifest edited, as anyone who can write an archive can.
func rewriteArchive(t *testing.T, src string, edit func(m map[string]any)) string {
	t.Helper()
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	tw := tar.NewWriter(zw)
	for first := true; ; first = false {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if first {
			var m map[string]any
			if err := json.Unmarshal(body, &m); err != nil {
				t.Fatal(err)
			}
			edit(m)
			if body, err = json.Marshal(m); err != nil {
				t.Fatal(err)
			}
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "edited.tar.gz")
	if err := os.WriteFile(dst, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return dst
}

// namesImage edits a manifest to name image with a matching index digest
// (the three fields issue 25 rewrote).
func namesImage(image string) func(map[string]any) {
	return func(m map[string]any) {
		_, idx, _ := strings.Cut(image, "@")
		m["image"], m["index_digest"] = image, idx
		delete(m, "manifest_digest")
	}
}

// TestRestoreUnauthenticatedArchiveE2E is issue 25 item 1's repro: a
// plain archive (hbx backup --no-encrypt) whose manifest names the image
// of another repository, which hbx restore installed, pinned and would
// have run as root. Now: another repository is refused even with
// --accept-image; another release of the configured repository only with
// --accept-image naming it; a manifest that contradicts itself (item 3)
// is refused; each refusal is one line and changes nothing (data, config,
// runtime, no journal); hbx backup verify says what a restore would do.
func TestRestoreUnauthenticatedArchiveE2E(t *testing.T) {
	requireE2E(t)
	reg, _, v1 := pushed(t)
	b := newBox(t, reg, v1, nil, "")
	if r := b.hbx("install"); r.code != 0 {
		t.Fatalf("hbx install = %d\n%s", r.code, r.stderr)
	}
	pass := filepath.Join(b.dir, "backup.pass")
	writeFile(t, pass, "correct horse battery staple\n", 0o600)
	appendConfig(t, b, fmt.Sprintf("backup:\n  dir: %s\n  passphrase_file: %s\n", filepath.Join(b.dir, "backups"), pass))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	img := versionImage(t, "2.0.0")
	push := func(name string) string {
		d, err := testimage.Push(ctx, img.Dir, reg.Host()+"/"+name+":v2.0.0")
		if err != nil {
			t.Fatal(err)
		}
		return reg.Host() + "/" + name + ":v2.0.0@" + d.String()
	}
	foreign, other := push("evil/payload"), push("rhyssullivan/executor-selfhost")

	if err := os.MkdirAll(b.dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(b.dataDir, "generation"), "archived", 0o600)
	r := b.hbx("backup", "--no-encrypt", "--json")
	if r.code != 0 {
		t.Fatalf("hbx backup --no-encrypt = %d\n%s", r.code, r.stderr)
	}
	plain := lastJSON(t, r.stdout)["path"].(string)
	writeFile(t, filepath.Join(b.dataDir, "generation"), "live", 0o600)
	cfgBefore, active := readFile(t, b.config), b.activeVersion()

	_, v1Index, _ := strings.Cut(v1, "@")
	for _, tc := range []struct {
		name   string
		edit   func(map[string]any)
		accept string
		want   string // in the one-line refusal
	}{
		{"another repository", namesImage(foreign), "", "which this box does not run"},
		{"another repository, accepted", namesImage(foreign), foreign, "which this box does not run"},
		{"another release, not accepted", namesImage(other), "", "--accept-image " + other},
		{"image and index digest disagree", func(m map[string]any) { namesImage(other)(m); m["index_digest"] = v1Index }, "", "contradicts itself"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			archive := rewriteArchive(t, plain, tc.edit)
			args := []string{"restore", archive}
			if tc.accept != "" {
				args = append(args, "--accept-image", tc.accept)
			}
			r := b.hbx(args...)
			lines := errorLines(t, r.stderr)
			if r.code == 0 || len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
				t.Errorf("hbx %s = %d, want one error line with %q\n%s%s", strings.Join(args, " "), r.code, tc.want, r.stdout, r.stderr)
			}
			if got := readFile(t, filepath.Join(b.dataDir, "generation")); got != "live" {
				t.Errorf("the data changed: generation %q", got)
			}
			if readFile(t, b.config) != cfgBefore || b.activeVersion() != active {
				t.Errorf("the config or the runtime changed: image %s, active %s", b.configuredImage(), b.activeVersion())
			}
			if _, err := os.Stat(b.dataDir + ".restore.json"); err == nil {
				t.Errorf("a restore journal is left")
			}
			if tc.accept == "" {
				v := b.hbx("backup", "verify", archive)
				damaged := v.code == 1 && strings.Contains(v.stderr, tc.want)
				if !damaged && (v.code != 0 || !strings.Contains(v.stdout, "NOT authenticated") || !strings.Contains(v.stdout, "hbx restore would refuse it")) {
					t.Errorf("hbx backup verify = %d, want it to say the archive is not authenticated and restore would refuse it, or refuse it as damaged\n%s%s", v.code, v.stdout, v.stderr)
				}
			}
		})
	}

	// The operator names the image: the release changes with the data.
	archive := rewriteArchive(t, plain, namesImage(other))
	if v := b.hbx("backup", "verify", archive); !strings.Contains(v.stdout, "hbx restore would refuse it") {
		t.Errorf("hbx backup verify of an archive naming another release says\n%s", v.stdout)
	}
	r = b.hbx("restore", archive, "--accept-image", other)
	if r.code != 0 {
		t.Fatalf("hbx restore --accept-image %s = %d\n%s%s", other, r.code, r.stdout, r.stderr)
	}
	if got := readFile(t, filepath.Join(b.dataDir, "generation")); got != "archived" || b.configuredImage() != other || b.activeVersion() != "2.0.0" {
		t.Errorf("after --accept-image: generation %q, configured %s, active %s; want archived, %s, 2.0.0", got, b.configuredImage(), b.activeVersion(), other)
	}
}
