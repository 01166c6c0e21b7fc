package backup

import (
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/release"
)

// Archive layout.
const (
	// ManifestName is the first entry of every archive hbx writes.
	ManifestName = "hbx-backup.json"
	// ManifestFormat is the manifest version this hbx writes and reads.
	ManifestFormat = 1
	// PathsPrefix is the archive directory holding the extra paths
	// (backup.paths): /a/b is archived as .hbx-paths/a/b.
	PathsPrefix = ".hbx-paths"
	// MaxManifestBytes bounds the manifest: Create refuses to write a
	// larger one and a reader refuses a larger one before reading it, so
	// what hbx holds in memory is bounded by what it writes itself, not by
	// the archive (about 60,000 entries with short names).
	MaxManifestBytes = 16 << 20
	// maxNameBytes bounds an entry's name and link target (PATH_MAX): no
	// file system hbx backs up hands out a longer one.
	maxNameBytes = 4096
)

// Entry types of the manifest.
const (
	TypeFile     = "file"
	TypeDir      = "dir"
	TypeSymlink  = "symlink"
	TypeHardlink = "hardlink"
	// Types of Manifest.Skipped entries, which are never archived.
	TypeFifo        = "fifo"
	TypeSocket      = "socket"
	TypeCharDevice  = "character device"
	TypeBlockDevice = "block device"
)

// Manifest is hbx-backup.json: what was archived, from where, by which
// hbx, for which runtime, and every entry that follows it.
type Manifest struct {
	Format     int       `json:"format"`
	Created    time.Time `json:"created"` // UTC
	HbxVersion string    `json:"hbx_version"`
	// Image is the configured executor.image, name:tag@sha256:...
	Image string `json:"image,omitempty"`
	// IndexDigest is Image's digest (the multi-platform index).
	IndexDigest digest.Digest `json:"index_digest,omitempty"`
	// Platform is the configured executor.platform, os/arch[/variant].
	Platform string `json:"platform,omitempty"`
	// ManifestDigest is the child manifest of Platform the data was
	// written by: the active release's when it is the configured image,
	// else the pinned one; "" when neither is known.
	ManifestDigest digest.Digest `json:"manifest_digest,omitempty"`
	// DataDir is executor.data_dir, archived as the archive's root.
	DataDir string `json:"data_dir"`
	// Paths are the extra directories (backup.paths), absolute, each
	// archived under PathsPrefix.
	Paths []string `json:"paths,omitempty"`
	// Files lists every entry after the manifest, in archive order.
	Files []File `json:"files"`
	// Skipped lists what the data directory held and the archive leaves
	// out: fifos, sockets and devices (Type TypeFifo, TypeSocket,
	// TypeCharDevice, TypeBlockDevice), in scan order. Restore reports
	// them.
	Skipped []File `json:"skipped,omitempty"`
}

// manifestAlias is Manifest without its JSON methods.
type manifestAlias Manifest

// manifestJSON is Manifest's JSON form: DataDir and Paths, like File's
// names, are bytes, written as "data_dir_b64" and "paths_b64" (standard
// base64) when one is not valid UTF-8.
type manifestJSON struct {
	manifestAlias
	DataDir    string   `json:"data_dir"`
	DataDirB64 []byte   `json:"data_dir_b64,omitempty"`
	Paths      []string `json:"paths,omitempty"`
	PathsB64   [][]byte `json:"paths_b64,omitempty"`
}

// MarshalJSON writes m; a DataDir that is not valid UTF-8 is written as
// "data_dir_b64", and Paths, when any is not, as "paths_b64".
func (m Manifest) MarshalJSON() ([]byte, error) {
	j := manifestJSON{manifestAlias: manifestAlias(m), DataDir: m.DataDir, Paths: m.Paths}
	if !utf8.ValidString(m.DataDir) {
		j.DataDir, j.DataDirB64 = "", []byte(m.DataDir)
	}
	for _, p := range m.Paths {
		if !utf8.ValidString(p) {
			j.Paths, j.PathsB64 = nil, make([][]byte, len(m.Paths))
			for i, p := range m.Paths {
				j.PathsB64[i] = []byte(p)
			}
			break
		}
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads either form MarshalJSON writes; a manifest with
// both forms of DataDir or of Paths is refused.
func (m *Manifest) UnmarshalJSON(b []byte) error {
	var j manifestJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*m = Manifest(j.manifestAlias)
	m.DataDir, m.Paths = j.DataDir, j.Paths
	if j.DataDirB64 != nil {
		if j.DataDir != "" {
			return fmt.Errorf("manifest has both data_dir %q and data_dir_b64", j.DataDir)
		}
		m.DataDir = string(j.DataDirB64)
	}
	if j.PathsB64 != nil {
		if j.Paths != nil {
			return fmt.Errorf("manifest has both paths and paths_b64")
		}
		m.Paths = make([]string, len(j.PathsB64))
		for i, p := range j.PathsB64 {
			m.Paths[i] = string(p)
		}
	}
	return nil
}

// File is one entry of the manifest.
//
// Names are bytes: Path and Link hold a file name or symlink target
// exactly as the filesystem gave it. In JSON, one that is not valid UTF-8
// is written as "path_b64" ("link_b64"), standard base64 of the bytes,
// instead of "path" ("link"); both forms are read.
type File struct {
	// Path is the entry's archive path, slash-separated and clean: "." is
	// the data directory itself, "db/x.sqlite" a file in it.
	Path string `json:"path"`
	// Type is TypeFile, TypeDir, TypeSymlink or TypeHardlink.
	Type string `json:"type"`
	// Mode holds the permission bits with setuid, setgid and sticky.
	Mode uint32 `json:"mode"`
	// Size is the length in bytes of a regular file.
	Size int64 `json:"size,omitempty"`
	// SHA256 is the hex sha256 of a regular file's content.
	SHA256 string `json:"sha256,omitempty"`
	// Link is a symlink's target (verbatim) or the archive path of the
	// file a hardlink shares.
	Link string `json:"link,omitempty"`
}

// fileJSON is File's JSON form; see File.
type fileJSON struct {
	Path    string `json:"path,omitempty"`
	PathB64 []byte `json:"path_b64,omitempty"`
	Type    string `json:"type"`
	Mode    uint32 `json:"mode"`
	Size    int64  `json:"size,omitempty"`
	SHA256  string `json:"sha256,omitempty"`
	Link    string `json:"link,omitempty"`
	LinkB64 []byte `json:"link_b64,omitempty"`
}

// MarshalJSON writes f with "path" and "link" when they are valid UTF-8,
// else "path_b64" and "link_b64" (base64 of the bytes).
func (f File) MarshalJSON() ([]byte, error) {
	j := fileJSON{Path: f.Path, Type: f.Type, Mode: f.Mode, Size: f.Size, SHA256: f.SHA256, Link: f.Link}
	if !utf8.ValidString(f.Path) {
		j.Path, j.PathB64 = "", []byte(f.Path)
	}
	if !utf8.ValidString(f.Link) {
		j.Link, j.LinkB64 = "", []byte(f.Link)
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads either form MarshalJSON writes. An entry with both
// "path" and "path_b64" (or both link forms) is refused.
func (f *File) UnmarshalJSON(b []byte) error {
	var j fileJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*f = File{Path: j.Path, Type: j.Type, Mode: j.Mode, Size: j.Size, SHA256: j.SHA256, Link: j.Link}
	if j.PathB64 != nil {
		if j.Path != "" {
			return fmt.Errorf("entry has both path %q and path_b64", j.Path)
		}
		f.Path = string(j.PathB64)
	}
	if j.LinkB64 != nil {
		if j.Link != "" {
			return fmt.Errorf("entry %q has both link and link_b64", f.Path)
		}
		f.Link = string(j.LinkB64)
	}
	return nil
}

// Totals returns the number of regular files and their content bytes.
func (m *Manifest) Totals() (files int, bytes int64) {
	for _, f := range m.Files {
		if f.Type == TypeFile {
			files++
			bytes += f.Size
		}
	}
	return files, bytes
}

// parseManifest decodes and checks a manifest.
func parseManifest(b []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: parse %s: %w", ErrCorrupt, ManifestName, err)
	}
	if m.Format != ManifestFormat {
		return nil, fmt.Errorf("%w: %s format %d, this hbx reads %d", ErrCorrupt, ManifestName, m.Format, ManifestFormat)
	}
	if m.IndexDigest != "" && m.IndexDigest.Validate() != nil || m.ManifestDigest != "" && m.ManifestDigest.Validate() != nil {
		return nil, fmt.Errorf("%w: %s: bad digest", ErrCorrupt, ManifestName)
	}
	if err := m.checkRelease(); err != nil {
		return nil, fmt.Errorf("%w: %s contradicts itself: %w", ErrCorrupt, ManifestName, err)
	}
	for _, p := range m.Paths {
		if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
			return nil, fmt.Errorf("%w: %s: extra path %q is not a clean absolute path", ErrCorrupt, ManifestName, p)
		}
	}
	seen := make(map[string]bool, len(m.Files))
	for _, f := range m.Files {
		if cleanArchivePath(f.Path) != f.Path || seen[f.Path] {
			return nil, fmt.Errorf("%w: %s lists %q twice or not as a clean relative path", ErrCorrupt, ManifestName, f.Path)
		}
		seen[f.Path] = true
		switch f.Type {
		case TypeFile, TypeDir, TypeSymlink, TypeHardlink:
		default:
			return nil, fmt.Errorf("%w: %s: entry %q has type %q", ErrCorrupt, ManifestName, f.Path, f.Type)
		}
		if f.Size < 0 {
			return nil, fmt.Errorf("%w: %s: entry %q has size %d", ErrCorrupt, ManifestName, f.Path, f.Size)
		}
	}
	for _, f := range m.Skipped {
		if cleanArchivePath(f.Path) != f.Path {
			return nil, fmt.Errorf("%w: %s lists skipped %q, not a clean relative path", ErrCorrupt, ManifestName, f.Path)
		}
		switch f.Type {
		case TypeFifo, TypeSocket, TypeCharDevice, TypeBlockDevice:
		default:
			return nil, fmt.Errorf("%w: %s: skipped entry %q has type %q", ErrCorrupt, ManifestName, f.Path, f.Type)
		}
	}
	return &m, nil
}

// checkRelease refuses release fields that contradict each other, so
// that no restore acts on one field and waits on another: an image that
// is not name:tag@sha256:..., an index digest other than the image's, a
// platform that is not os/arch[/variant]. Without an image the digests
// are not read (the configured release is restored).
func (m *Manifest) checkRelease() error {
	if m.Image == "" {
		return nil
	}
	ref, err := release.ParseImageRef(m.Image)
	if err != nil {
		return err
	}
	if m.IndexDigest != ref.Digest {
		return fmt.Errorf("image %s, index_digest %q", m.Image, m.IndexDigest)
	}
	if m.Platform != "" {
		if _, err := release.ParsePlatform(m.Platform); err != nil {
			return err
		}
	}
	return nil
}

// cleanArchivePath returns name as a clean slash path relative to the
// archive root ("." for the root), or "" when it is absolute or has a ".."
// component: archives hbx reads never need either.
func cleanArchivePath(name string) string {
	if name == "" || strings.HasPrefix(name, "/") || strings.IndexByte(name, 0) >= 0 {
		return ""
	}
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return ""
		}
	}
	return path.Clean(name)
}

// Compression names an archive's compression.
type Compression string

// The compressions hbx writes; it reads both, and uncompressed tar.
const (
	Gzip Compression = "gzip" // .tar.gz, parallel (pgzip), readable by gzip and tar -z
	Zstd Compression = "zstd" // .tar.zst
)

// ext returns the file name extension of c.
func (c Compression) ext() string {
	if c == Zstd {
		return ".tar.zst"
	}
	return ".tar.gz"
}

// timeLayout is the UTC timestamp in archive and pre-restore names.
const timeLayout = "20060102T150405Z"

// archiveName returns <name>-<UTC timestamp><ext>[.gpg], with "-N" after
// the timestamp when seq > 0.
func archiveName(name string, t time.Time, c Compression, encrypted bool, seq int) string {
	s := name + "-" + t.UTC().Format(timeLayout)
	if seq > 0 {
		s += "-" + strconv.Itoa(seq)
	}
	s += c.ext()
	if encrypted {
		s += ".gpg"
	}
	return s
}

var nameRE = regexp.MustCompile(`^(.+)-([0-9]{8}T[0-9]{6}Z)(?:-([0-9]+))?\.tar\.(gz|zst)(\.gpg)?$`)

// parseArchiveName splits an archive file name made by archiveName.
func parseArchiveName(file string) (name string, t time.Time, seq int, c Compression, encrypted, ok bool) {
	m := nameRE.FindStringSubmatch(file)
	if m == nil {
		return "", time.Time{}, 0, "", false, false
	}
	t, err := time.Parse(timeLayout, m[2])
	if err != nil {
		return "", time.Time{}, 0, "", false, false
	}
	if m[3] != "" {
		seq, _ = strconv.Atoi(m[3])
	}
	c = Gzip
	if m[4] == "zst" {
		c = Zstd
	}
	return m[1], t, seq, c, m[5] != "", true
}

// Target is the release the archive was written by (IndexDigest "" when
// it records none).
func (m *Manifest) Target() release.Target {
	return release.Target{Image: m.Image, IndexDigest: m.IndexDigest, Platform: m.Platform, ManifestDigest: m.ManifestDigest}
}
