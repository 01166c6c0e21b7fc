// SPDX-License-Identifier: Apache-2.0

package hostbox

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/internal/pathtrust"
	"github.com/hermesbox/hbx/internal/testenv"
)

func TestDefaultRootOrder(t *testing.T) {
	for name, tc := range map[string]struct {
		env  map[string]string
		want string
		err  bool
	}{
		"HBX_BOX_ROOT wins": {map[string]string{RootEnv: "/srv/boxes", "XDG_DATA_HOME": "/x", "HOME": "/h"}, "/srv/boxes", false},
		"XDG_DATA_HOME":     {map[string]string{"XDG_DATA_HOME": "/x", "HOME": "/h"}, "/x/hbx/boxes", false},
		"relative XDG":      {map[string]string{"XDG_DATA_HOME": "x", "HOME": "/h"}, "/h/.local/share/hbx/boxes", false},
		"HOME":              {map[string]string{"HOME": "/h"}, "/h/.local/share/hbx/boxes", false},
		"nothing":           {map[string]string{}, "", true},
	} {
		got, err := DefaultRoot(func(k string) string { return tc.env[k] })
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("%s: DefaultRoot = %q, %v; want %q (error %v)", name, got, err, tc.want, tc.err)
		}
	}
}

// writeTestBox makes a box directory under root with the given .env.
func writeTestBox(t *testing.T, root, name, env string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, name), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, name, EnvFile), []byte(env), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestOpenAndList(t *testing.T) {
	root := t.TempDir()
	writeTestBox(t, root, "bob", "BOX=bob\nHOST_PORT=4790\n")
	writeTestBox(t, root, "alice", "BOX='alice'\nHOST_PORT='4789'\nBIND_ADDRESS=127.0.0.2\n")
	writeTestBox(t, root, "Not-A-Box", "BOX=x\n")
	if err := os.MkdirAll(filepath.Join(root, "empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	boxes, err := List(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(boxes) != 2 || boxes[0].Name != "alice" || boxes[1].Name != "bob" {
		t.Fatalf("List = %+v, want alice and bob", boxes)
	}
	a := boxes[0]
	if a.Port() != 4789 || a.URL() != "http://127.0.0.2:4789/" || a.Project() != "hbx-alice" || a.Path(KeyFile) != filepath.Join(root, "alice", "mcp.key") {
		t.Errorf("alice: port %d url %s project %s key %s", a.Port(), a.URL(), a.Project(), a.Path(KeyFile))
	}
	if _, err := Open(root, "carol"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open(carol) = %v, want ErrNotFound", err)
	}
	if _, err := Open(root, "../alice"); !errors.Is(err, ErrInvalid) {
		t.Errorf("Open(../alice) = %v, want ErrInvalid", err)
	}
	writeTestBox(t, root, "mallory", "BOX=alice\n")
	if _, err := Open(root, "mallory"); !errors.Is(err, ErrInvalid) {
		t.Errorf("Open of a .env naming another box = %v, want ErrInvalid", err)
	}
	// A copied box (its .env names another) and a malformed one: List
	// still lists every box, those two marked broken, their ports kept.
	writeTestBox(t, root, "mangled", "GARBAGE\n")
	boxes, err = List(root)
	if err != nil {
		t.Fatalf("List with broken boxes = %v", err)
	}
	broken := map[string]Box{}
	for _, b := range boxes {
		if b.Broken != "" {
			broken[b.Name] = b
		}
	}
	if len(boxes) != 4 || len(broken) != 2 || broken["mallory"].Broken == "" || broken["mangled"].Broken == "" {
		t.Errorf("List = %+v, want alice, bob, and mallory and mangled broken", boxes)
	}
	if st := (Docker{Program: "false"}).status(context.Background(), broken["mallory"]); !strings.HasPrefix(st.State, "broken: ") {
		t.Errorf("status of a broken box = %q, want broken: ...", st.State)
	}
	if boxes, err := List(filepath.Join(root, "missing")); err != nil || len(boxes) != 0 {
		t.Errorf("List(missing root) = %v, %v; want none", boxes, err)
	}
}

func TestCheckPortAndChoosePort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	busy := l.Addr().(*net.TCPAddr).Port
	boxes := []Box{{Name: "alice", Env: Env{{"HOST_PORT", "4788"}}}}
	for name, tc := range map[string]struct {
		port int
		ok   bool
	}{
		"zero":          {0, false},
		"too big":       {65536, false},
		"in use":        {busy, false},
		"held by a box": {4788, false},
	} {
		err := CheckPort("127.0.0.1", tc.port, boxes)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("%s: CheckPort(%d) = %v, want ok=%v", name, tc.port, err, tc.ok)
		}
	}
	p, err := ChoosePort("127.0.0.1", boxes)
	if err != nil {
		t.Fatal(err)
	}
	if p <= FirstPort || p > lastPort || CheckPort("127.0.0.1", p, boxes) != nil {
		t.Errorf("ChoosePort = %d: want a free port above %d that no box holds", p, FirstPort)
	}
}

// TestNewRefusesBadInputCreatingNothing: every refusal comes before the
// root, the box directory or a docker command exists (the docker program
// here does not exist: reaching it would fail differently).
func TestNewRefusesBadInputCreatingNothing(t *testing.T) {
	parent := t.TempDir()
	root := filepath.Join(parent, "boxes")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	busy := l.Addr().(*net.TCPAddr).Port
	d := Docker{Program: filepath.Join(parent, "no-docker")}
	base := NewOptions{Root: root, Name: "alice", AgentImage: "agent:1"}
	for name, edit := range map[string]func(*NewOptions){
		"bad name":       func(o *NewOptions) { o.Name = "Alice_1" },
		"no agent image": func(o *NewOptions) { o.AgentImage = "" },
		"port in use":    func(o *NewOptions) { o.Port = busy },
		"port range":     func(o *NewOptions) { o.Port = 70000 },
		"bad variable":   func(o *NewOptions) { o.Set = []Var{{"X", "it's"}} },
		"reserved var":   func(o *NewOptions) { o.Set = []Var{{"HOST_PORT", "1"}} },
		"compose var":    func(o *NewOptions) { o.Set = []Var{{"COMPOSE_PROJECT_NAME", "hbx-bob"}} },
		"bind name":      func(o *NewOptions) { o.BindAddress = "localhost" },
		"bind brackets":  func(o *NewOptions) { o.BindAddress = "[::1]" },
		"agent image":    func(o *NewOptions) { o.AgentImage = `agent:1\` },
		"executor image": func(o *NewOptions) { o.ExecutorImage = "x\ny" },
		"config dir":     func(o *NewOptions) { o.ConfigDir = filepath.Join(parent, "nope") },
	} {
		o := base
		edit(&o)
		_, err := d.New(context.Background(), o)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: New = %v, want ErrInvalid", name, err)
		}
		if _, serr := os.Lstat(root); !errors.Is(serr, os.ErrNotExist) {
			t.Errorf("%s: the root exists after a refused New (%v)", name, serr)
		}
	}
	// A duplicate: the box directory exists; nothing in it changes.
	writeTestBox(t, root, "alice", "BOX=alice\nHOST_PORT="+strconv.Itoa(FirstPort)+"\n")
	if _, err := d.New(context.Background(), base); !errors.Is(err, ErrInvalid) {
		t.Errorf("duplicate: New = %v, want ErrInvalid", err)
	}
	ents, _ := os.ReadDir(filepath.Join(root, "alice"))
	if len(ents) != 1 {
		t.Errorf("duplicate: the existing box now holds %d entries, want its one .env", len(ents))
	}
}

// TestNewWithoutDockerCreatesNothing: when docker does not answer the
// project check, New fails before the root or the box directory exists.
func TestNewWithoutDockerCreatesNothing(t *testing.T) {
	parent := t.TempDir()
	root := filepath.Join(parent, "boxes")
	d := Docker{Program: "false"}
	_, err := d.New(context.Background(), NewOptions{Root: root, Name: "alice", AgentImage: "agent:1"})
	if err == nil {
		t.Fatal("New with a failing docker: want an error")
	}
	if _, serr := os.Lstat(root); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("the root exists after a failed New (%v)", serr)
	}
}

// TestBoxRootOthersControlIsRefused: a box root or box directory that
// another user owns or may write (a world-writable root lets anyone
// rename a box away and put a directory of their own, with its own
// compose.yaml and .env, in its place) is refused by New, Open and List
// before hbx box reads or runs anything there.
func TestBoxRootOthersControlIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "chown to another uid needs root")
	}
	const other = 4242
	for name, setup := range map[string]func(t *testing.T, root string){
		"root world-writable": func(t *testing.T, root string) { chmod(t, root, 0o777) },
		"root of another uid": func(t *testing.T, root string) { chown(t, root, other) },
		"root group-writable": func(t *testing.T, root string) { chownGroup(t, root, other); chmod(t, root, 0o770) },
		"dir of another uid":  func(t *testing.T, root string) { chown(t, filepath.Join(root, "alice"), other) },
		"dir world-writable":  func(t *testing.T, root string) { chmod(t, filepath.Join(root, "alice"), 0o777) },
	} {
		root := filepath.Join(t.TempDir(), "boxes")
		writeTestBox(t, root, "alice", "BOX=alice\nHOST_PORT=4788\n")
		setup(t, root)
		if _, err := Open(root, "alice"); !errors.Is(err, ErrInvalid) || !errors.Is(err, pathtrust.ErrUntrusted) {
			t.Errorf("%s: Open = %v, want ErrInvalid and ErrUntrusted", name, err)
		}
		if strings.HasPrefix(name, "root") {
			if _, err := List(root); !errors.Is(err, pathtrust.ErrUntrusted) {
				t.Errorf("%s: List = %v, want ErrUntrusted", name, err)
			}
			d := Docker{Program: filepath.Join(root, "no-docker")}
			_, err := d.New(context.Background(), NewOptions{Root: root, Name: "bob", AgentImage: "agent:1"})
			if !errors.Is(err, ErrInvalid) || !errors.Is(err, pathtrust.ErrUntrusted) {
				t.Errorf("%s: New = %v, want ErrInvalid and ErrUntrusted", name, err)
			}
			if _, err := os.Lstat(filepath.Join(root, "bob")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: New made bob (%v)", name, err)
			}
		}
	}
}

func chmod(t *testing.T, p string, m os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, m); err != nil {
		t.Fatal(err)
	}
}

func chown(t *testing.T, p string, uid int) {
	t.Helper()
	if err := os.Chown(p, uid, -1); err != nil {
		t.Fatal(err)
	}
}

func chownGroup(t *testing.T, p string, gid int) {
	t.Helper()
	if err := os.Chown(p, -1, gid); err != nil {
		t.Fatal(err)
	}
}

// TestNewClaimsItsPortUnderTheRootLock: two News in one root that chose
// the same free port: the one that writes its box second sees the
// first's .env under the root's flock and chooses again (or, for a port
// given with --port, is refused, making nothing), so two boxes never
// hold one port.
func TestNewClaimsItsPortUnderTheRootLock(t *testing.T) {
	root := filepath.Join(t.TempDir(), "boxes")
	d := Docker{Program: filepath.Join(root, "no-docker")}
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	const port = 4788
	newBox := func(name string) Box {
		b := Box{Name: name, Dir: filepath.Join(root, name)}
		b.Env = Env{{"BOX", name}, {"HOST_PORT", strconv.Itoa(port)}}
		return b
	}
	// The first New holds the root while it writes alice's .env.
	unlock, err := lockRoot(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	bob := newBox("bob")
	o := NewOptions{Root: root, Name: "bob", BindAddress: "127.0.0.1", portChosen: true}
	go func() {
		done <- d.create(context.Background(), &bob, o, "test", func() error { return nil })
	}()
	writeTestBox(t, root, "alice", "BOX=alice\nHOST_PORT=4788\n")
	unlock()
	if err := <-done; err != nil {
		t.Fatalf("create(bob) = %v", err)
	}
	got, err := Open(root, "bob")
	if err != nil {
		t.Fatal(err)
	}
	if got.Port() == port || bob.Port() != got.Port() {
		t.Errorf("bob's .env holds port %d (the caller's box says %d), want one other than alice's %d", got.Port(), bob.Port(), port)
	}

	carol := newBox("carol")
	o = NewOptions{Root: root, Name: "carol", BindAddress: "127.0.0.1"}
	if err := d.create(context.Background(), &carol, o, "test", func() error { return nil }); !errors.Is(err, ErrInvalid) {
		t.Errorf("create(carol) on alice's --port = %v, want ErrInvalid", err)
	}
	if _, err := os.Lstat(carol.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused create made %s (%v)", carol.Dir, err)
	}
}
