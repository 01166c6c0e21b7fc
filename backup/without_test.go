package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/release"
)

// The archive's release in these tests (box.options' image) and the one
// the configuration names before the restore.
var (
	archIndex    = digest.Digest("sha256:" + strings.Repeat("a", 64))
	archManifest = digest.FromString("archive's child manifest")
	priorImage   = "127.0.0.1:5000/x:v0@sha256:" + strings.Repeat("b", 64)
)

// stubRuntime is a Runtime whose Install fails with err (for the image
// only when only is set), or else makes the image active in runtimeDir
// (fakeActive).
type stubRuntime struct {
	err        error
	only       string
	runtimeDir string
	installs   []string
}

func (s *stubRuntime) Install(_ context.Context, image, platform string, m digest.Digest) (bool, error) {
	s.installs = append(s.installs, image)
	if s.err != nil && (s.only == "" || s.only == image) {
		return false, s.err
	}
	if m == "" {
		m = digest.FromString(image + " " + platform) // the installer picks the index's child
	}
	fakeActive(nil, s.runtimeDir, image, platform, m)
	return true, nil
}

// pinRecorder is Config recording the pin with its manifest digest.
type pinRecorder struct {
	image    string
	manifest digest.Digest
}

func (p *pinRecorder) Pinned() (string, digest.Digest, error) { return p.image, p.manifest, nil }
func (p *pinRecorder) CanPin() error                          { return nil }
func (p *pinRecorder) Pin(image string, m digest.Digest) error {
	p.image, p.manifest = image, m
	return nil
}

// fakeActive makes a release of image (name:tag@index) with manifest m
// the active one in runtimeDir: its release.json and a runnable program.
func fakeActive(t *testing.T, runtimeDir, image, platform string, m digest.Digest) {
	fail := func(err error) {
		if err != nil {
			if t == nil {
				panic(err)
			}
			t.Fatal(err)
		}
	}
	_, idx, _ := strings.Cut(image, "@")
	dir := filepath.Join(runtimeDir, release.ReleasesDir, m.Encoded())
	fail(os.MkdirAll(filepath.Join(dir, "rootfs/bin"), 0o755))
	fail(os.WriteFile(filepath.Join(dir, "rootfs/bin/payload"), []byte("#!/bin/sh\n"), 0o755))
	meta := release.Meta{Format: release.MetaFormat, Image: image, IndexDigest: digest.Digest(idx), ManifestDigest: m, Platform: platform,
		Config: release.ImageConfig{Cmd: []string{"/bin/payload"}}}
	b, err := json.Marshal(meta)
	fail(err)
	fail(os.WriteFile(filepath.Join(dir, release.MetaFile), b, 0o644))
	link := filepath.Join(runtimeDir, release.CurrentLink)
	_ = os.Remove(link)
	fail(os.Symlink(filepath.Join(release.ReleasesDir, m.Encoded()), link))
}

// withoutRuntimeBox is a box with an archive of v1's data (written by the
// archive's release) and v2's data live, the configuration pinning
// priorImage.
func withoutRuntimeBox(t *testing.T) (b *box, archive string, archived, live []string) {
	b = newBox(t)
	write(t, b.data, "db 0600 archived database", "secret.key 0600 archived key")
	res := b.backup(func(o *Options) { o.PlatformDigest = archManifest })
	archived = withoutRoot(snapshot(t, b.data))
	must(t, os.RemoveAll(b.data))
	must(t, os.Mkdir(b.data, 0o700))
	write(t, b.data, "db 0600 live database")
	return b, res.Path, archived, withoutRoot(snapshot(t, b.data))
}

// TestRestoreWithoutRuntime: when the archive's runtime cannot be fetched
// and no release is active, the data is restored all the same, the
// config file pins the archive's release, the journal records "restored,
// not started" with its digests; Recover neither undoes it nor finishes
// it until that release is active, then finishes it.
func TestRestoreWithoutRuntime(t *testing.T) {
	b, archive, archived, _ := withoutRuntimeBox(t)
	rt := &stubRuntime{err: fmt.Errorf("fetch index: %w: dial tcp 127.0.0.1:5000: connect: connection refused", ErrRuntimeUnavailable), runtimeDir: b.runtime}
	cfg := &pinRecorder{image: priorImage}
	opts := b.restoreOptions(archive)
	opts.Runtime, opts.Config, opts.Platform = rt, cfg, "linux/amd64"
	res, err := Restore(context.Background(), opts)
	if err != nil {
		t.Fatalf("Restore() = %v, want the data restored without its runtime", err)
	}
	image := b.options().Image
	if res.WithoutRuntime != image || res.Healthy || res.RuntimeChanged {
		t.Errorf("result: without_runtime %q healthy %v runtime_changed %v; want %q, false, false", res.WithoutRuntime, res.Healthy, res.RuntimeChanged, image)
	}
	if !strings.Contains(res.NotStartedBecause, "connection refused") {
		t.Errorf("not_started_because %q, want the install's error", res.NotStartedBecause)
	}
	if res.NextSteps != NextSteps(image) {
		t.Errorf("next_steps %q, want NextSteps(%s)", res.NextSteps, image)
	}
	if diff := cmp.Diff(withoutRoot(snapshot(t, b.data)), archived); diff != "" {
		t.Errorf("data after Restore (-got +archived):\n%s", diff)
	}
	if cfg.image != image || cfg.manifest != archManifest {
		t.Errorf("config pin = %s %s, want the archive's %s %s", cfg.image, cfg.manifest, image, archManifest)
	}
	j, err := readJournal(b.data)
	if err != nil || j == nil {
		t.Fatalf("journal = %v, %v; want one", j, err)
	}
	want := &journalAwait{Target: release.Target{Image: image, IndexDigest: archIndex, Platform: "linux/amd64", ManifestDigest: archManifest}}
	if j.Phase != phaseNotStarted || !cmp.Equal(j.Awaiting, want) {
		t.Errorf("journal phase %q awaiting %+v; want %q %+v", j.Phase, j.Awaiting, phaseNotStarted, want)
	}
	p, _ := ReadPendingRestore(b.data)
	if p == nil || p.Unfinished() || !p.NotStarted() || p.Awaiting != image {
		t.Errorf("ReadPendingRestore = %+v; want not started, not unfinished, awaiting %s", p, image)
	}
	var ae *AwaitedError
	if err := AwaitedRuntime(b.data, b.runtime); !errors.As(err, &ae) || ae.Image != image || !strings.Contains(err.Error(), "hbx install") {
		t.Errorf("AwaitedRuntime() = %v; want an *AwaitedError naming %s", err, image)
	}
	// The next recovery (hbx supervise, backup, ...) neither undoes nor
	// finishes it.
	if msg, err := Recover(context.Background(), RecoverOptions{DataDir: b.data, RuntimeDir: b.runtime, Runtime: rt, Config: cfg}); msg != "" || err != nil {
		t.Errorf("Recover() while the runtime is missing = %q, %v; want nothing done", msg, err)
	}
	if diff := cmp.Diff(withoutRoot(snapshot(t, b.data)), archived); diff != "" {
		t.Errorf("data after Recover (-got +archived):\n%s", diff)
	}
	if _, err := os.Stat(journalPath(b.data)); err != nil {
		t.Errorf("journal after Recover: %v, want kept", err)
	}
	// Another release active (not the archive's): still awaited.
	fakeActive(t, b.runtime, priorImage, "linux/amd64", digest.FromString("prior manifest"))
	if err := AwaitedRuntime(b.data, b.runtime); !errors.As(err, &ae) {
		t.Errorf("AwaitedRuntime() with another release active = %v; want *AwaitedError", err)
	}
	// hbx install --from: the archive's release active; the next recovery
	// finishes the restore.
	fakeActive(t, b.runtime, image, "linux/amd64", archManifest)
	if err := AwaitedRuntime(b.data, b.runtime); err != nil {
		t.Errorf("AwaitedRuntime() with the archive's release active = %v; want nil", err)
	}
	msg, err := Recover(context.Background(), RecoverOptions{DataDir: b.data, RuntimeDir: b.runtime})
	if err != nil || !strings.Contains(msg, "finished the restore") {
		t.Errorf("Recover() with the archive's release active = %q, %v; want it finished", msg, err)
	}
	if _, err := os.Stat(journalPath(b.data)); !os.IsNotExist(err) {
		t.Errorf("journal after the finishing Recover: %v, want removed", err)
	}
	if diff := cmp.Diff(withoutRoot(snapshot(t, b.data)), archived); diff != "" {
		t.Errorf("data after the finishing Recover (-got +archived):\n%s", diff)
	}
}

// TestRestoreWithoutRuntimeRefusals: only "could not get the runtime"
// lets a restore go on without it, and over an active release only with
// WithoutRuntime; every other case undoes it as before (nothing changed,
// no journal), and the unavailable one says which flag goes on.
func TestRestoreWithoutRuntimeRefusals(t *testing.T) {
	unavailable := fmt.Errorf("fetch index: %w: lookup registry.example: no such host", ErrRuntimeUnavailable)
	for _, tc := range []struct {
		name        string
		err         error
		active      bool // another release is active before the restore
		without     bool // RestoreOptions.WithoutRuntime
		wantRestore bool
		wantSay     string // in the error
	}{
		{"digest mismatch, no runtime", errors.New("fetch manifest: digest mismatch: the registry served other bytes"), false, true, false, "digest mismatch"},
		{"unavailable, another release active", unavailable, true, false, false, "run hbx restore ARCHIVE --without-runtime"},
		{"unavailable, another release active, --without-runtime", unavailable, true, true, true, ""},
		{"digest mismatch, another release active, --without-runtime", errors.New("digest mismatch"), true, true, false, "restore undone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, archive, archived, live := withoutRuntimeBox(t)
			if tc.active {
				fakeActive(t, b.runtime, priorImage, "linux/amd64", digest.FromString("prior manifest"))
			}
			opts := b.restoreOptions(archive)
			opts.Runtime, opts.Config, opts.Platform, opts.WithoutRuntime = &stubRuntime{err: tc.err, only: b.options().Image, runtimeDir: b.runtime}, &pinRecorder{image: priorImage}, "linux/amd64", tc.without
			res, err := Restore(context.Background(), opts)
			if tc.wantRestore {
				if err != nil || res.WithoutRuntime == "" {
					t.Fatalf("Restore() = %+v, %v; want restored without its runtime", res, err)
				}
				if diff := cmp.Diff(withoutRoot(snapshot(t, b.data)), archived); diff != "" {
					t.Errorf("data (-got +archived):\n%s", diff)
				}
				if err := AwaitedRuntime(b.data, b.runtime); !errors.Is(err, ErrRuntimeAwaited) {
					t.Errorf("AwaitedRuntime() = %v, want ErrRuntimeAwaited", err)
				}
				return
			}
			if say := strings.ReplaceAll(tc.wantSay, "ARCHIVE", ShellWord(archive)); err == nil || !strings.Contains(err.Error(), say) {
				t.Fatalf("Restore() = %v; want a refusal saying %q", err, tc.wantSay)
			}
			if !errors.Is(tc.err, ErrRuntimeUnavailable) && strings.Contains(err.Error(), "--without-runtime") {
				t.Errorf("Restore() = %v; a failure that is not ErrRuntimeUnavailable must not offer --without-runtime", err)
			}
			if diff := cmp.Diff(withoutRoot(snapshot(t, b.data)), live); diff != "" {
				t.Errorf("data after the refusal (-got +live):\n%s", diff)
			}
			if _, err := os.Stat(journalPath(b.data)); !os.IsNotExist(err) {
				t.Errorf("journal after the refusal: %v, want none", err)
			}
		})
	}
}

// TestRecoverInstallsAwaited: with InstallAwaited (executor.install_on_start)
// the recovery installs the archive's release and finishes the restore;
// when that install fails, the journal and the data stay.
func TestRecoverInstallsAwaited(t *testing.T) {
	b, archive, archived, _ := withoutRuntimeBox(t)
	opts := b.restoreOptions(archive)
	opts.Runtime, opts.Config, opts.Platform = &stubRuntime{err: ErrRuntimeUnavailable}, &pinRecorder{image: priorImage}, "linux/amd64"
	if _, err := Restore(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	failing := &stubRuntime{err: fmt.Errorf("still: %w", ErrRuntimeUnavailable)}
	if msg, err := Recover(context.Background(), RecoverOptions{DataDir: b.data, RuntimeDir: b.runtime, Runtime: failing, InstallAwaited: true}); err == nil || msg != "" {
		t.Errorf("Recover() with a failing install = %q, %v; want the install's error", msg, err)
	}
	if _, err := os.Stat(journalPath(b.data)); err != nil {
		t.Errorf("journal after a failed install: %v, want kept", err)
	}
	rt := &stubRuntime{runtimeDir: b.runtime}
	msg, err := Recover(context.Background(), RecoverOptions{DataDir: b.data, RuntimeDir: b.runtime, Runtime: rt, InstallAwaited: true})
	if err != nil || !strings.Contains(msg, "installed") || !cmp.Equal(rt.installs, []string{b.options().Image}) {
		t.Errorf("Recover() = %q, %v, installs %q; want the archive's release installed and the restore finished", msg, err, rt.installs)
	}
	if err := AwaitedRuntime(b.data, b.runtime); err != nil {
		t.Errorf("AwaitedRuntime() after = %v", err)
	}
	if diff := cmp.Diff(withoutRoot(snapshot(t, b.data)), archived); diff != "" {
		t.Errorf("data (-got +archived):\n%s", diff)
	}
}

// TestRestoreOverNotStarted: a second restore begun over a restore "not
// started" that is then undone (its runtime refused: a digest mismatch)
// puts that journal back, so the data still waits for its runtime
// (AwaitedRuntime) and the next recovery neither undoes nor finishes it;
// one that goes on without its runtime replaces it.
func TestRestoreOverNotStarted(t *testing.T) {
	b, archive, archived, _ := withoutRuntimeBox(t)
	unavailable := fmt.Errorf("fetch index: %w: dial tcp 127.0.0.1:5000: connect: connection refused", ErrRuntimeUnavailable)
	opts := b.restoreOptions(archive)
	opts.Runtime, opts.Config, opts.Platform = &stubRuntime{err: unavailable, runtimeDir: b.runtime}, &pinRecorder{image: priorImage}, "linux/amd64"
	if _, err := Restore(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	first, err := readJournal(b.data)
	if err != nil || first == nil || first.Phase != phaseNotStarted {
		t.Fatalf("journal after the first restore = %+v, %v; want not started", first, err)
	}
	opts.Runtime = &stubRuntime{err: errors.New("fetch manifest: digest mismatch: the registry served other bytes"), runtimeDir: b.runtime}
	if _, err := Restore(context.Background(), opts); err == nil || !strings.Contains(err.Error(), "digest mismatch") {
		t.Fatalf("second Restore() = %v, want it undone over the digest mismatch", err)
	}
	j, err := readJournal(b.data)
	if err != nil || j == nil || j.Phase != phaseNotStarted || !cmp.Equal(j.Awaiting, first.Awaiting) || j.Prior != nil {
		t.Fatalf("journal after the undone second restore = %+v, %v; want the first's back (not started, awaiting %+v)", j, err, first.Awaiting)
	}
	var ae *AwaitedError
	if err := AwaitedRuntime(b.data, b.runtime); !errors.As(err, &ae) || ae.Image != first.Awaiting.Image {
		t.Errorf("AwaitedRuntime() after the undone second restore = %v; want an *AwaitedError naming %s", err, first.Awaiting.Image)
	}
	if msg, err := Recover(context.Background(), RecoverOptions{DataDir: b.data, RuntimeDir: b.runtime}); msg != "" || err != nil {
		t.Errorf("Recover() = %q, %v; want nothing done", msg, err)
	}
	if diff := cmp.Diff(withoutRoot(snapshot(t, b.data)), archived); diff != "" {
		t.Errorf("data (-got +archived):\n%s", diff)
	}
	// A second restore killed while staging (its journal over the first):
	// the next recovery removes its staging and puts the first's journal
	// back.
	killed := &journal{Phase: phaseStaging, Started: first.Started.Add(time.Minute), Archive: archive, Prior: first}
	must(t, killed.write(b.data))
	if msg, err := Recover(context.Background(), RecoverOptions{DataDir: b.data, RuntimeDir: b.runtime}); err != nil || !strings.Contains(msg, "removed the staging") {
		t.Errorf("Recover() after a second restore killed while staging = %q, %v; want its staging removed", msg, err)
	}
	if j, err := readJournal(b.data); err != nil || j == nil || j.Phase != phaseNotStarted || !j.Started.Equal(first.Started) {
		t.Errorf("journal after recovering the killed second restore = %+v, %v; want the first's back", j, err)
	}
	// A second restore that goes on without its runtime replaces it.
	opts.Runtime = &stubRuntime{err: unavailable, runtimeDir: b.runtime}
	if _, err := Restore(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	if j, err := readJournal(b.data); err != nil || j == nil || j.Phase != phaseNotStarted || j.Prior != nil || j.Started.Equal(first.Started) {
		t.Errorf("journal after a second restore not started = %+v, %v; want its own, no prior", j, err)
	}
}

// TestRecoverRefusesTamperedAwaited: with InstallAwaited, a journal whose
// awaited release is not the one the config file pins (the journal edited
// to name another image or manifest) installs nothing: the recovery fails
// naming both, the journal and the data stay.
func TestRecoverRefusesTamperedAwaited(t *testing.T) {
	for name, tamper := range map[string]func(a *journalAwait){
		"image": func(a *journalAwait) {
			a.Image, a.IndexDigest = "127.0.0.1:5000/other:v9@sha256:"+strings.Repeat("c", 64), digest.Digest("sha256:"+strings.Repeat("c", 64))
		},
		"manifest": func(a *journalAwait) { a.ManifestDigest = digest.FromString("another manifest") },
	} {
		t.Run(name, func(t *testing.T) {
			b, archive, archived, _ := withoutRuntimeBox(t)
			cfg := &pinRecorder{image: priorImage}
			opts := b.restoreOptions(archive)
			opts.Runtime, opts.Config, opts.Platform = &stubRuntime{err: ErrRuntimeUnavailable}, cfg, "linux/amd64"
			if _, err := Restore(context.Background(), opts); err != nil {
				t.Fatal(err)
			}
			j, err := readJournal(b.data)
			if err != nil || j == nil || j.Awaiting == nil {
				t.Fatalf("journal = %+v, %v", j, err)
			}
			tamper(j.Awaiting)
			must(t, j.write(b.data))
			rt := &stubRuntime{runtimeDir: b.runtime}
			msg, err := Recover(context.Background(), RecoverOptions{DataDir: b.data, RuntimeDir: b.runtime, Runtime: rt, Config: cfg, InstallAwaited: true})
			if err == nil || msg != "" || len(rt.installs) != 0 || !strings.Contains(err.Error(), cfg.image) || strings.Contains(err.Error(), "\n") {
				t.Errorf("Recover() over a tampered journal = %q, %v, installs %q; want one line naming the pinned %s, nothing installed", msg, err, rt.installs, cfg.image)
			}
			if got, err := readJournal(b.data); err != nil || got == nil || got.Phase != phaseNotStarted {
				t.Errorf("journal after = %+v, %v; want kept", got, err)
			}
			if diff := cmp.Diff(withoutRoot(snapshot(t, b.data)), archived); diff != "" {
				t.Errorf("data (-got +archived):\n%s", diff)
			}
		})
	}
}

// TestRestorePlainArchiveWithoutRuntime is issue 17's case: a plain
// `tar -czf` archive (no manifest naming a release) on a box with no
// runtime whose registry cannot be reached. The data is restored with
// nothing started, awaiting the configured release (the one the
// archive is restored for); with another release active, the refusal
// names --without-runtime, and that flag then restores it the same way.
func TestRestorePlainArchiveWithoutRuntime(t *testing.T) {
	for _, active := range []bool{false, true} {
		t.Run(fmt.Sprintf("active=%v", active), func(t *testing.T) {
			b := newBox(t)
			write(t, b.data, "db 0600 archived database")
			plain := filepath.Join(t.TempDir(), "data.tar.gz")
			sh(t, `tar -czf "$T" -C "$D" .`, "T="+plain, "D="+b.data)
			must(t, os.RemoveAll(b.data))
			must(t, os.Mkdir(b.data, 0o700))
			write(t, b.data, "db 0600 live database")
			image := b.options().Image
			if active {
				fakeActive(t, b.runtime, priorImage, "linux/amd64", digest.FromString("prior manifest"))
			}
			// The configured image (Install's "") cannot be fetched; the
			// active one re-activates (undo).
			rt := configuredUnavailable{}
			cfg := &pinRecorder{image: image, manifest: archManifest}
			opts := b.restoreOptions(plain)
			opts.Runtime, opts.Config, opts.Image, opts.Platform = rt, cfg, image, "linux/amd64"
			if active {
				_, err := Restore(context.Background(), opts)
				if err == nil || !strings.Contains(err.Error(), "--without-runtime") {
					t.Fatalf("Restore() over another release = %v; want a refusal naming --without-runtime", err)
				}
				opts.WithoutRuntime = true
			}
			res, err := Restore(context.Background(), opts)
			if err != nil {
				t.Fatalf("Restore() = %v, want the data restored without its runtime", err)
			}
			if res.WithoutRuntime != image || res.NextSteps != NextSteps(image) {
				t.Errorf("result: without_runtime %q next_steps %q; want %q and its steps", res.WithoutRuntime, res.NextSteps, image)
			}
			if got, err := os.ReadFile(filepath.Join(b.data, "db")); err != nil || string(got) != "archived database" {
				t.Errorf("db after Restore = %q, %v; want the archived one", got, err)
			}
			j, err := readJournal(b.data)
			want := &journalAwait{Target: release.Target{Image: image, IndexDigest: archIndex, Platform: "linux/amd64", ManifestDigest: archManifest}, Configured: true}
			if err != nil || j == nil || j.Phase != phaseNotStarted || !cmp.Equal(j.Awaiting, want) {
				t.Fatalf("journal = %+v, %v; want phase %q awaiting %+v", j, err, phaseNotStarted, want)
			}
			// The message does not say the configured release wrote it.
			if err := AwaitedRuntime(b.data, b.runtime); err == nil || strings.Contains(err.Error(), "which wrote") || !strings.Contains(err.Error(), "the configured release (the archive names none), awaited by the data restored from "+plain) {
				t.Errorf("AwaitedRuntime() = %v; want it to name %s as the configured release awaited by %s", err, image, plain)
			}
			if cfg.image != image || cfg.manifest != archManifest {
				t.Errorf("config pin = %s %s, want the configured %s %s kept", cfg.image, cfg.manifest, image, archManifest)
			}
			// The configured release installed: the next recovery finishes it.
			fakeActive(t, b.runtime, image, "linux/amd64", archManifest)
			if msg, err := Recover(context.Background(), RecoverOptions{DataDir: b.data, RuntimeDir: b.runtime}); err != nil || !strings.Contains(msg, "finished the restore") {
				t.Errorf("Recover() with the configured release active = %q, %v; want it finished", msg, err)
			}
		})
	}
}

// configuredUnavailable is a Runtime that cannot fetch the configured
// image (Install's "": a plain archive names none) and finds any other
// already active.
type configuredUnavailable struct{}

func (configuredUnavailable) Install(_ context.Context, image, _ string, _ digest.Digest) (bool, error) {
	if image == "" {
		return false, fmt.Errorf("fetch index: %w: dial tcp 127.0.0.1:5000: connect: connection refused", ErrRuntimeUnavailable)
	}
	return false, nil
}

// TestRestoreRerun: the commands hints print run as printed: the
// operator's command line (or hbx restore ARCHIVE), the flags added, each
// word quoted for a shell.
func TestRestoreRerun(t *testing.T) {
	img := "registry.example/hermes/executor:1.2@sha256:" + strings.Repeat("a", 64)
	for _, tc := range []struct {
		name string
		opts RestoreOptions
		want string
	}{
		{"default", RestoreOptions{Archive: "/srv/b/x.tar.gz"}, "hbx restore /srv/b/x.tar.gz --without-runtime"},
		{"data only", RestoreOptions{Archive: "x.tar.gz", DataOnly: true}, "hbx restore x.tar.gz --data-only --without-runtime"},
		{"quoted", RestoreOptions{Archive: "/srv/my backup's.tgz"}, `hbx restore '/srv/my backup'\''s.tgz' --without-runtime`},
		{"accepted image kept", RestoreOptions{Archive: "a.tgz", AcceptImage: img}, "hbx restore a.tgz --accept-image " + img + " --without-runtime"},
		{"the operator's command", RestoreOptions{Archive: "a.tgz", Command: "hbx restore a.tgz --config /etc/x.yaml", AcceptImage: img}, "hbx restore a.tgz --config /etc/x.yaml --accept-image " + img + " --without-runtime"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.opts.rerun(withoutRuntimeFlags(tc.opts)...); got != tc.want {
				t.Errorf("rerun() = %q, want %q", got, tc.want)
			}
		})
	}
}
