package rehearse

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/atomicfile"
	"github.com/hermesbox/hbx/internal/procscan"
	"github.com/hermesbox/hbx/internal/progcgroup"
)

// Cgroups: where a writable cgroup v2 hierarchy is mounted, the payload
// runs in a cgroup of its own, <hbx's own cgroup>/hbx.<id>/rehearsal
// (id: from the data directory, never a supervisor's; a program cgroup
// for internal/progcgroup, so the readiness gate counts its members as
// the real start's does), started into it by clone3. Every process it
// starts is then a member whatever it does (a new session, its
// descriptors closed), and the stop ends each member. Its path is
// recorded in the scratch directory (CgroupRecord) before it is made, so
// the next rehearsal, in whatever cgroup it runs, stops what a killed hbx
// left in it.

// CgroupRecord is the file in the scratch directory that names the
// rehearsal's cgroup (one line), written before the cgroup is made.
const CgroupRecord = ".cgroup"

// cgroupLeaf is the name of the rehearsal's cgroup in its subtree.
const cgroupLeaf = "rehearsal"

// cgroup is the rehearsal's cgroup; nil means none (the methods are
// no-ops).
type cgroup struct {
	path string   // absolute, below the mount
	dir  *os.File // held open for launch.Spec.Cgroup; nil for a leftover
}

// cgroupID is the id of dataDir's rehearsal subtree: 12 hex digits of
// the SHA-256 of "rehearsal:" and its path (so never a supervisor's
// subtree, whose id comes from its state directory).
func cgroupID(dataDir string) string {
	sum := sha256.Sum256([]byte("rehearsal:" + filepath.Clean(dataDir)))
	return hex.EncodeToString(sum[:6])
}

// cgroupPlace returns where this process's rehearsal of dataDir runs
// (absolute, below the cgroup v2 mount), below its own cgroup (never at the
// hierarchy's root beside another manager's tree); an error says why
// there is none.
func cgroupPlace(dataDir string) (string, error) {
	mount := progcgroup.Mount("/proc/self/mountinfo")
	if mount == "" {
		return "", errors.New("no cgroup v2 hierarchy is mounted")
	}
	own, ok := progcgroup.Of("/proc", os.Getpid())
	base := filepath.Join(mount, own)
	if st, err := os.Stat(base); !ok || err != nil || !st.IsDir() {
		return "", fmt.Errorf("hbx's own cgroup (%q) is not under %s", own, mount)
	}
	return filepath.Join(base, progcgroup.Subtree(cgroupID(dataDir)), cgroupLeaf), nil
}

// openCgroup makes the rehearsal's cgroup, once what a killed rehearsal
// left in it is stopped and its path is recorded in s; nil, logged in one
// line, where none is writable (then the process group, launch's marker
// and the held file alone find the payload's processes).
func (o *Options) openCgroup(ctx context.Context, s *scratch) *cgroup {
	none := func(why string) *cgroup {
		o.Logger.Warn("the rehearsal runs without a cgroup: its processes are found by process group, marker and held file alone; one that starts a new session and closes its descriptors escapes the stop", "reason", why)
		return nil
	}
	path, err := cgroupPlace(o.DataDir)
	if err != nil {
		return none(err.Error())
	}
	g := &cgroup{path: path}
	if err := stopLeftover(ctx, g, o.Logger); err != nil {
		return none(err.Error())
	}
	if err := atomicfile.WriteFile(filepath.Join(s.dir, CgroupRecord), []byte(path+"\n"), 0o600); err != nil {
		return none(fmt.Sprintf("record the cgroup: %v", err))
	}
	if err := os.MkdirAll(path, 0o755); err != nil {
		return none(fmt.Sprintf("hbx's own cgroup %s is not writable (%v)", filepath.Dir(filepath.Dir(path)), err))
	}
	if g.dir, err = os.OpenFile(path, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
		g.remove()
		return none(fmt.Sprintf("open cgroup %s: %v", path, err))
	}
	o.Logger.Info("the rehearsal runs in a cgroup of its own", "cgroup", path)
	return g
}

// recordedCgroup returns the cgroup the scratch directory dir records
// for dataDir's rehearsals; nil when it records none hbx would make: a
// record that is not this user's regular file with one name (the
// directory was the payload's), or that names anything but a rehearsal
// cgroup of dataDir below the cgroup v2 mount.
func recordedCgroup(dir, dataDir string) *cgroup {
	fd, err := unix.Open(filepath.Join(dir, CgroupRecord), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), CgroupRecord)
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() || st.Nlink != 1 {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return nil
	}
	path := filepath.Clean(strings.TrimSpace(string(b)))
	mount := progcgroup.Mount("/proc/self/mountinfo")
	if mount == "" || !strings.HasPrefix(path, mount+"/") || filepath.Base(path) != cgroupLeaf ||
		filepath.Base(filepath.Dir(path)) != progcgroup.Subtree(cgroupID(dataDir)) {
		return nil
	}
	return &cgroup{path: path}
}

// stopLeftover SIGKILLs what a killed rehearsal left in g (each member
// logged to log) and removes g; nothing when g is nil or does not exist.
func stopLeftover(ctx context.Context, g *cgroup, log *slog.Logger) error {
	if g == nil {
		return nil
	}
	if _, err := os.Stat(g.path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	stopped, err := g.drain(ctx, time.Now())
	for _, p := range stopped {
		log.Warn("stopped a process an interrupted rehearsal left", "pid", p.PID, "command", p.Command, "found_by", "cgroup", "cgroup", g.path)
	}
	if err != nil {
		return err
	}
	return g.remove()
}

// members returns the running processes in g (progcgroup.Procs).
func (g *cgroup) members() []int { return progcgroup.Procs(g.path) }

// signal sends sig to every member of g for which skip is false, each
// only once proven a member through a pidfd (progcgroup.Signal: a pid
// reused meanwhile gets nothing), and returns them.
func (g *cgroup) signal(sig syscall.Signal, skip func(pid int) bool) []procscan.Process {
	return progcgroup.Signal(g.path, sig, skip)
}

// drain waits until g has no member, SIGKILLing every member from
// killAt on; it returns the processes it SIGKILLed, and fails when
// members remain 30 s after killAt (or ctx ends).
func (g *cgroup) drain(ctx context.Context, killAt time.Time) ([]procscan.Process, error) {
	var killed []procscan.Process
	giveUp := killAt.Add(30 * time.Second)
	for len(g.members()) > 0 {
		now := time.Now()
		if !now.Before(killAt) {
			for _, p := range g.signal(syscall.SIGKILL, nil) {
				if !containsPID(killed, p.PID) {
					killed = append(killed, p)
				}
			}
		}
		if now.After(giveUp) {
			return killed, fmt.Errorf("cgroup %s still has members 30s after SIGKILL: %v", g.path, g.members())
		}
		select {
		case <-ctx.Done():
			return killed, fmt.Errorf("stop cgroup %s: %w", g.path, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return killed, nil
}

// remove closes g and removes it, and its subtree when left empty (a
// supervisor's subtree is never this one). A cgroup whose last member
// just exited may refuse for a moment (EBUSY): remove tries for 5 s.
func (g *cgroup) remove() error {
	if g == nil {
		return nil
	}
	if g.dir != nil {
		g.dir.Close()
		g.dir = nil
	}
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err = os.Remove(g.path)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			_ = os.Remove(filepath.Dir(g.path)) // fails while another is in it
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup: %w", err)
		}
	}
}

// term sends SIGTERM to every member of g outside the payload's process
// group pgid (launch sends it to the group; pgid 0: to every member).
func (g *cgroup) term(pgid int) {
	if g == nil {
		return
	}
	g.signal(syscall.SIGTERM, func(pid int) bool {
		st, err := procscan.ReadStat(pid)
		return pgid > 0 && err == nil && st.PGID == pgid
	})
}

// end waits until g is empty, SIGKILLing what is left from killAt on
// (logged); the caller removes g.
func (o *Options) end(g *cgroup, killAt time.Time) error {
	if g == nil {
		return nil
	}
	killed, err := g.drain(context.Background(), killAt)
	if len(killed) > 0 {
		o.Logger.Warn("processes of the rehearsed release ignored SIGTERM; killed them", "killed", procscan.Join(killed), "found_by", "cgroup")
	}
	if err != nil {
		return fmt.Errorf("stop the rehearsed release: %w", err)
	}
	return nil
}

func containsPID(ps []procscan.Process, pid int) bool {
	for _, q := range ps {
		if q.PID == pid {
			return true
		}
	}
	return false
}
