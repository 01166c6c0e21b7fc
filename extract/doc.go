// Package extract applies OCI image layers (tar streams) to a directory tree
// without letting any entry read or write outside that tree.
//
// It is shared by the installer (image layers) and by backup restore
// (archives), so it knows nothing about registries or digests.
//
// # Path resolution
//
// Every entry's parent directory is resolved with chroot semantics by a walk
// of its own, one component at a time, with *at calls on directory handles
// opened from the root (O_NOFOLLOW, O_DIRECTORY): a symlink met as a parent
// of a later entry is followed inside the root, absolute ones too, so a base
// layer's var/run -> /run followed by var/run/app.pid lands at
// <root>/run/app.pid. Relative targets continue from the directory actually
// reached and ".." stops at the root, as the kernel resolves under chroot or
// openat2 RESOLVE_IN_ROOT (a test compares the walk with the kernel through
// pathrs-lite). At most 40 symlinks are followed per name, in total. The
// walk exists because pathrs-lite's MkdirAllHandle refuses to create the
// target of a dangling symlink, which real images need (/run above). The
// last component of a name is never followed: it is created, replaced or
// removed with *at calls on its parent's handle (O_NOFOLLOW,
// AT_SYMLINK_NOFOLLOW). No path is ever built by joining the root's name
// with an entry name. Whiteouts and "created by this layer" are tracked by
// canonical (symlink-free) names, so an alias through a symlink is the same
// path.
//
// # What it refuses
//
//   - names that climb above the root ("../x", "a/../../x"): ErrUnsafePath;
//   - hardlinks whose target climbs above the root, is missing or is a
//     directory: ErrUnsafePath or ErrBadLink;
//   - an entry that resolves to the root itself (".", "./", "/") unless it is
//     a directory, in which case only the root's metadata changes;
//   - character and block devices, fifos and unknown entry types:
//     ErrUnsupportedType;
//   - malformed whiteouts (".wh.", ".wh..", ".wh...", whiteouts of reserved
//     names): ErrBadWhiteout;
//   - more uncompressed bytes, or more claimed file bytes (sparse holes
//     count), than Options.MaxBytes (ErrTooLarge, checked
//     against each header's claimed size before any byte is read), more
//     entries than Options.MaxEntries, names longer than Options.MaxPathLen
//     (ErrLimit).
//
// A refused entry fails the whole Apply: the caller is expected to throw the
// tree away (the installer extracts into a staging directory).
//
// # Sparse files
//
// Sparse entries in the forms archive/tar reads (GNU type 'S', GNU PAX
// 0.0, 0.1 and 1.0) are regular files whose holes stay holes: archive/tar
// hands out a hole as zeros, and every block of holeBlock (4 KiB) bytes,
// aligned to the file's start, that is all zeros is skipped (pwrite at
// increasing offsets), the file's size set by ftruncate. So a file
// allocates no more than GNU tar's extraction of it (fewer blocks when its
// data itself holds aligned zero blocks) and staging costs what the data
// costs. Options.MaxBytes counts claimed sizes, holes included, not bytes
// written: each claimed byte is still produced by the reader and hashed
// (Options.HashFiles), so the cap is what bounds the work a small layer
// can cause, and a tree copied by a tool that fills holes stays under it.
//
// # Whiteouts (image-spec layer.md, "Whiteouts")
//
// ".wh.NAME" removes NAME as left by lower layers; ".wh..wh..opq" removes
// every lower-layer child of its directory. Neither affects entries of its
// own layer, whatever their order in the tar stream. Other ".wh..wh."
// names (aufs metadata such as ".wh..wh.plnk") are skipped.
//
// # Metadata
//
// Modes, mtimes and atimes are kept (an entry without an atime gets its
// mtime), to the nanosecond and for any year the tar can say, built from
// seconds and nanoseconds rather than UnixNano (which overflows outside
// 1678-2262); a time the filesystem cannot hold is clamped by the kernel,
// as for GNU tar. Numeric owners are kept when
// Options.PreserveOwners is set (it needs CAP_CHOWN; backup restore uses
// it). setuid and setgid bits are dropped and counted in
// Stats.DroppedSetid. With Options.RuntimeModes (the installer's releases)
// no owner is ever applied, every entry belongs to the user running Apply
// (root for hbx), and each mode is RuntimeMode of the entry's: setuid and
// setgid dropped, the owner's read and execute bits given to group and
// other, no write bit but the owner's, sticky kept. So a release is
// writable by its owner alone and still readable and runnable by the
// unprivileged user the payload runs as. Hard links share their target's
// inode and so its mode; symlinks are never chowned or chmodded (they are
// created by the user running Apply). Missing parent directories are made
// 0755 whatever the umask. Symlink targets are stored
// verbatim. Directory modes and times are applied after the layer's last
// entry, so a read-only directory can still receive its children. Extended
// attributes (PAX "SCHILY.xattr.*" records) are applied only with
// Options.Xattrs, to regular files and directories, on their own open
// descriptors; never to symlinks.
//
// # Existing files are never changed in place
//
// A regular file, symlink or hard link already in the tree (from an
// earlier layer, or placed there by the caller, such as a tree of hard
// links shared with another tree) is never opened for writing, chmodded,
// chowned or re-timed: an entry at its name unlinks it and creates a new
// inode (O_CREAT|O_EXCL), a whiteout or opaque directory unlinks names,
// and a hard-link entry adds a name to the existing inode (its link
// count and ctime change, nothing else). Directories are the exception:
// a directory entry over an existing directory, a layer's end and a
// removal change that directory's mode and times in place, so a caller
// sharing inodes between trees gives each tree its own directories (the
// installer's layer reuse, docs/install.md). Applier.SetFileHash gives
// FileHash the hash of such a placed file.
//
// # Memory
//
// What Apply must remember per entry (each file's sha256 by inode for
// FileHash, the current layer's names for its whiteouts) goes to sorted
// runs in unlinked files under Options.SpillDir once it passes a few MiB,
// so memory stays flat in the number of entries; without SpillDir it stays
// in memory. Directory modes and times wait for the layer's end in memory:
// about 100 bytes per directory of the layer.
//
// # Trees instead of layers
//
// Options.Literal turns whiteout handling off: ".wh.*" names are written as
// ordinary files. Backup restore uses it, since a backup archive is a tree
// whose files may have any name.
//
// # What it does not guarantee
//
// Apply is not atomic: on error the tree holds a partial layer. It is not
// safe against another process changing the tree while Apply runs (hbx
// extracts into a private staging directory). Nothing is fsynced; the caller
// makes the finished tree durable (one syncfs) before publishing it.
//
// # Files
//
// extract.go holds the API and the tar loop (names, stream limit);
// entry.go one entry as named steps (count against the limits, marker,
// entryMode, create by type) and the writers of each entry type and chown;
// resolve.go the chroot-style resolver, one walk step at a time (up, step,
// enter, follow), and its directory handle cache; whiteout.go removal,
// whiteouts and aufs markers (marker), opaque directories and the layer's
// own paths;
// sparse.go sparse entries (holes kept); hashstore.go and pathset.go the
// spilled hashes and layer names; meta.go extended attributes,
// times, the deferred directory modes and
// RuntimeMode; hasher.go the sha256 of written files (FileHash).
package extract
