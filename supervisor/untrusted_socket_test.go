package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hermesbox/hbx/internal/testenv"
)

// With HBXTEST_FAKE_SUPERVISOR=SOCKET the test binary is a fake
// supervisor of another user: it serves made-up RUNNING lines on SOCKET
// and holds SOCKET.held (flocked, with planted text), until killed. It is
// dispatched from init, before TestMain.
func init() {
	if sock := os.Getenv("HBXTEST_FAKE_SUPERVISOR"); sock != "" {
		os.Exit(fakeSupervisor(sock))
	}
}

func fakeSupervisor(sock string) int {
	held, err := os.OpenFile(HeldPath(sock), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := unix.Flock(int(held.Fd()), unix.LOCK_EX); err != nil {
		return 2
	}
	fmt.Fprintf(held, "%d\nplanted text\n", os.Getpid())
	ln, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println("ready")
	_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `[{"name":"executor","state":"RUNNING","pid":1}]`)
	}))
	return 0
}

// fakeUID is the uid of the other user the fake supervisor runs as.
const fakeUID = 64731

// otherUser returns fakeUID, creating a user with it (removed at the end
// of the test) when the system has none. It needs root.
func otherUser(t *testing.T) int {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "needs root to run a process as another user")
	}
	if _, err := user.LookupId(strconv.Itoa(fakeUID)); err == nil {
		return fakeUID
	}
	name := fmt.Sprintf("hbxtest%d", fakeUID)
	out, err := exec.Command("useradd", "--uid", strconv.Itoa(fakeUID), "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput()
	if err != nil {
		testenv.Missing(t, fmt.Sprintf("useradd %s: %v: %s (apt-get install passwd)", name, err, out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v: %s", name, err, out)
		}
	})
	return fakeUID
}

// TestUntrustedSupervisorNotBelieved: a supervisor served by another user
// (one who could write the socket's directory) is refused on connect
// (SO_PEERCRED), and a held file that user planted is not read, so
// neither its made-up RUNNING lines nor its text reach hbx status,
// shutdown, backup or health (issue 25 item 2).
func TestUntrustedSupervisorNotBelieved(t *testing.T) {
	uid := otherUser(t)
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // t.TempDir's are 0700
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run := filepath.Join(dir, "run")
	if err := os.Mkdir(run, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(run, uid, uid); err != nil {
		t.Fatal(err)
	}
	// The test binary's own directory is root's 0700: run a copy the
	// other user can execute.
	bin := filepath.Join(dir, "fake")
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(run, "hbx.sock")
	c := exec.Command(bin)
	c.Env = append(os.Environ(), "HBXTEST_FAKE_SUPERVISOR="+sock)
	c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	c.Stderr = os.Stderr
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	line := make([]byte, 6)
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "ready\n" {
		t.Fatalf("fake supervisor: %q, %v", line, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = Dial(ctx, sock)
	if !errors.Is(err, ErrUntrustedPeer) || !strings.Contains(err.Error(), fmt.Sprintf("uid %d", uid)) {
		t.Errorf("Dial(another user's socket) = %v, want ErrUntrustedPeer naming uid %d", err, uid)
	}
	_, err = DialHeld(ctx, sock)
	if !errors.Is(err, ErrUntrustedPeer) {
		t.Errorf("DialHeld(another user's socket) = %v, want ErrUntrustedPeer", err)
	}
	// Without the fake server, the planted held file is not read.
	c.Process.Kill()
	c.Wait()
	holder := exec.Command(bin)
	holder.Env = append(os.Environ(), "HBXTEST_FAKE_SUPERVISOR="+filepath.Join(run, "other.sock"))
	holder.SysProcAttr = c.SysProcAttr
	hout, _ := holder.StdoutPipe()
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	if _, err := io.ReadFull(hout, line); err != nil {
		t.Fatal(err)
	}
	err = CheckHeld(filepath.Join(run, "other.sock"))
	if err == nil || errors.Is(err, ErrHolding) || strings.Contains(err.Error(), "planted text") || !strings.Contains(err.Error(), "not root") {
		t.Errorf("CheckHeld(another user's held file) = %v, want a refusal without its text", err)
	}
}
