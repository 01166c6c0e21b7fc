package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	digest "github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/atomicfile"
	"github.com/hermesbox/hbx/internal/datadir"
	"github.com/hermesbox/hbx/internal/lock"
	"github.com/hermesbox/hbx/internal/regfile"
	"github.com/hermesbox/hbx/internal/units"
	"github.com/hermesbox/hbx/release"
)

// LockFile is the lock in the runtime directory that install, backup and
// restore take (the installer's hbx.lock).
const LockFile = release.LockFile

// Options say what Create archives, where, and how.
type Options struct {
	// DataDir is executor.data_dir, archived as the archive's root.
	// Absolute.
	DataDir string
	// Paths are extra directories to archive (backup.paths), absolute;
	// each must not be inside DataDir, RuntimeDir or StateDir.
	Paths []string
	// RuntimeDir and StateDir are never archived, even inside Paths.
	// RuntimeDir holds the lock (LockFile).
	RuntimeDir, StateDir string
	// Dir is the destination directory (backup.dir), created mode 0700.
	Dir string
	// Name starts every archive's file name (backup.name): letters,
	// digits, ".", "_" and "-".
	Name string
	// Keep is how many archives of Name to keep after this one; older ones
	// are removed. 0 keeps all (backup.keep).
	Keep int
	// Spare lists archives of Name the prune after this backup never
	// removes, whatever Keep says; they do not count toward Keep (hbx
	// upgrade's: the pre-upgrade archive hbx rollback still needs, of the
	// completed change before a failed one).
	Spare []string
	// Compression is Gzip (the default when "") or Zstd.
	Compression Compression
	// Encrypt encrypts with Passphrase (OpenPGP, AES-256). Without it the
	// archive is plaintext.
	Encrypt    bool
	Passphrase []byte
	// Image, Platform and PlatformDigest are the configured executor.image,
	// executor.platform and its pinned child manifest digest ("" when not
	// pinned), recorded in the manifest.
	Image          string
	Platform       string
	PlatformDigest digest.Digest
	// HbxVersion is recorded in the manifest.
	HbxVersion string
	// LockWait is how long to wait for the lock held by another install,
	// backup or restore; 0 fails at once.
	LockWait time.Duration
	// HealthWait bounds the wait for the stopped programs to run again
	// after the archive is written (Services.WaitRunning); 0 is 2 minutes.
	HealthWait time.Duration
	// Services stops the supervised programs while archiving; nil when no
	// supervisor runs (then nothing may hold files in the directories).
	Services Services
	// Runtime re-installs a runtime when an interrupted restore found here
	// must be undone; nil skips that step.
	Runtime Runtime
	// Config puts back a config file pin an interrupted restore wrote;
	// nil skips that.
	Config Config
	// Logger receives the steps; nil discards. Progress receives events;
	// nil receives none.
	Logger   *slog.Logger
	Progress Progress
	// Now is the clock (tests); nil is time.Now.
	Now func() time.Time
}

// Result is what Create did.
type Result struct {
	Path     string        `json:"path"`
	Size     int64         `json:"size"`   // bytes of the archive file
	SHA256   string        `json:"sha256"` // of the archive file
	Files    int           `json:"files"`  // regular files
	Entries  int           `json:"entries"`
	Bytes    int64         `json:"bytes"` // regular file content bytes
	Duration time.Duration `json:"-"`
	// Encrypted is false for --no-encrypt archives.
	Encrypted bool `json:"encrypted"`
	// Restarted names the programs the backup stopped and that run again
	// (RUNNING, Executor healthy); empty when none were running or they
	// do not run again (then Create also returns ErrNotRestarted).
	Restarted []string `json:"restarted"`
	// Skipped lists host paths left out, each with why: the runtime and
	// state directories (and other hbx directories) inside Paths, and
	// every entry that is not a directory, regular file or symlink
	// ("fifo", "socket", "character device", "block device"), which the
	// manifest also lists (Manifest.Skipped).
	Skipped []string `json:"skipped,omitempty"`
	// Pruned lists older archives removed by Keep.
	Pruned []string `json:"pruned,omitempty"`
	// Recovered describes an interrupted restore finished or undone first.
	Recovered string `json:"recovered,omitempty"`
}

// Create makes a cold, verified archive of the data directory (and
// Paths): it takes the lock, checks free space, stops the services, hashes
// every file, writes the archive (manifest first) to a temporary file in
// Dir, fsyncs and renames it into place (mode 0600), starts the services
// again and waits until the programs it stopped run (Services.WaitRunning,
// bounded by HealthWait), writes the .sha256 and .json files beside it,
// reads the archive back and checks it against its manifest, and prunes
// old archives. See the package doc.
//
// Every failure after the services were stopped removes the partial or
// unverified archive, starts the services again and says in the error
// which programs were started again (or that they are not running again,
// wrapping ErrNotRestarted). When only the restart fails, the archive is
// kept and Create returns both the Result and an error wrapping
// ErrNotRestarted.
func Create(ctx context.Context, opts Options) (_ *Result, err error) {
	start := time.Now()
	log, prog, now := defaults(opts.Logger, opts.Progress, opts.Now)
	// Check the options: nothing changed.
	if err := checkCreate(&opts); err != nil {
		return nil, err
	}
	lk, err := acquire(ctx, opts.RuntimeDir, "hbx backup", opts.LockWait, log)
	if err != nil {
		return nil, err
	}
	defer unlockInto(lk, &err)
	ctx = lock.WithHeld(ctx, lk) // a recovery's runtime install runs under it
	prog.Event(Event{Kind: EventLocked})
	// Prepare and estimate (window "backup, before the rename": the
	// leftover .tmp-* files go): open the roots, check the space.
	if err := prepareDir(opts.Dir, log); err != nil {
		return nil, err
	}
	roots, exclude, err := estimate(opts)
	if err != nil {
		return nil, err
	}
	defer closeRoots(roots)
	// Stop the services; from here every path out starts them again first
	// (r.restart), and the error says what became of them.
	hold, err := stopServices(ctx, opts.Services, guarded(opts.DataDir, opts.Paths), opts.HealthWait, log)
	if err != nil {
		return nil, err
	}
	prog.Event(Event{Kind: EventStopped})
	// held ends when the supervisor goes away: nothing keeps the data
	// cold any more, so the archive is not finished.
	held, stopHeld := untilGone(ctx, opts.Services)
	defer stopHeld()
	r := &restarter{hold: hold, svc: opts.Services, wait: opts.HealthWait, log: log, prog: prog}
	// Archive while held (windows "backup, before/after the rename").
	res, final, err := archiveHeld(ctx, held, opts, roots, exclude, r, log, prog, now)
	if err != nil {
		return nil, failHeld(ctx, err, final, hold, r)
	}
	// Restarted: confirm the programs the hold stopped run again.
	if rerr := r.restart(ctx); rerr != nil {
		// The archive is complete and verified; the programs are not
		// running again.
		res.Restarted = []string{}
		res.Duration = time.Since(start)
		return res, fmt.Errorf("archive %s written and verified, but %w", res.Path, rerr)
	}
	res.Restarted = r.started
	res.Duration = time.Since(start)
	return res, nil
}

// checkCreate fills in opts' defaults and checks them.
func checkCreate(opts *Options) error {
	if opts.Compression == "" {
		opts.Compression = Gzip
	}
	if err := checkOptions(opts); err != nil {
		return err
	}
	if opts.Encrypt && len(opts.Passphrase) == 0 {
		return ErrNoPassphrase
	}
	return nil
}

// estimate opens the archived roots, lists what is excluded from them,
// and checks that the backup directory has room for an archive of what a
// scan without hashing finds. The caller closes the roots.
func estimate(opts Options) ([]*root, map[fileID]string, error) {
	roots, err := openRoots(opts.DataDir, opts.Paths)
	if err != nil {
		return nil, nil, err
	}
	exclude := exclusions(opts.DataDir, opts.Paths, opts.RuntimeDir, opts.StateDir, opts.Dir)
	est, err := scan(roots, exclude, false)
	if err == nil {
		err = checkSpace(opts.Dir, est.bytes+int64(len(est.items))*1536+est.bytes/100+16<<20, "the archive")
	}
	if err != nil {
		closeRoots(roots)
		return nil, nil, err
	}
	return roots, exclude, nil
}

// failHeld ends a Create that failed while the services were held: it
// removes the archive renamed into place (final, "" for none), starts the
// services again (r) and returns err saying what became of them.
func failHeld(ctx context.Context, err error, final string, hold Hold, r *restarter) error {
	if final != "" {
		_ = removeArchive(final)
	}
	if hold != nil && errors.Is(err, ErrSupervisorGone) {
		return fmt.Errorf("%w while the programs were stopped for the backup: no archive was written (nothing partial is left); %w: %s: %s: start hbx supervise", ErrSupervisorGone, ErrNotRestarted, list(hold.Running()), noSupervisor)
	}
	if rerr := r.restart(ctx); rerr != nil {
		return fmt.Errorf("%w; %w", err, rerr)
	}
	if hold != nil {
		return fmt.Errorf("%w; services started again: %s", err, list(r.started))
	}
	return err
}

// archiveHeld does the part of Create that runs while the services are
// held: recover, scan, write, restart (r), sidecars, read-back, prune. On
// failure it returns the path of an archive to remove, if one was renamed
// into place. held is ctx until the supervisor goes away: the scan and
// the write stop then, with its cause (ErrSupervisorGone).
func archiveHeld(ctx, held context.Context, opts Options, roots []*root, exclude map[fileID]string, r *restarter, log *slog.Logger, prog Progress, now func() time.Time) (*Result, string, error) {
	res := &Result{Encrypted: opts.Encrypt, Restarted: []string{}}
	// Recover an interrupted restore under this hold first.
	rec, err := recoverLocked(ctx, recoverOptions{dataDir: opts.DataDir, runtimeDir: opts.RuntimeDir, paths: opts.Paths, runtime: opts.Runtime, config: opts.Config, log: log, held: true, releaseBack: &r.startAll})
	if err != nil {
		return nil, "", err
	}
	res.Recovered = rec
	// Scan: hash every file.
	s, err := scanHeld(held, roots, exclude, res, log, prog)
	if err != nil {
		return nil, "", err
	}
	// Write (window "backup, before the rename"; then "after the
	// rename": a complete archive).
	m, st, err := writeArchive(held, opts, s, res, log, prog, now)
	if err != nil {
		return nil, "", err
	}
	// The archive is durable: the services need not wait for the check.
	rerr := r.restart(ctx)
	// Check: sidecars, read-back, prune.
	if err := checkWritten(ctx, opts, m, s, st, res, log, prog); err != nil {
		return nil, res.Path, err
	}
	_ = rerr // Create reports it after the check
	return res, "", nil
}

// scanHeld hashes every file of roots (stopping when held ends) and
// records the counts and what was skipped in res.
func scanHeld(held context.Context, roots []*root, exclude map[fileID]string, res *Result, log *slog.Logger, prog Progress) (*scanner, error) {
	s, err := scan(roots, exclude, true)
	if err == nil && held.Err() != nil {
		err = fmt.Errorf("scan: %w", context.Cause(held))
	}
	if err != nil {
		return nil, err
	}
	res.Files, res.Entries, res.Bytes, res.Skipped = s.files, len(s.items), s.bytes, s.skipped
	for _, sk := range s.skipped {
		log.Warn("not archived", "path", sk)
	}
	prog.Event(Event{Kind: EventScanned, Files: s.files, Bytes: s.bytes})
	return s, nil
}

// writeArchive writes the manifest and the scanned files to a fresh
// archive of opts.Dir, durably, and records its path, size and sha256 in
// res. A failure leaves no file behind.
func writeArchive(held context.Context, opts Options, s *scanner, res *Result, log *slog.Logger, prog Progress, now func() time.Time) (*Manifest, streamStats, error) {
	m := &Manifest{Format: ManifestFormat, Created: now().UTC(), HbxVersion: opts.HbxVersion, Image: opts.Image,
		Platform: opts.Platform, DataDir: opts.DataDir, Paths: opts.Paths, Files: make([]File, len(s.items)), Skipped: s.left}
	m.IndexDigest, m.ManifestDigest = recordedDigests(opts)
	for i, it := range s.items {
		m.Files[i] = it.File
	}
	final := uniqueName(opts.Dir, opts.Name, m.Created, opts.Compression, opts.Encrypt)
	var st streamStats
	err := atomicfile.Write(final, 0o600, func(w io.Writer) error {
		var werr error
		st, werr = writeStream(ctxWriter{held, w}, m, s, opts.Compression, passphraseOf(opts), filepath.Base(final))
		return werr
	})
	if err != nil {
		// atomicfile removed the temporary file.
		if errors.Is(err, unix.ENOSPC) {
			return nil, st, fmt.Errorf("write archive: %w in %s: %w (the partial archive was removed)", ErrNoSpace, opts.Dir, err)
		}
		return nil, st, fmt.Errorf("write archive: %w (the partial archive was removed)", err)
	}
	res.Path, res.Size, res.SHA256 = final, st.size, st.sha256
	log.Info("archive written", "path", final, "size", st.size, "files", s.files)
	prog.Event(Event{Kind: EventWritten, Path: final, Files: s.files, Bytes: st.size})
	return m, st, nil
}

// passphraseOf is the passphrase the archive is encrypted with, nil when
// it is not.
func passphraseOf(opts Options) []byte {
	if opts.Encrypt {
		return opts.Passphrase
	}
	return nil
}

// checkWritten writes the .sha256 and .json files beside the archive,
// reads it back against the manifest, and prunes old archives.
func checkWritten(ctx context.Context, opts Options, m *Manifest, s *scanner, st streamStats, res *Result, log *slog.Logger, prog Progress) error {
	final := res.Path
	info := Info{Path: final, Created: m.Created, Size: st.size, Encrypted: opts.Encrypt, Compression: opts.Compression,
		SHA256: st.sha256, Files: s.files, Bytes: s.bytes, Image: m.Image, IndexDigest: m.IndexDigest,
		ManifestDigest: m.ManifestDigest, HbxVersion: m.HbxVersion}
	if err := writeSidecars(info); err != nil {
		return fmt.Errorf("write checksum file: %w (archive removed)", err)
	}
	if err := readBack(ctx, final, passphraseOf(opts), st); err != nil {
		return fmt.Errorf("verify the written archive: %w (archive removed)", err)
	}
	prog.Event(Event{Kind: EventVerified, Path: final})
	var perr error
	if res.Pruned, perr = prune(opts.Dir, opts.Name, opts.Keep, opts.Spare...); perr != nil {
		log.Warn("prune", "err", perr)
	}
	return nil
}

// restarter ends a Create's hold once and confirms that the programs it
// stopped run again.
type restarter struct {
	hold Hold
	svc  Services
	wait time.Duration
	log  *slog.Logger
	prog Progress

	// startAll: also start the programs that should run and were not
	// running when the hold began (Services.WaitHealthy): a recovery under
	// the hold put back a release a supervisor had refused (FATAL).
	startAll bool

	done    bool
	started []string // the programs confirmed running again
	err     error
}

// defaultRestartWait bounds Services.WaitRunning when Options.HealthWait
// is 0.
const defaultRestartWait = 2 * time.Minute

// restart releases the hold (once) and waits until the programs it
// stopped are running and healthy again. The error wraps ErrNotRestarted
// and names them.
func (r *restarter) restart(ctx context.Context) error {
	if r.done || r.hold == nil {
		return r.err
	}
	r.done = true
	stopped := r.hold.Running()
	if supervisorGone(r.svc) {
		// Its programs died with it: nothing to release or wait for.
		r.err = fmt.Errorf("%w: %s, stopped by this backup: %w", ErrNotRestarted, list(stopped), ErrSupervisorGone)
		r.log.Error("services not running again", "programs", stopped, "err", ErrSupervisorGone)
		return r.err
	}
	if err := r.hold.Release(); err != nil {
		r.err = fmt.Errorf("%w: release the hold: %w (stopped: %s)", ErrNotRestarted, err, list(stopped))
		return r.err
	}
	wait := r.wait
	if wait <= 0 {
		wait = defaultRestartWait
	}
	// An interrupted backup still learns whether the programs run again:
	// the wait is bounded, not cancelled with ctx.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
	err := r.svc.WaitRunning(wctx, stopped)
	cancel()
	if err != nil {
		r.err = fmt.Errorf("%w: %s, stopped by this backup: %w", ErrNotRestarted, list(stopped), err)
		r.log.Error("services not running again", "programs", stopped, "err", err)
		return r.err
	}
	if r.startAll {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
		err := r.svc.WaitHealthy(wctx)
		cancel()
		if err != nil {
			r.err = fmt.Errorf("%w: the programs that should run, after an interrupted restore was undone: %w", ErrNotRestarted, err)
			r.log.Error("services not running after an interrupted restore was undone", "err", err)
			return r.err
		}
	}
	r.started = stopped
	if r.started == nil {
		r.started = []string{}
	}
	r.log.Info("services running again", "programs", stopped)
	r.prog.Event(Event{Kind: EventStarted, Detail: strings.Join(stopped, ",")})
	return nil
}

// readBack drops the archive's pages from the page cache (they are clean
// after the fsync), so the check reads what the disk holds, then verifies
// it.
func readBack(ctx context.Context, p string, pass []byte, st streamStats) error {
	if f, err := regfile.Open(p); err == nil {
		_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		f.Close()
	}
	vr, err := Verify(ctx, p, func() ([]byte, error) { return pass, nil })
	if err != nil {
		return err
	}
	if vr.Manifest == nil || vr.SHA256 != st.sha256 || vr.Size != st.size {
		return fmt.Errorf("%w: read back %d bytes with sha256 %s, wrote %d with %s", ErrCorrupt, vr.Size, vr.SHA256, st.size, st.sha256)
	}
	return nil
}

// recordedDigests returns the index digest of the configured image and the
// child manifest digest the data was written by: the active release's
// when it is the configured image and platform, else the pin.
func recordedDigests(opts Options) (index, manifest digest.Digest) {
	if _, d, ok := strings.Cut(opts.Image, "@"); ok {
		index = digest.Digest(d)
	}
	manifest = opts.PlatformDigest
	if cur, err := release.Current(opts.RuntimeDir); err == nil && cur.Meta.Matches(index, opts.Platform, "") == nil {
		manifest = cur.Meta.ManifestDigest
	}
	return index, manifest
}

// uniqueName returns a path in dir for a new archive that does not exist
// yet (the lock keeps it so).
func uniqueName(dir, name string, t time.Time, c Compression, enc bool) string {
	for seq := 0; ; seq++ {
		p := filepath.Join(dir, archiveName(name, t, c, enc, seq))
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			return p
		}
	}
}

func defaults(log *slog.Logger, prog Progress, now func() time.Time) (*slog.Logger, Progress, func() time.Time) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if prog == nil {
		prog = nopProgress{}
	}
	if now == nil {
		now = time.Now
	}
	return log, prog, now
}

func list(names []string) string {
	if len(names) == 0 {
		return "none were running"
	}
	return strings.Join(names, ", ")
}

// acquire takes the runtime directory's lock.
func acquire(ctx context.Context, runtimeDir, command string, wait time.Duration, log *slog.Logger) (*lock.Lock, error) {
	return release.LockRuntime(ctx, runtimeDir, command, wait, log)
}

// prepareDir creates the backup directory mode 0700, tightens an existing
// one to 0700, and removes temporary files a killed backup left.
func prepareDir(dir string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create backup directory: %w", err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("stat backup directory: %w", err)
	}
	if st.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("chmod backup directory: %w", err)
		}
		log.Info("backup directory made private", "dir", dir, "was", fmt.Sprintf("%04o", st.Mode().Perm()))
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list backup directory: %w", err)
	}
	for _, e := range ents {
		if atomicfile.IsTemp(e.Name()) {
			log.Info("removing what an interrupted backup left", "path", filepath.Join(dir, e.Name()))
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("remove leftover: %w", err)
			}
		}
	}
	return nil
}

// checkSpace refuses when dir's filesystem has less than need bytes free.
func checkSpace(dir string, need int64, what string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", dir, err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if free < need {
		return fmt.Errorf("%w in %s: %s free, %s needs about %s", ErrNoSpace, dir, units.Bytes(free), what, units.Bytes(need))
	}
	return nil
}

// checkOptions validates the directories of opts (ErrInvalid).
func checkOptions(o *Options) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	for _, d := range append([]string{o.DataDir, o.RuntimeDir, o.StateDir, o.Dir}, o.Paths...) {
		if !filepath.IsAbs(d) || filepath.Clean(d) != d {
			return bad("%q is not a clean absolute path", d)
		}
	}
	if o.Name == "" || strings.IndexFunc(o.Name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
	}) >= 0 {
		return bad("name %q: want letters, digits, '.', '_' and '-'", o.Name)
	}
	if o.Compression != Gzip && o.Compression != Zstd {
		return bad("compression %q: want gzip or zstd", o.Compression)
	}
	for i, p := range o.Paths {
		for _, d := range []struct{ what, dir string }{{"the data directory", o.DataDir}, {"the runtime directory", o.RuntimeDir}, {"the state directory", o.StateDir}} {
			if p == d.dir || within(d.dir, p) {
				return bad("extra path %s is %s or inside it", p, d.what)
			}
		}
		for _, q := range o.Paths[i+1:] {
			if p == q || within(p, q) || within(q, p) {
				return bad("extra paths %s and %s overlap", p, q)
			}
		}
	}
	if o.Dir == o.DataDir || within(o.DataDir, o.Dir) {
		return bad("backup directory %s is inside the data directory", o.Dir)
	}
	return nil
}

// within reports whether the clean absolute path inner lies below outer.
func within(outer, inner string) bool {
	if outer == "/" {
		return inner != "/"
	}
	return strings.HasPrefix(inner, outer+"/")
}

// guarded lists the directories no process may hold files in while they
// are archived or replaced.
func guarded(dataDir string, paths []string) []string {
	return resolvedDirs(append([]string{dataDir}, paths...))
}

// exclusions returns the directories (and files) never archived, by
// identity: the runtime, state and backup directories, the data directory
// inside an extra path, and what restores leave beside the data directory
// and the extra paths (pre-restore copies, staging, the journal).
func exclusions(dataDir string, paths []string, runtimeDir, stateDir, dir string) map[fileID]string {
	out := map[fileID]string{}
	add := func(p, why string) {
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil {
			out[idOf(&st)] = why
		}
	}
	add(runtimeDir, "runtime directory")
	add(stateDir, "state directory")
	add(dir, "backup directory")
	if len(paths) > 0 {
		add(dataDir, "data directory, archived as the root")
	}
	for _, t := range append([]string{dataDir}, paths...) {
		parent, base := filepath.Split(resolved(t))
		ents, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if n := e.Name(); datadir.LeftByRestore(base, n) {
				add(filepath.Join(parent, n), "left by a restore")
			}
		}
	}
	return out
}

// stopServices holds the services (or, without a supervisor, checks that
// nothing uses dirs) and then checks that no other process holds files in
// dirs. When one does, it releases the hold and waits (up to wait) until
// the programs run again; the error says whether they do.
func stopServices(ctx context.Context, svc Services, dirs []string, wait time.Duration, log *slog.Logger) (Hold, error) {
	if svc == nil {
		return nil, waitNotBusy(ctx, dirs)
	}
	h, err := svc.Hold(ctx)
	if err != nil {
		return nil, fmt.Errorf("stop services: %w", err)
	}
	if err := checkNotBusy(dirs); err != nil {
		if h == nil {
			return nil, err
		}
		r := &restarter{hold: h, svc: svc, wait: wait, log: log, prog: nopProgress{}}
		if rerr := r.restart(ctx); rerr != nil {
			return nil, fmt.Errorf("%w; %w", err, rerr)
		}
		return nil, fmt.Errorf("%w; services started again: %s", err, list(r.started))
	}
	return h, nil
}

// busyGrace is how long a process found holding files in the guarded
// directories without a supervisor gets to exit before it counts: the
// programs of a supervisor that just died are killed by the kernel
// (PR_SET_PDEATHSIG) a moment after its socket closed.
const busyGrace = 3 * time.Second

// waitNotBusy is checkNotBusy, retried for up to busyGrace while it finds a
// process.
func waitNotBusy(ctx context.Context, dirs []string) error {
	deadline := time.Now().Add(busyGrace)
	for {
		err := checkNotBusy(dirs)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ctxWriter fails its writes with ctx's cause once ctx is done.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if c.ctx.Err() != nil {
		return 0, context.Cause(c.ctx)
	}
	return c.w.Write(p)
}
