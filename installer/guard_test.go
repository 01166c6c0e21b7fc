package installer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/release"
)

// guardRelease writes releases/<hex of manifest>/release.json for image
// and points current at it; a bad meta ("{") makes it unreadable.
func guardRelease(t *testing.T, runtimeDir, image string, manifest digest.Digest, readable bool) {
	t.Helper()
	ref, err := ParseReference(image)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(runtimeDir, release.ReleasesDir, manifest.Encoded())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(release.Meta{Format: release.MetaFormat, Image: image, IndexDigest: ref.Digest(), ManifestDigest: manifest, Platform: "linux/amd64"})
	if !readable {
		b = []byte("{")
	}
	if err := os.WriteFile(filepath.Join(dir, release.MetaFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(release.ReleasesDir+"/"+manifest.Encoded(), filepath.Join(runtimeDir, release.CurrentLink)); err != nil {
		t.Fatal(err)
	}
}

// TestGuard: Guard's table of what an install may do to the active release
// under the data, each refusal naming the way out.
func TestGuard(t *testing.T) {
	const (
		v1 = "reg.test/executor:v1@sha256:1111111111111111111111111111111111111111111111111111111111111111"
		v2 = "reg.test/executor:v2@sha256:2222222222222222222222222222222222222222222222222222222222222222"
	)
	m1 := digest.Digest("sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	m2 := digest.Digest("sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb")
	nothing := func() (string, error) { return "", nil }
	running := func() (string, error) { return "the supervisor reports executor RUNNING", nil }
	tests := []struct {
		name     string
		active   string // "", "v1", "v2", "bad-v1" (unreadable, not pinned), "bad-v2" (unreadable, pinned)
		data     bool
		runs     func() (string, error)
		backup   bool
		from     string // Options.From
		want     Change
		wantErrs []string // substrings; nil: no error
	}{
		{name: "first install", runs: running, want: KeepActive},
		{name: "same release while running", active: "v2", data: true, runs: running, want: KeepActive},
		{name: "unreadable pinned release is repaired", active: "bad-v2", data: true, runs: running, want: KeepActive},
		{name: "change while running", active: "v1", data: true, runs: running, backup: true,
			wantErrs: []string{"refuse to change the active release from " + v1 + " to " + v2 + " while Executor runs (the supervisor reports executor RUNNING)", "use hbx upgrade --image " + v2}},
		{name: "change while running, from a local image", active: "v1", data: true, runs: running, from: "/media/x.tar",
			wantErrs: []string{"use hbx upgrade --image " + v2 + " --from /media/x.tar, which"}},
		{name: "change in the supervisor, no data", active: "v1", want: ReplaceActive},
		{name: "change without data", active: "v1", runs: nothing, want: ReplaceActive},
		{name: "change over data with a backup", active: "v1", data: true, runs: nothing, backup: true, want: SwitchActive},
		{name: "change over data without a backup", active: "v1", data: true, runs: nothing,
			wantErrs: []string{"without a pre-change backup: set backup.passphrase_file"}},
		{name: "unknown release while running", active: "bad-v1", runs: running,
			wantErrs: []string{"refuse to change the active release to " + v2 + " while Executor runs", "the active release cannot be read"}},
		{name: "unknown release over data", active: "bad-v1", data: true, runs: nothing,
			wantErrs: []string{"the runtime the data was written by is unknown", "pin that release's manifest"}},
		{name: "unknown release without data", active: "bad-v1", runs: nothing, want: ReplaceActive},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			runtimeDir, dataDir := filepath.Join(root, "runtime"), filepath.Join(root, "data")
			if err := os.MkdirAll(runtimeDir, 0o755); err != nil {
				t.Fatal(err)
			}
			switch tt.active {
			case "v1":
				guardRelease(t, runtimeDir, v1, m1, true)
			case "v2":
				guardRelease(t, runtimeDir, v2, m2, true)
			case "bad-v1":
				guardRelease(t, runtimeDir, v1, m1, false)
			case "bad-v2":
				guardRelease(t, runtimeDir, v2, m2, false)
			}
			if tt.data {
				if err := os.MkdirAll(dataDir, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dataDir, "data.db"), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			opts := Options{Image: v2, Platform: "linux/amd64", PlatformDigest: m2, RuntimeDir: runtimeDir, From: tt.from}
			got, err := Guard(opts, GuardInput{DataDir: dataDir, Runs: tt.runs, CanBackUp: tt.backup})
			if tt.wantErrs == nil {
				if err != nil || got != tt.want {
					t.Fatalf("Guard() = %v, %v; want %v, nil", got, err, tt.want)
				}
				return
			}
			if !errors.Is(err, ErrChangeRefused) {
				t.Fatalf("Guard() = %v, %v; want ErrChangeRefused", got, err)
			}
			for _, w := range tt.wantErrs {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Guard() error = %v, want it to contain %q", err, w)
				}
			}
		})
	}
}

// TestGuardRunsError: an error asking what runs is returned as is.
func TestGuardRunsError(t *testing.T) {
	runtimeDir := t.TempDir()
	m1 := digest.Digest("sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	guardRelease(t, runtimeDir, "reg.test/executor:v1@sha256:1111111111111111111111111111111111111111111111111111111111111111", m1, true)
	boom := errors.New("boom")
	opts := Options{Image: "reg.test/executor:v2@sha256:2222222222222222222222222222222222222222222222222222222222222222", Platform: "linux/amd64", RuntimeDir: runtimeDir}
	if _, err := Guard(opts, GuardInput{DataDir: t.TempDir(), Runs: func() (string, error) { return "", boom }}); !errors.Is(err, boom) {
		t.Errorf("Guard() = %v, want boom", err)
	}
}
