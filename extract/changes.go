package extract

// TrackChanges starts recording which directories the layers applied
// from now on change: every directory in which an entry is created,
// replaced or removed (entries, whiteouts, opaque whiteouts, directories
// made on the way to an entry), by canonical (symlink-free) root-relative
// name, with all its ancestors. A directory not recorded, and everything
// below it, is exactly as it was when tracking started: layers never
// change an existing inode in place (a file entry is written to a new
// inode, a hard link adds a name), so a caller that knows the tree as it
// was (its files.json) need only look again at the recorded directories.
// At most limit directories are recorded; past that, Changed reports
// that tracking gave up (memory stays bounded whatever the layers hold).
func (a *Applier) TrackChanges(limit int) {
	a.changed = map[string]struct{}{}
	a.changeLimit = limit
	a.changeLost = false
}

// Changed reports whether TrackChanges recorded directory dir ("" is the
// root) as changed. all is false when tracking is off or gave up (more
// than its limit of directories): every directory must then be taken as
// changed.
func (a *Applier) Changed(dir string) (changed, all bool) {
	if a.changed == nil || a.changeLost {
		return true, false
	}
	_, changed = a.changed[dir]
	return changed, true
}

// touch records dir and its ancestors as changed (TrackChanges). An
// ancestor of a recorded directory is always recorded, so the walk up
// stops at the first one already there.
func (a *Applier) touch(dir string) {
	if a.changed == nil || a.changeLost {
		return
	}
	for {
		if _, ok := a.changed[dir]; ok {
			return
		}
		if len(a.changed) >= a.changeLimit {
			a.changeLost = true
			a.changed = map[string]struct{}{}
			return
		}
		a.changed[dir] = struct{}{}
		if dir == "" {
			return
		}
		dir, _ = splitName(dir)
	}
}
