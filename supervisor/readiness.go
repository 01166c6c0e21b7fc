package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/progcgroup"
	"github.com/hermesbox/hbx/internal/regfile"
)

// Readiness is what a started program must offer before it is RUNNING,
// beside StartSecs (Program.Probe, built by Probe): every check that is
// set must pass. A program that exits, or offers none of it within its
// HealthWait, failed its start (it counts toward StartRetries).
type Readiness struct {
	// LockFile is an absolute path whose flock (or POSIX lock) is held by
	// a process of the program: its leader, a descendant of the leader,
	// or a member of its process group (the holder /proc/locks names).
	LockFile string
	// JSONFile is an absolute path to a JSON object whose JSONField (a
	// dotted path of object keys) is JSONValue (compared as text: a
	// string's own text, else its JSON form) and which was modified
	// within MaxAge (0: any age). At most 1 MiB is read.
	JSONFile, JSONField, JSONValue string
	MaxAge                         time.Duration
	// TCP is a host:port that accepts a connection.
	TCP string
	// HTTP is a URL that answers a GET with a 2xx status.
	HTTP string
}

// IsZero reports whether r sets no check.
func (r Readiness) IsZero() bool { return r == Readiness{} }

// ErrNotReady: a readiness check of a program does not pass (yet).
var ErrNotReady = errors.New("not ready")

// Probe returns r's checks as a ProcessProbe: told the program's leader
// pid, it runs the lock, JSON, TCP and HTTP checks in that order and
// returns the first failure, wrapping ErrNotReady.
func (r Readiness) Probe() ProcessProbe {
	return ProcessProbeFunc(func(ctx context.Context, pid int) error {
		checks := []struct {
			set   bool
			check func() error
		}{
			{r.LockFile != "", func() error { return checkLockHeld(r.LockFile, pid) }},
			{r.JSONFile != "", func() error { return checkJSONField(r.JSONFile, r.JSONField, r.JSONValue, r.MaxAge, time.Now()) }},
			{r.TCP != "", func() error { return checkTCP(ctx, r.TCP) }},
			{r.HTTP != "", func() error { return checkHTTP(ctx, r.HTTP) }},
		}
		for _, c := range checks {
			if !c.set {
				continue
			}
			if err := c.check(); err != nil {
				return notReady{err}
			}
		}
		return nil
	})
}

// notReady is a failed readiness check: its text is the check's (the
// status already says "not ready: "), and it is ErrNotReady.
type notReady struct{ error }

// Unwrap returns the check's error and ErrNotReady.
func (e notReady) Unwrap() []error { return []error{e.error, ErrNotReady} }

// checkLockHeld checks that a process of the program whose leader is
// leader holds a lock on path.
func checkLockHeld(path string, leader int) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fmt.Errorf("lock %s: %w", path, err)
	}
	holders, err := lockHolders("/proc/locks", uint64(st.Dev), st.Ino)
	if err != nil {
		return fmt.Errorf("lock %s: %w", path, err)
	}
	for _, h := range holders {
		if inTree(h, leader) {
			return nil
		}
	}
	if len(holders) > 0 {
		return fmt.Errorf("lock %s is held by pid %d, not by the program", path, holders[0])
	}
	return fmt.Errorf("lock %s is not held", path)
}

// lockHolders returns the pids the locks file (/proc/locks' format) names
// as holding a FLOCK or POSIX lock on the file dev, ino; waiters ("->")
// are not holders.
func lockHolders(locksFile string, dev, ino uint64) ([]int, error) {
	f, err := os.Open(locksFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(dev), unix.Minor(dev), ino)
	var pids []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "1: FLOCK  ADVISORY  WRITE 14811 fe:00:9977865 0 EOF"
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || fs[1] == "->" || (fs[1] != "FLOCK" && fs[1] != "POSIX") || fs[5] != want {
			continue
		}
		if pid, err := strconv.Atoi(fs[4]); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids, sc.Err()
}

// inTree reports whether pid is leader, a descendant of it, or a member
// of its process group.
func inTree(pid, leader int) bool {
	if leader <= 0 {
		return false
	}
	if members, ok := progcgroup.Members("/proc", leader); ok {
		// The program's cgroup is its tree: a member that left the
		// process group and the ppid chain (a new session, reparented)
		// is the program's; nothing else is.
		return slices.Contains(members, pid)
	}
	for range 64 {
		if pid == leader {
			return true
		}
		ppid, pgid, ok := ppidPgid(pid)
		if !ok {
			return false
		}
		if pgid == leader {
			return true
		}
		if ppid <= 1 {
			return false
		}
		pid = ppid
	}
	return false
}

// ppidPgid reads pid's parent and process group from /proc/PID/stat.
func ppidPgid(pid int) (ppid, pgid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || len(s) < i+2 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 3 {
		return 0, 0, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgid, err2 := strconv.Atoi(f[2])
	return ppid, pgid, err1 == nil && err2 == nil
}

// jsonMax bounds the JSON file read.
const jsonMax = 1 << 20

// checkJSONField checks that the JSON object in path has field (dotted)
// equal to want and was modified within maxAge of now (0: any age).
// path is in a directory the program's user controls and hbx reads it as
// root: it is opened without following a symlink at its end and without
// blocking (regfile.OpenNoFollow), and a symlink, FIFO, device, socket or
// directory there is not ready ("is not a regular file"), at once.
func checkJSONField(path, field, want string, maxAge time.Duration, now time.Time) error {
	f, err := regfile.OpenNoFollow(path)
	if errors.Is(err, regfile.ErrNotRegular) {
		return fmt.Errorf("state %s is not a regular file", path)
	}
	if err != nil {
		return fmt.Errorf("state %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("state %s: %w", path, err)
	}
	if age := now.Sub(st.ModTime()); maxAge > 0 && age > maxAge {
		return fmt.Errorf("state %s is stale (written %s ago, the bound is %s)", path, age.Round(time.Second), maxAge)
	}
	b, err := io.ReadAll(io.LimitReader(f, jsonMax+1))
	if err != nil {
		return fmt.Errorf("state %s: %w", path, err)
	}
	if len(b) > jsonMax {
		return fmt.Errorf("state %s is larger than %d bytes", path, jsonMax)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("state %s: %w", path, err)
	}
	for _, k := range strings.Split(field, ".") {
		obj, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("state %s has no %s", path, field)
		}
		if v, ok = obj[k]; !ok {
			return fmt.Errorf("state %s has no %s", path, field)
		}
	}
	got, ok := v.(string)
	if !ok {
		j, _ := json.Marshal(v)
		got = string(j)
	}
	if got != want {
		return fmt.Errorf("state %s says %s %q, want %q", path, field, got, want)
	}
	return nil
}

// checkTCP checks that addr accepts a TCP connection.
func checkTCP(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", addr, err)
	}
	return c.Close()
}

// checkHTTP checks that url answers a GET with a 2xx status. Redirects
// are not followed.
func checkHTTP(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("GET %s answered %s", url, resp.Status)
	}
	return nil
}
