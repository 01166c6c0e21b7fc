package health

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/hermesbox/hbx/release"
)

// ErrReleaseMismatch is wrapped by the error of Release when the active
// release is not the configured one, or when its recorded manifest or
// config does not hash to its recorded digest.
var ErrReleaseMismatch = errors.New("release mismatch")

// maxDocBytes bounds the manifest and config files Release reads.
const maxDocBytes = 4 << 20

// ReleaseWant is what the active release must be.
type ReleaseWant struct {
	// RuntimeDir is executor.runtime_dir, holding current -> releases/<hex>.
	RuntimeDir string
	// Target is the configured release (config.Config.Release): index
	// digest, platform and, when pinned, child manifest digest.
	release.Target
	// Deep also re-hashes the recorded manifest and config.
	Deep bool
	// Change, when set, returns an error while a release change or
	// restore is half done (its journal unfinished): check release fails
	// with it, whatever current names, since what runs is not confirmed.
	Change func() error
}

// Release checks the active release: current exists and points to
// releases/<hex> named after its recorded manifest digest; its recorded
// index digest, platform and (when pinned) manifest digest equal the
// configured ones; its entry program and working directory exist in the
// rootfs (release.Installed.Program: a few stat calls). With Deep it also
// re-hashes the release's manifest.json and config.json to their recorded
// digests, checks that the manifest names that config and the recorded
// layers, that the config's diff_ids and command are the recorded ones,
// and resolves the program from that verified config. It returns the
// release and nil, or an error wrapping release.ErrNoRelease,
// release.ErrCorrupt or ErrReleaseMismatch (with the release when it
// could be read).
func Release(want ReleaseWant) (*release.Installed, error) {
	inst, err := release.Current(want.RuntimeDir)
	if err != nil {
		return nil, err
	}
	m := inst.Meta
	if base := filepath.Base(inst.Dir); base != m.ManifestDigest.Encoded() {
		return inst, fmt.Errorf("%w: %s records manifest %s", ErrReleaseMismatch, filepath.Join(release.ReleasesDir, base), m.ManifestDigest)
	}
	if err := want.Check(m.Target()); err != nil {
		return inst, fmt.Errorf("%w: %w", ErrReleaseMismatch, err)
	}
	if !want.Deep {
		if _, err := inst.Program(); err != nil {
			return inst, err
		}
		return inst, nil
	}
	cfg, err := verifyDocs(inst)
	if err != nil {
		return inst, err
	}
	verified := *inst
	c := cfg.Config
	verified.Meta.Config.Entrypoint, verified.Meta.Config.Cmd = c.Entrypoint, c.Cmd
	verified.Meta.Config.Env, verified.Meta.Config.WorkingDir = c.Env, c.WorkingDir
	if _, err := verified.Program(); err != nil {
		return inst, err
	}
	return inst, nil
}

// verifyDocs re-hashes the release's manifest.json and config.json and
// checks them against release.json. It returns the verified config.
func verifyDocs(inst *release.Installed) (*v1.Image, error) {
	m := inst.Meta
	manBytes, err := readDoc(inst, release.ManifestFile, m.ManifestDigest)
	if err != nil {
		return nil, err
	}
	var man v1.Manifest
	if err := json.Unmarshal(manBytes, &man); err != nil {
		return nil, fmt.Errorf("%w: parse %s: %w", release.ErrCorrupt, release.ManifestFile, err)
	}
	if man.Config.Digest != m.ConfigDigest {
		return nil, fmt.Errorf("%w: the manifest names config %s, release.json records %s", ErrReleaseMismatch, man.Config.Digest, m.ConfigDigest)
	}
	layers := make([]digest.Digest, len(man.Layers))
	for i, l := range man.Layers {
		layers[i] = l.Digest
	}
	if !slices.Equal(layers, m.Layers) {
		return nil, fmt.Errorf("%w: the manifest's layers differ from those release.json records", ErrReleaseMismatch)
	}
	cfgBytes, err := readDoc(inst, release.ConfigFile, m.ConfigDigest)
	if err != nil {
		return nil, err
	}
	var cfg v1.Image
	if err := json.Unmarshal(cfgBytes, &cfg); err != nil {
		return nil, fmt.Errorf("%w: parse %s: %w", release.ErrCorrupt, release.ConfigFile, err)
	}
	if !slices.Equal(cfg.RootFS.DiffIDs, m.DiffIDs) {
		return nil, fmt.Errorf("%w: the config's diff_ids differ from those release.json records", ErrReleaseMismatch)
	}
	rc, c := m.Config, cfg.Config
	if !slices.Equal(rc.Entrypoint, c.Entrypoint) || !slices.Equal(rc.Cmd, c.Cmd) ||
		!slices.Equal(rc.Env, c.Env) || rc.WorkingDir != c.WorkingDir || rc.User != c.User {
		return nil, fmt.Errorf("%w: the config's Entrypoint, Cmd, Env, WorkingDir or User differ from those release.json records", ErrReleaseMismatch)
	}
	return &cfg, nil
}

// readDoc reads name from the release directory and checks that it hashes
// to want.
func readDoc(inst *release.Installed, name string, want digest.Digest) ([]byte, error) {
	if err := want.Validate(); err != nil {
		return nil, fmt.Errorf("%w: release.json: digest of %s: %w", release.ErrCorrupt, name, err)
	}
	f, err := os.Open(filepath.Join(inst.Dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: no %s in %s (installed by an hbx that did not record it; only a fresh install of the release records it)", release.ErrCorrupt, name, inst.Dir)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", release.ErrCorrupt, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxDocBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %w", release.ErrCorrupt, name, err)
	}
	if len(b) > maxDocBytes {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", release.ErrCorrupt, name, maxDocBytes)
	}
	if got := want.Algorithm().FromBytes(b); got != want {
		return nil, fmt.Errorf("%w: %s hashes to %s, release.json records %s", ErrReleaseMismatch, name, got, want)
	}
	return b, nil
}
