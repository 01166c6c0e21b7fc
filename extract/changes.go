package extract

// TrackChanges starts recording which names the layers applied from now
// on change, by canonical (symlink-free) root-relative name, each with
// all its ancestors: every entry's name (a directory there may be one
// made anew, empty, after a whiteout or over another type), every
// directory in which a whiteout or opaque whiteout removes names, every
// directory made on the way to an entry. A directory not recorded, and
// everything below it, is exactly as it was when tracking started (the
// same directory, the same names, the same inodes): layers never change
// an existing inode in place (a file entry is written to a new inode, a
// hard link adds a name), so a caller that knows the tree as it was (its
// files.json) need only look again at the recorded directories. At most
// limit names are recorded; past that, Changed reports that tracking
// gave up (memory stays bounded whatever the layers hold).
func (a *Applier) TrackChanges(limit int) {
	a.changed = map[string]struct{}{}
	a.changeLimit = limit
	a.changeLost = false
}

// Changed reports whether TrackChanges recorded directory dir ("" is the
// root) as changed. all is false when tracking is off or gave up (more
// than its limit of names): every directory must then be taken as
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
