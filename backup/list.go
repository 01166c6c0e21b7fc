package backup

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/internal/atomicfile"
	"github.com/hermesbox/hbx/internal/regfile"
)

// Info describes one archive of the backup directory. The fields after
// Compression come from the archive's .json file, written beside it at
// backup time (a copy of the manifest's summary, so listing needs no
// passphrase); they are empty when that file is missing.
type Info struct {
	Path        string      `json:"path"`
	Created     time.Time   `json:"created"` // from the name, UTC
	Size        int64       `json:"size"`    // bytes
	Encrypted   bool        `json:"encrypted"`
	Compression Compression `json:"compression"`

	SHA256         string        `json:"sha256,omitempty"`
	Files          int           `json:"files,omitempty"` // regular files
	Bytes          int64         `json:"bytes,omitempty"` // their content bytes
	Image          string        `json:"image,omitempty"`
	IndexDigest    digest.Digest `json:"index_digest,omitempty"`
	ManifestDigest digest.Digest `json:"manifest_digest,omitempty"`
	HbxVersion     string        `json:"hbx_version,omitempty"`

	seq int
}

// infoSuffix and sumSuffix name the files beside an archive.
const (
	infoSuffix = ".json"
	sumSuffix  = ".sha256"
)

// List returns the archives named <name>-<timestamp>... in dir, newest
// first. A missing dir holds none.
func List(dir, name string) ([]Info, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	var out []Info
	for _, e := range ents {
		n, t, seq, c, enc, ok := parseArchiveName(e.Name())
		if !ok || n != name || !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		st, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		in := Info{Path: p, Created: t, Size: st.Size(), Encrypted: enc, Compression: c, seq: seq}
		if b, err := regfile.ReadFile(p+infoSuffix, 1<<20); err == nil {
			var side Info
			if json.Unmarshal(b, &side) == nil {
				in.SHA256, in.Files, in.Bytes, in.Image = side.SHA256, side.Files, side.Bytes, side.Image
				in.IndexDigest, in.ManifestDigest, in.HbxVersion = side.IndexDigest, side.ManifestDigest, side.HbxVersion
			}
		}
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b Info) int {
		if c := b.Created.Compare(a.Created); c != 0 {
			return c
		}
		return b.seq - a.seq
	})
	return out, nil
}

// writeSidecars writes <archive>.sha256 (sha256sum's format) and
// <archive>.json, both mode 0600.
func writeSidecars(in Info) error {
	sum := fmt.Sprintf("%s  %s\n", in.SHA256, filepath.Base(in.Path))
	if err := atomicfile.WriteFile(in.Path+sumSuffix, []byte(sum), 0o600); err != nil {
		return err
	}
	b, err := json.MarshalIndent(in, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(in.Path+infoSuffix, append(b, '\n'), 0o600)
}

// removeArchive deletes an archive and the files beside it.
func removeArchive(p string) error {
	var errs []error
	for _, f := range []string{p, p + sumSuffix, p + infoSuffix} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// prune removes all but the keep newest archives of name in dir (keep 0
// keeps all) and returns the paths removed. The spare archives are
// neither removed nor counted.
func prune(dir, name string, keep int, spare ...string) ([]string, error) {
	if keep <= 0 {
		return nil, nil
	}
	all, err := List(dir, name)
	if err != nil {
		return nil, err
	}
	var list []Info
	for _, in := range all {
		if !spared(in.Path, spare) {
			list = append(list, in)
		}
	}
	var removed []string
	var errs []error
	for _, in := range list[min(keep, len(list)):] {
		if err := removeArchive(in.Path); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, in.Path)
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("prune old archives: %w", err)
	}
	if len(removed) > 0 {
		if err := atomicfile.SyncDir(dir); err != nil {
			return removed, err
		}
	}
	return removed, nil
}

// spared reports whether the archive at p is one of spare: the same path,
// or the same file named another way (a spare recorded while backup.dir
// named the directory through a symlink, or the other way round).
func spared(p string, spare []string) bool {
	if slices.Contains(spare, p) {
		return true
	}
	st, err := os.Stat(p)
	if err != nil {
		return false
	}
	for _, s := range spare {
		if o, err := os.Stat(s); err == nil && os.SameFile(st, o) {
			return true
		}
	}
	return false
}

// Kinds of archives: KindBackup those named after backup.name,
// KindPreUpgrade those hbx upgrade writes before a change.
const (
	KindBackup     = "backup"
	KindPreUpgrade = "pre-upgrade"
)

// Listed is one archive and its kind (KindBackup, KindPreUpgrade).
type Listed struct {
	Info
	Kind string `json:"kind"`
}

// ListKinds returns the archives of dir named name (KindBackup) and
// preUpgrade (KindPreUpgrade, unless it is name too), newest first; never
// nil. Archives created in the same second keep List's order (the later
// sequence number first).
func ListKinds(dir, name, preUpgrade string) ([]Listed, error) {
	srcs := []struct{ name, kind string }{{name, KindBackup}}
	if name != preUpgrade {
		srcs = append(srcs, struct{ name, kind string }{preUpgrade, KindPreUpgrade})
	}
	out := []Listed{}
	for _, src := range srcs {
		infos, err := List(dir, src.name)
		if err != nil {
			return nil, err
		}
		for _, in := range infos {
			out = append(out, Listed{in, src.kind})
		}
	}
	slices.SortStableFunc(out, func(a, b Listed) int { return b.Created.Compare(a.Created) })
	return out, nil
}

// ImageDigest is the digest of the image the archive's data was written
// by, as an operator pins it: the index's (executor.image's
// NAME:TAG@sha256:<index>, what hbx upgrade --image takes), else the
// child manifest's ("" when neither is known).
func (in Info) ImageDigest() digest.Digest {
	if in.IndexDigest != "" {
		return in.IndexDigest
	}
	return in.ManifestDigest
}
