package supervisor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
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

// Cgroups: where a writable cgroup v2 hierarchy is mounted (and a
// StateDir is set), every program runs in a cgroup of its own,
// <mount>/hbx.<id>/<program> (id: from the state directory), started
// into it by clone3 (CLONE_INTO_CGROUP: no child escapes between fork
// and move). Every process of the program is then a member whatever it
// did (a new session, its descriptors closed): a stop signals the
// members that left the process group, SIGKILLs every member after
// stopwaitsecs, and a leftover of a dead supervisor
// is whatever is still in a program's cgroup. Only hbx's own cgroups are
// ever signalled.

// progCgroup is one program's cgroup; nil means none (the methods are
// no-ops).
type progCgroup struct {
	path string
	// mount is the cgroup v2 mount path is below, read once when g was
	// made: path is mount joined with the cgroup's path in the hierarchy,
	// so a member is a process whose /proc/PID/cgroup names that path
	// (progcgroup.Holds), whatever is mounted later. Reading mountinfo at
	// each proof, before each signal, cost a parse of every mount for no
	// other answer.
	mount string
	dir   *os.File // held open for CgroupFD
}

// openCgroups gives every program a cgroup under the hbx subtree of
// hbx's own cgroup (never at the hierarchy's root beside another service
// manager's tree or a second hbx's), or records in Info.NoCgroups why it
// cannot (then process groups and markers alone find the programs'
// processes). The subtree's path is recorded in the state directory
// (cgroupRecord), so a later supervisor started in another cgroup still
// finds what this one leaves.
func (s *Supervisor) openCgroups() {
	why := func(reason string) {
		s.closeCgroups()
		s.mu.Lock()
		s.info.Cgroups = ""
		s.info.NoCgroups = reason + ": processes are found by process group and marker alone; one that starts a new session and closes its descriptors escapes them"
		s.mu.Unlock()
	}
	mount := progcgroup.Mount("/proc/self/mountinfo")
	if mount == "" {
		why("no cgroup v2 hierarchy is mounted")
		return
	}
	own, ok := progcgroup.Of("/proc", os.Getpid())
	base := filepath.Join(mount, own)
	if st, err := os.Stat(base); !ok || err != nil || !st.IsDir() {
		why(fmt.Sprintf("hbx's own cgroup (%q) is not under %s", own, mount))
		return
	}
	tree := filepath.Join(base, progcgroup.Subtree(s.cgroupID()))
	for _, p := range s.order {
		path := filepath.Join(tree, p.spec.Name)
		if err := os.MkdirAll(path, 0o755); err != nil {
			why(fmt.Sprintf("hbx's own cgroup %s is not writable (%v)", base, err))
			return
		}
		d, err := os.OpenFile(path, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			why(fmt.Sprintf("open cgroup %s: %v", path, err))
			return
		}
		p.cg = &progCgroup{path: path, mount: mount, dir: d}
	}
	s.mu.Lock()
	s.info.Cgroups, s.info.NoCgroups = tree, ""
	s.mu.Unlock()
	s.log.Info("programs run in cgroups of their own", "cgroups", tree)
}

// oldCgroup is program name's cgroup in the subtree tree, below the
// cgroup v2 mount mount, that a previous supervisor recorded; nil for
// none (tree ""). It is only looked at and signalled, never started into.
func oldCgroup(mount, tree, name string) *progCgroup {
	if tree == "" {
		return nil
	}
	return &progCgroup{path: filepath.Join(tree, name), mount: mount}
}

// cgroupID is the id of this state directory's subtree of program
// cgroups: 12 hex digits of its path's SHA-256.
func (s *Supervisor) cgroupID() string {
	sum := sha256.Sum256([]byte(s.opts.StateDir))
	return hex.EncodeToString(sum[:6])
}

// cgroupRecord is the file recording the subtree of program cgroups of
// the supervisor that last ran on this state directory.
func (s *Supervisor) cgroupRecord() string { return filepath.Join(s.opts.StateDir, "cgroups") }

// recordCgroups writes the current subtree (none: "") to cgroupRecord.
func (s *Supervisor) recordCgroups() error {
	tree := s.Info().Cgroups
	if tree == "" {
		return nil
	}
	return atomicfile.WriteFile(s.cgroupRecord(), []byte(tree+"\n"), 0o600)
}

// recordedCgroups returns the subtree a previous supervisor recorded
// when it is another than the current one and still exists: a subtree of
// this state directory's id below the cgroup v2 mount, never anything
// else the file may name; with that mount. "" for none.
func (s *Supervisor) recordedCgroups() (tree, mount string) {
	b, err := os.ReadFile(s.cgroupRecord())
	if err != nil {
		return "", ""
	}
	tree = filepath.Clean(strings.TrimSpace(string(b)))
	mount = progcgroup.Mount("/proc/self/mountinfo")
	if mount == "" || tree == s.Info().Cgroups || !strings.HasPrefix(tree, mount+"/") ||
		filepath.Base(tree) != progcgroup.Subtree(s.cgroupID()) {
		return "", ""
	}
	if st, err := os.Stat(tree); err != nil || !st.IsDir() {
		return "", ""
	}
	return tree, mount
}

// closeCgroups closes the programs' cgroup directories and removes those
// left empty (a cgroup with members cannot be removed: the next
// supervisor finds them there).
func (s *Supervisor) closeCgroups() {
	for _, p := range s.order {
		if p.cg != nil {
			p.cg.dir.Close()
			if os.Remove(p.cg.path) == nil {
				_ = os.Remove(filepath.Dir(p.cg.path))
			}
			p.cg = nil
		}
	}
}

// into makes a spawn start in g (clone3 with CLONE_INTO_CGROUP).
func (g *progCgroup) into(sys *syscall.SysProcAttr) {
	if g != nil {
		sys.UseCgroupFD, sys.CgroupFD = true, int(g.dir.Fd())
	}
}

// members returns the pids in g (cgroup.procs) that run
// (procscan.Running: one whose main thread exited is one); nil for none.
func (g *progCgroup) members() []int {
	if g == nil {
		return nil
	}
	return progcgroup.Procs(g.path)
}

// holds reports whether pid is a member of g now.
func (g *progCgroup) holds(pid int) bool {
	return g != nil && progcgroup.Holds(g.mount, g.path, pid)
}

// signal sends sig to every member of g, each only once proven a member
// through a pidfd (progcgroup.Signal: a pid reused meanwhile gets
// nothing), and returns those signalled.
func (g *progCgroup) signal(sig syscall.Signal) []procscan.Process {
	if g == nil {
		return nil
	}
	return progcgroup.SignalIn(g.mount, g.path, sig, nil)
}

// kill sends SIGKILL to every member of g, one by one; callers poll
// until it is empty (a member forked meanwhile is found at the next
// look). cgroup.kill is not used: on the kernels seen here (6.18), after
// one write to it every later clone3 with CLONE_INTO_CGROUP into that
// cgroup is killed at birth (its kill sequence is read from the parent's
// cgroup and compared with the target's), so the program could never
// start again.
func (g *progCgroup) kill() { g.signal(syscall.SIGKILL) }

// cgroupEscaped returns the members of p's cgroup that are neither its
// leader nor in its process group, nor already in known.
func (p *proc) cgroupEscaped(known []procscan.Process) []procscan.Process {
	var out []procscan.Process
	for _, pid := range p.cg.members() {
		if pid == p.pid || (p.pgid > 0 && pgidOf(pid) == p.pgid) || containsPID(known, pid) {
			continue
		}
		out = append(out, procscan.Process{PID: pid, Command: procscan.Comm(pid)})
	}
	return out
}

func containsPID(ps []procscan.Process, pid int) bool {
	for _, q := range ps {
		if q.PID == pid {
			return true
		}
	}
	return false
}

// stopCgroupLeftovers stops what a previous supervisor left in p's
// cgroup: stopsignal to each member, SIGKILL to every member after
// stopwaitsecs; each is logged once gone. It fails when members remain 5 s
// after the SIGKILL.
func (s *Supervisor) stopCgroupLeftovers(ctx context.Context, p *proc, g *progCgroup) error {
	sig := p.stopSignal()
	left := g.signal(sig)
	if len(left) == 0 && len(g.members()) == 0 {
		return nil
	}
	killAt := time.Now().Add(p.spec.StopWait)
	giveUp := killAt.Add(5 * time.Second)
	killed := false
	for len(g.members()) > 0 {
		now := time.Now()
		if !now.Before(killAt) {
			g.kill()
			killed = true
		}
		if now.After(giveUp) {
			return errors.New("cgroup " + g.path + " still has members after SIGKILL")
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stop cgroup %s: %w", g.path, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	for _, q := range left {
		s.log.Warn("stopped a process left running by a previous supervisor", "program", p.spec.Name, "pid", q.PID, "command", q.Command, "found_by", "cgroup", "signal", signalName(sig), "sigkill_after_stopwaitsecs", killed)
	}
	return nil
}

// dropCgroup gives up p's cgroup after a spawn into it failed with err
// (ENOSYS: clone3 with CLONE_INTO_CGROUP is not available, as under
// qemu-user): p runs without one from now on, found by process group and
// marker, and Info says so.
func (p *proc) dropCgroup(err error) {
	p.s.log.Warn("cannot start a program into its cgroup; running it without one", "program", p.spec.Name, "err", err)
	p.cg.dir.Close()
	_ = os.Remove(p.cg.path)
	p.cg = nil
	p.s.mu.Lock()
	p.s.info.Cgroups = ""
	p.s.info.NoCgroups = fmt.Sprintf("starting a process into a cgroup fails here (clone3: %v): processes are found by process group and marker alone; one that starts a new session and closes its descriptors escapes them", err)
	p.s.mu.Unlock()
}
