package datadir

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// Prune removes all but the keep newest directories of kind k beside dir
// (keep < 0 counts as 0) and returns the paths removed, oldest first.
// Newest is by name (the stamp). Each of spare, the copy the caller just
// made, stays and counts as one of the keep newest whatever its stamp: a
// clock set back since an older copy was made gives it the oldest name.
// It stops at the first copy it cannot remove and returns what it removed
// so far with the error.
func Prune(dir string, k Kind, keep int, spare ...string) ([]string, error) {
	parent, base := filepath.Split(dir)
	ents, err := os.ReadDir(parent)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", parent, err)
	}
	var copies []string
	for _, e := range ents {
		if !e.IsDir() || !k.Of(base, e.Name()) {
			continue
		}
		if slices.ContainsFunc(spare, func(s string) bool { return filepath.Clean(s) == filepath.Join(parent, e.Name()) }) {
			keep--
			continue
		}
		copies = append(copies, e.Name())
	}
	slices.Sort(copies)
	var removed []string
	for len(copies) > max(keep, 0) {
		p := filepath.Join(parent, copies[0])
		copies = copies[1:]
		if err := RemoveTree(p); err != nil {
			return removed, err
		}
		removed = append(removed, p)
	}
	return removed, nil
}

// RemoveTree removes p and everything below it, making read-only
// directories writable when that is what stops it (a copy of data the
// payload made read-only); a missing p or "" is not an error. Symbolic
// links are removed, never followed.
func RemoveTree(p string) error {
	if p == "" {
		return nil
	}
	if err := os.RemoveAll(p); err == nil {
		return nil
	}
	_ = filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(q, 0o700)
		}
		return nil
	})
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	return nil
}
