// Package journal stores the small JSON records that let an interrupted
// change be finished or undone by the next command (backup's restore
// journal, upgrade's upgrade.json): one shape for all of them.
//
// A journal is a JSON object whose first key is "format", the version of
// its shape; Write stores it durably (internal/atomicfile: temp file,
// fsync, rename, fsync of the directory; mode 0600), so a reader sees the
// journal before or after a write, never a torn one. Read refuses a
// journal of another format with an error wrapping ErrFormat that names
// the file, its format and the one this hbx reads: a journal is acted on
// only by an hbx that knows what it records. A journal without a format
// key (written before the key existed) is read as the current format when
// the File says Unversioned, and refused (as format 0) otherwise.
//
// It does not lock: the caller holds the lock of the directory the
// journal records changes to.
package journal
