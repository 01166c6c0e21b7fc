package release

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	digest "github.com/opencontainers/go-digest"
)

// Names inside the runtime directory and a release directory.
const (
	ReleasesDir  = "releases"
	CurrentLink  = "current"
	PreviousLink = "previous"
	RootfsDir    = "rootfs"
	MetaFile     = "release.json"
	FilesFile    = "files.json"
	// ManifestFile and ConfigFile are the image manifest and config
	// exactly as fetched (their bytes hash to Meta.ManifestDigest and
	// Meta.ConfigDigest), kept so the release can be re-verified after
	// the blob cache is gone. Releases installed before they existed lack
	// them.
	ManifestFile = "manifest.json"
	ConfigFile   = "config.json"
	// MetaFormat is the version of release.json this hbx writes and reads.
	MetaFormat = 1
	// OwnedByHbx is Meta.Ownership of a release whose every file and
	// directory belongs to the user running hbx (root in production) with
	// extract.RuntimeMode modes: no one else can write in it. Releases
	// installed by an hbx that applied the image's numeric owners have 0.
	OwnedByHbx = 1
)

// ErrNoRelease: no active release (current is missing or dangling). Link
// returns it for the previous link too, worded for that link ("no
// previous release: ..."), so errors.Is matches either.
var ErrNoRelease = errors.New("no active release")

// noLinkError is ErrNoRelease for one link, named in its text.
type noLinkError struct{ msg string }

func (e noLinkError) Error() string        { return e.msg }
func (e noLinkError) Is(target error) bool { return target == ErrNoRelease }

// noRelease is ErrNoRelease for the link name: "no active release: " for
// current, "no previous release: " for previous, then detail.
func noRelease(name, detail string) error {
	kind := "active"
	if name != CurrentLink {
		kind = name
	}
	return noLinkError{msg: "no " + kind + " release: " + detail}
}

// ErrCorrupt: a release directory whose metadata or entry program is missing
// or does not parse.
var ErrCorrupt = errors.New("release is damaged")

// Meta is release.json: what was installed, from where, and the image
// config hbx needs to run it.
type Meta struct {
	Format         int             `json:"format"`
	Image          string          `json:"image"` // reference as configured (name:tag@digest)
	IndexDigest    digest.Digest   `json:"index_digest"`
	ManifestDigest digest.Digest   `json:"manifest_digest"`
	ConfigDigest   digest.Digest   `json:"config_digest"`
	Platform       string          `json:"platform"` // os/arch[/variant]
	Layers         []digest.Digest `json:"layers"`
	DiffIDs        []digest.Digest `json:"diff_ids"`
	Config         ImageConfig     `json:"config"`
	InstalledAt    time.Time       `json:"installed_at"`
	HbxVersion     string          `json:"hbx_version"`
	// Ownership is OwnedByHbx once the release's tree follows that rule
	// (set by a cold install, or by the installer's one-time fix-up of an
	// older release); 0 before.
	Ownership int `json:"ownership,omitempty"`
}

// ImageConfig is the part of the OCI image config (image-spec config.md,
// "config") that running the payload needs.
type ImageConfig struct {
	Entrypoint   []string `json:"entrypoint,omitempty"`
	Cmd          []string `json:"cmd,omitempty"`
	Env          []string `json:"env,omitempty"`
	WorkingDir   string   `json:"working_dir,omitempty"`
	User         string   `json:"user,omitempty"`
	Volumes      []string `json:"volumes,omitempty"`
	ExposedPorts []string `json:"exposed_ports,omitempty"`
}

// Argv is Entrypoint followed by Cmd, as a container runtime builds it.
func (c ImageConfig) Argv() []string {
	return append(append([]string(nil), c.Entrypoint...), c.Cmd...)
}

// File is one entry of files.json.
type File struct {
	Path   string `json:"path"`             // root-relative, slash-separated
	Type   string `json:"type"`             // "file", "dir", "symlink"
	Mode   uint32 `json:"mode"`             // permission bits incl. sticky
	Size   int64  `json:"size,omitempty"`   // regular files
	SHA256 string `json:"sha256,omitempty"` // regular files, hex
	Target string `json:"target,omitempty"` // symlinks, verbatim
}

// Installed is a release directory with its parsed metadata.
type Installed struct {
	Dir  string // absolute path of releases/<hex>
	Meta Meta
}

// Rootfs is the host path of the release's root filesystem.
func (i *Installed) Rootfs() string { return filepath.Join(i.Dir, RootfsDir) }

// Open reads the release in dir.
func Open(dir string) (*Installed, error) {
	b, err := os.ReadFile(filepath.Join(dir, MetaFile))
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %w", ErrCorrupt, MetaFile, err)
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: parse %s: %w", ErrCorrupt, MetaFile, err)
	}
	if m.Format != MetaFormat {
		return nil, fmt.Errorf("%w: %s format %d, want %d", ErrCorrupt, MetaFile, m.Format, MetaFormat)
	}
	if err := m.ManifestDigest.Validate(); err != nil {
		return nil, fmt.Errorf("%w: manifest digest: %w", ErrCorrupt, err)
	}
	return &Installed{Dir: dir, Meta: m}, nil
}

// Link reads the release a runtime-directory symlink (CurrentLink or
// PreviousLink) points to. ErrNoRelease when the link is missing or
// dangling, its text naming the link ("no previous release: ...").
func Link(runtimeDir, name string) (*Installed, error) {
	target, err := os.Readlink(filepath.Join(runtimeDir, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, noRelease(name, filepath.Join(runtimeDir, name)+" does not exist")
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	// Our links are always releases/<hex>; anything else was not made by hbx.
	dir, hex, ok := strings.Cut(filepath.ToSlash(target), "/")
	if !ok || dir != ReleasesDir || !isHex64(hex) {
		return nil, fmt.Errorf("%w: %s points to %q, not %s/<digest>", ErrCorrupt, name, target, ReleasesDir)
	}
	abs := filepath.Join(runtimeDir, ReleasesDir, hex)
	if _, err := os.Stat(abs); errors.Is(err, os.ErrNotExist) {
		return nil, noRelease(name, fmt.Sprintf("%s points to missing %s", name, target))
	}
	return Open(abs)
}

// Current reads the active release.
func Current(runtimeDir string) (*Installed, error) { return Link(runtimeDir, CurrentLink) }

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ReadFiles reads files.json of the release.
func (i *Installed) ReadFiles() ([]File, error) {
	b, err := os.ReadFile(filepath.Join(i.Dir, FilesFile))
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %w", ErrCorrupt, FilesFile, err)
	}
	var fs []File
	if err := json.Unmarshal(b, &fs); err != nil {
		return nil, fmt.Errorf("%w: parse %s: %w", ErrCorrupt, FilesFile, err)
	}
	return fs, nil
}

// ErrMismatch: the active release is not the configured one.
var ErrMismatch = errors.New("release does not match the configuration")

// Matches checks the release against the configured index digest, platform
// and (when not "") pinned manifest digest: Target.Check with m as the
// installed release. The error says which differs.
func (m Meta) Matches(indexDigest digest.Digest, platform string, manifestPin digest.Digest) error {
	return Target{IndexDigest: indexDigest, Platform: platform, ManifestDigest: manifestPin}.Check(m.Target())
}
