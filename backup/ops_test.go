package backup

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hermesbox/hbx/internal/atomicfile"
	"github.com/hermesbox/hbx/internal/datadir"
	"github.com/hermesbox/hbx/internal/lock"
	"github.com/hermesbox/hbx/internal/tartest"
	"github.com/hermesbox/hbx/internal/testenv"
	"github.com/hermesbox/hbx/internal/units"
)

// TestRefusesBusyDataDir: without a supervisor, a process holding a file
// (or its working directory) in the data directory stops the backup and
// the restore before anything is written or replaced.
func TestRefusesBusyDataDir(t *testing.T) {
	for _, how := range []string{"open file", "working directory"} {
		t.Run(how, func(t *testing.T) {
			b := newBox(t)
			write(t, b.data, "db 0600 x")
			res := b.backup(nil)
			script := "exec 3<db; exec sleep 60"
			if how == "working directory" {
				script = "exec sleep 60"
			}
			cmd := exec.Command("sh", "-c", script)
			cmd.Dir = b.data
			must(t, cmd.Start())
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			deadline := time.Now().Add(5 * time.Second)
			for { // until sh has exec'd sleep with the file open
				if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", cmd.Process.Pid)); strings.TrimSpace(string(b)) == "sleep" || time.Now().After(deadline) {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			before, _ := List(b.backups, "executor")
			_, err := Create(context.Background(), b.options())
			pid, _, ok := IsBusy(err)
			if !ok || pid != cmd.Process.Pid || !errors.Is(err, ErrBusy) {
				t.Fatalf("Create() = %v, want busy naming pid %d", err, cmd.Process.Pid)
			}
			if after, _ := List(b.backups, "executor"); len(after) != len(before) {
				t.Errorf("Create() refused but the archives went from %d to %d", len(before), len(after))
			}
			write(t, b.data, "db 0600 changed")
			if _, err := Restore(context.Background(), b.restoreOptions(res.Path)); !errors.Is(err, ErrBusy) {
				t.Errorf("Restore() = %v, want ErrBusy", err)
			}
			if got, _ := os.ReadFile(filepath.Join(b.data, "db")); string(got) != "changed" {
				t.Errorf("Restore() refused but db = %q", got)
			}
		})
	}
}

// TestConcurrentBackups: a second backup fails at once naming the holder,
// or waits for the lock with lock_wait; archives never interleave.
func TestConcurrentBackups(t *testing.T) {
	b := newBox(t)
	write(t, b.data, "a 0644 x")
	lk, err := lock.Acquire(context.Background(), filepath.Join(b.runtime, LockFile), "hbx backup", 0, nil)
	must(t, err)
	_, err = Create(context.Background(), b.options())
	var held *lock.HeldError
	if !errors.As(err, &held) || held.Holder.Command != "hbx backup" || !strings.Contains(err.Error(), "hbx backup") {
		t.Fatalf("Create() while locked = %v, want the holder named", err)
	}
	go func() { time.Sleep(300 * time.Millisecond); lk.Unlock() }()
	o := b.options()
	o.LockWait = 10 * time.Second
	if _, err := Create(context.Background(), o); err != nil {
		t.Fatalf("Create() with lock_wait = %v", err)
	}
	// Two at once, both waiting: both archives complete and verify.
	errs := make(chan error, 2)
	for range 2 {
		go func() { _, err := Create(context.Background(), o); errs <- err }()
	}
	for range 2 {
		must(t, <-errs)
	}
	list, err := List(b.backups, "executor")
	must(t, err)
	if len(list) != 3 {
		t.Fatalf("List() = %d archives, want 3", len(list))
	}
	for _, in := range list {
		if _, err := Verify(context.Background(), in.Path, passFunc(testPass)); err != nil {
			t.Errorf("Verify(%s) = %v", in.Path, err)
		}
	}
}

// TestPruneAndLeftovers: backup.keep keeps the newest archives with their
// .sha256 and .json files; a temporary file a killed backup left is
// removed; list shows time, size and the recorded digests.
func TestPruneAndLeftovers(t *testing.T) {
	b := newBox(t)
	write(t, b.data, "a 0644 x")
	must(t, os.MkdirAll(b.backups, 0o755))
	leftover := filepath.Join(b.backups, atomicfile.TempPrefix+"executor-20250101T000000Z.tar.gz.gpg-abc")
	must(t, os.WriteFile(leftover, []byte("partial"), 0o600))
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	var made []string
	for i := range 4 {
		res := b.backup(func(o *Options) {
			o.Keep = 2
			o.Now = func() time.Time { return now.Add(time.Duration(i) * time.Hour) }
		})
		made = append(made, res.Path)
	}
	list, err := List(b.backups, "executor")
	must(t, err)
	var got []string
	for _, in := range list {
		got = append(got, in.Path)
		if in.Size == 0 || in.Files != 1 || in.IndexDigest == "" || !in.Encrypted || in.SHA256 == "" {
			t.Errorf("List() entry %+v lacks size, files, digest or sha256", in)
		}
	}
	if diff := cmp.Diff(got, []string{made[3], made[2]}); diff != "" {
		t.Errorf("archives kept (-got +want):\n%s", diff)
	}
	if diff := cmp.Diff(listing(t, b.backups), []string{
		filepath.Base(made[2]), filepath.Base(made[2]) + ".json", filepath.Base(made[2]) + ".sha256",
		filepath.Base(made[3]), filepath.Base(made[3]) + ".json", filepath.Base(made[3]) + ".sha256",
	}); diff != "" {
		t.Errorf("backup directory (-got +want):\n%s", diff)
	}
	if st, _ := os.Stat(b.backups); st.Mode().Perm() != 0o700 {
		t.Errorf("backup directory mode %v, want 0700 (it was created 0755)", st.Mode().Perm())
	}
	// The .sha256 file is what sha256sum -c reads.
	cmd := exec.Command("sha256sum", "-c", filepath.Base(made[3])+".sha256")
	cmd.Dir = b.backups
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c: %v\n%s", err, out)
	}
}

// TestExtraPaths: backup.paths are archived and restored in place; the
// runtime and state directories inside one are never archived, and such a
// path is not restored in place (only with DataOnly).
func TestExtraPaths(t *testing.T) {
	b := newBox(t)
	hermes := filepath.Join(b.root, "workspace/hermes-home")
	write(t, b.data, "db 0600 data")
	write(t, hermes, "notes/ 0700", "notes/n 0600 hermes notes", "cfg => notes/n")
	wantHermes := snapshot(t, hermes)
	res := b.backup(func(o *Options) { o.Paths = []string{hermes} })
	write(t, hermes, "notes/n 0600 changed", "new 0600 new")
	ro := b.restoreOptions(res.Path)
	ro.AllowedPaths = []string{hermes}
	rr, err := Restore(context.Background(), ro)
	must(t, err)
	if diff := cmp.Diff(withoutRoot(snapshot(t, hermes)), withoutRoot(wantHermes)); diff != "" {
		t.Errorf("restored extra path (-got +want):\n%s", diff)
	}
	if old := rr.Restored[hermes]; !strings.HasPrefix(old, datadir.PreRestore.Path(hermes, "")) {
		t.Errorf("Restored[%s] = %q, want its pre-restore copy", hermes, old)
	}

	// An extra path holding the state directory.
	varDir := filepath.Join(b.root, "var")
	write(t, b.state, "secret-state 0600 never archived")
	res = b.backup(func(o *Options) { o.Paths = []string{varDir} })
	if len(res.Skipped) != 1 || !strings.Contains(res.Skipped[0], "state directory") {
		t.Errorf("Skipped = %q, want the state directory", res.Skipped)
	}
	vr, err := Verify(context.Background(), res.Path, passFunc(testPass))
	must(t, err)
	for _, f := range vr.Manifest.Files {
		if strings.Contains(f.Path, "secret-state") || strings.Contains(f.Path, "lib/hbx") {
			t.Errorf("archive holds %s from the state directory", f.Path)
		}
	}
	ro = b.restoreOptions(res.Path)
	ro.AllowedPaths = []string{varDir}
	if _, err := Restore(context.Background(), ro); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "--data-only") || !strings.Contains(err.Error(), "state directory") {
		t.Errorf("Restore() of an extra path holding the state directory = %v, want ErrInvalid suggesting --data-only", err)
	}
	o := b.restoreOptions(res.Path)
	o.DataOnly = true
	if _, err := Restore(context.Background(), o); err != nil {
		t.Errorf("Restore(DataOnly) = %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(b.state, "secret-state")); string(got) != "never archived" {
		t.Errorf("state directory changed: %q", got)
	}
}

// TestRestoreOwner: the restored data directory is mode 0700 and owned by
// executor.user, and so is every entry the archive gave the root's owner;
// other owners are kept.
func TestRestoreOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to set owners")
	}
	b := newBox(t)
	write(t, b.data, "mine 0600 x", "other 0600 y", "other owner 999:999")
	must(t, os.Chown(b.data, 1234, 1234))
	must(t, os.Chown(filepath.Join(b.data, "mine"), 1234, 1234))
	must(t, os.Chmod(b.data, 0o755))
	res := b.backup(nil)
	o := b.restoreOptions(res.Path)
	o.Owner = Owner{4321, 4322}
	_, err := Restore(context.Background(), o)
	must(t, err)
	got := snapshot(t, b.data)
	for _, want := range []string{". 040700 4321:4322", "mine 100600 4321:4322", "other 100600 999:999"} {
		found := false
		for _, l := range got {
			found = found || strings.HasPrefix(l, want)
		}
		if !found {
			t.Errorf("restored tree %q lacks %q", got, want)
		}
	}
}

// TestLargeRoundTrip archives and restores a 50 MB data directory of 2,000
// files (the ~1 GB / 10,000-file run is scripts/backupbench.sh).
func TestLargeRoundTrip(t *testing.T) {
	if testing.Short() {
		// Not a missing prerequisite: -short asks for it.
		t.Skip("-short")
	}
	b := newBox(t)
	makeBenchTree(t, b.data, 2000, 50<<20)
	want := snapshot(t, b.data)
	start := time.Now()
	res := b.backup(nil)
	took := time.Since(start)
	start = time.Now()
	must(t, os.RemoveAll(b.data))
	if _, err := Restore(context.Background(), b.restoreOptions(res.Path)); err != nil {
		t.Fatal(err)
	}
	t.Logf("50 MB / 2,000 files: backup %s (archive %s), restore %s", took.Round(time.Millisecond), units.Bytes(res.Size), time.Since(start).Round(time.Millisecond))
	if diff := cmp.Diff(withoutRoot(snapshot(t, b.data)), withoutRoot(want)); diff != "" {
		t.Errorf("restored tree (-got +want):\n%s", diff)
	}
}

// makeBenchTree writes files files of total bytes into dir, half random,
// half compressible, in nested directories.
func makeBenchTree(t *testing.T, dir string, files int, total int64) {
	t.Helper()
	per := total / int64(files)
	for i := range files {
		d := filepath.Join(dir, fmt.Sprintf("d%02d/e%02d", i%37, i%11))
		must(t, os.MkdirAll(d, 0o750))
		var data []byte
		if i%2 == 0 {
			data = pseudoRandom(int(per), i)
		} else {
			line := fmt.Sprintf(`{"row":%d,"name":"item","ok":true}`+"\n", i)
			data = []byte(strings.Repeat(line, int(per)/len(line)+1))[:per]
		}
		must(t, os.WriteFile(filepath.Join(d, fmt.Sprintf("f%05d", i)), data, 0o640))
	}
}

// TestRestoreThroughSymlink: a data directory reached through a symlink
// is replaced where it lives; the symlink stays.
func TestRestoreThroughSymlink(t *testing.T) {
	b := newBox(t)
	real := filepath.Join(b.root, "mnt/data")
	must(t, os.MkdirAll(filepath.Dir(real), 0o755))
	must(t, os.Rename(b.data, real))
	must(t, os.Symlink(real, b.data))
	write(t, b.data, "a 0600 archived")
	res := b.backup(nil)
	write(t, b.data, "a 0600 changed")
	rr, err := Restore(context.Background(), b.restoreOptions(res.Path))
	must(t, err)
	if target, err := os.Readlink(b.data); err != nil || target != real {
		t.Errorf("data directory symlink = %q, %v; want it kept, to %s", target, err, real)
	}
	if got, _ := os.ReadFile(filepath.Join(real, "a")); string(got) != "archived" {
		t.Errorf("a = %q after restore, want archived", got)
	}
	if old := rr.Restored[real]; !strings.HasPrefix(old, datadir.PreRestore.Path(real, "")) {
		t.Errorf("Restored = %v, want %s replaced", rr.Restored, real)
	}
}

// TestPlainArchiveWithoutRootEntry: an archive that is not authenticated
// decides no owner: with or without a "./" entry, every entry gets
// executor.user's (issue 25 item 1).
func TestPlainArchiveWithoutRootEntry(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to set owners")
	}
	b := newBox(t)
	archive := filepath.Join(b.root, "a.tar.gz")
	must(t, os.WriteFile(archive, sealed(t, tartest.New().File("rootfile", "r", 0o600).Header(&tar.Header{Typeflag: tar.TypeReg, Name: "userfile", Mode: 0o600, Uid: 1000, Gid: 1000}, []byte("u")).Bytes(), false), 0o600))
	o := b.restoreOptions(archive)
	o.Owner = Owner{4321, 4321}
	_, err := Restore(context.Background(), o)
	must(t, err)
	got := snapshot(t, b.data)
	for _, want := range []string{". 040700 4321:4321", "rootfile 100600 4321:4321", "userfile 100600 4321:4321"} {
		found := false
		for _, l := range got {
			found = found || strings.HasPrefix(l, want)
		}
		if !found {
			t.Errorf("restored tree %q lacks %q", got, want)
		}
	}
}

// TestRestoresInOneSecond: pre-restore copies of two restores made in the
// same second get distinct names.
func TestRestoresInOneSecond(t *testing.T) {
	b := newBox(t)
	write(t, b.data, "a 0600 x")
	res := b.backup(nil)
	o := b.restoreOptions(res.Path)
	o.Now = func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }
	var olds []string
	for range 3 {
		rr, err := Restore(context.Background(), o)
		must(t, err)
		olds = append(olds, rr.Restored[b.data])
	}
	if olds[0] == olds[1] || olds[1] == olds[2] || olds[2] == "" {
		t.Errorf("pre-restore copies %q, want distinct ones", olds)
	}
	if got := listing(t, filepath.Dir(b.data)); len(got) != 3 { // data + keep_pre_restore 2
		t.Errorf("beside the data directory: %q, want data and 2 copies", got)
	}
}

// TestRestoreRefusesUnconfiguredPaths: an archive is input. One whose
// manifest names an extra path that is not one of backup.paths (a
// hostile archive naming /etc, or one from a box with other paths) is
// refused before anything changes; DataOnly restores its data alone.
func TestRestoreRefusesUnconfiguredPaths(t *testing.T) {
	b := newBox(t)
	victim := filepath.Join(b.root, "etc")
	if err := os.MkdirAll(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, b.data, "db 0600 data")
	write(t, victim, "passwd 0644 root:x:0:0")
	res := b.backup(func(o *Options) { o.Paths = []string{victim} })
	write(t, victim, "passwd 0644 changed")
	write(t, b.data, "db 0600 newer")
	before, beforeData := snapshot(t, victim), snapshot(t, b.data)
	for _, allowed := range [][]string{nil, {filepath.Join(b.root, "other")}, {victim + "x"}} {
		ro := b.restoreOptions(res.Path)
		ro.AllowedPaths = allowed
		_, err := Restore(context.Background(), ro)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), victim+" is not one of backup.paths") || strings.Count(err.Error(), "\n") > 0 {
			t.Errorf("Restore(AllowedPaths %q) = %v, want one line of ErrInvalid naming %s", allowed, err, victim)
		}
		if diff := cmp.Diff(snapshot(t, victim), before); diff != "" {
			t.Errorf("refused restore changed %s (-got +want):\n%s", victim, diff)
		}
		if diff := cmp.Diff(snapshot(t, b.data), beforeData); diff != "" {
			t.Errorf("refused restore changed the data (-got +want):\n%s", diff)
		}
	}
	// The same path reached through a symlink is the configured one.
	link := filepath.Join(b.root, "etc-link")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	ro := b.restoreOptions(res.Path)
	ro.AllowedPaths = []string{link}
	if _, err := Restore(context.Background(), ro); err != nil {
		t.Errorf("Restore(AllowedPaths through a symlink) = %v", err)
	}
	// DataOnly restores the data and leaves the path alone.
	write(t, victim, "passwd 0644 changed again")
	before = snapshot(t, victim)
	ro = b.restoreOptions(res.Path)
	ro.DataOnly = true
	if _, err := Restore(context.Background(), ro); err != nil {
		t.Errorf("Restore(DataOnly) = %v", err)
	}
	if diff := cmp.Diff(snapshot(t, victim), before); diff != "" {
		t.Errorf("DataOnly restore changed %s (-got +want):\n%s", victim, diff)
	}
}
