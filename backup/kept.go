package backup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hermesbox/hbx/internal/datadir"
)

// Kinds of copies of replaced data kept beside the data directory; their
// names are internal/datadir's.
const (
	// KindPreRestore: datadir.PreRestore, the data a restore replaced
	// (RestoreOptions.KeepPreRestore copies are kept).
	KindPreRestore = string(datadir.PreRestore)
	// KindRolledBack: datadir.RolledBack, the data a rollback replaced:
	// what the newer release wrote (package upgrade names and prunes
	// them).
	KindRolledBack = string(datadir.RolledBack)
)

// Kept is one copy of replaced data kept beside the data directory.
type Kept struct {
	Path    string    `json:"path"`
	Kind    string    `json:"kind"`    // KindPreRestore or KindRolledBack
	Created time.Time `json:"created"` // from the name, UTC
	Files   int       `json:"files"`   // regular files
	Bytes   int64     `json:"bytes"`   // their content bytes
}

// ListKept returns the copies of replaced data kept beside dataDir
// (symlinks resolved, as Restore resolves it), newest first. It walks each
// copy to count its files and bytes; a copy that disappears meanwhile is
// left out.
func ListKept(dataDir string) ([]Kept, error) {
	parent, base := filepath.Split(resolved(dataDir))
	ents, err := os.ReadDir(parent)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", parent, err)
	}
	var out []Kept
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		for _, kind := range datadir.Kept {
			t, ok := kind.Created(base, e.Name())
			if !ok {
				continue
			}
			k := Kept{Path: filepath.Join(parent, e.Name()), Kind: string(kind), Created: t}
			werr := filepath.WalkDir(k.Path, func(_ string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if d.Type().IsRegular() {
					if fi, err := d.Info(); err == nil {
						k.Files++
						k.Bytes += fi.Size()
					}
				}
				return nil
			})
			if werr != nil && errors.Is(werr, os.ErrNotExist) {
				continue
			}
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b Kept) int {
		if c := b.Created.Compare(a.Created); c != 0 {
			return c
		}
		return strings.Compare(b.Path, a.Path)
	})
	return out, nil
}
