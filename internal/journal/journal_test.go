package journal

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

type record struct {
	Header
	Phase string `json:"phase"`
}

func testFile(t *testing.T, unversioned bool) File {
	t.Helper()
	return File{Path: filepath.Join(t.TempDir(), "j.json"), What: "test journal", Format: 2, Unversioned: unversioned, Fix: "move it away"}
}

// TestWriteRead: a journal is written mode 0600 with "format" as its
// first key and read back as written.
func TestWriteRead(t *testing.T) {
	f := testFile(t, false)
	if err := f.Write(&record{Phase: "staging"}); err != nil {
		t.Fatalf("Write() = %v", err)
	}
	b, err := os.ReadFile(f.Path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\n  \"format\": 2,\n  \"phase\": \"staging\"\n}\n"; string(b) != want {
		t.Errorf("file = %q, want %q", b, want)
	}
	if st, err := os.Stat(f.Path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("Stat() = %v, %v; want mode 0600", st, err)
	}
	var got record
	if ok, err := f.Read(&got); !ok || err != nil {
		t.Fatalf("Read() = %v, %v; want true, nil", ok, err)
	}
	if diff := cmp.Diff(got, record{Header{2}, "staging"}); diff != "" {
		t.Errorf("Read() (-got +want):\n%s", diff)
	}
}

// TestReadRefuses: no file is no journal; a journal of another format, or
// without one when unversioned journals are not read, is refused naming
// both formats; one that does not parse says what to do.
func TestReadRefuses(t *testing.T) {
	var r record
	f := testFile(t, false)
	if ok, err := f.Read(&r); ok || err != nil {
		t.Errorf("Read(missing) = %v, %v; want false, nil", ok, err)
	}
	for _, tc := range []struct {
		name, body, want string
		unversioned      bool
	}{
		{"newer", `{"format": 3, "phase": "x"}`, "test journal %s has format 3, this hbx reads 2; finish it with the hbx that wrote it", false},
		// A newer format may change a field's type: the format is
		// what the error names, not the field.
		{"newer with a changed field", `{"format": 3, "phase": {"name": "x"}}`, "test journal %s has format 3, this hbx reads 2; finish it with the hbx that wrote it", false},
		{"unversioned refused", `{"phase": "x"}`, "test journal %s has format 0, this hbx reads 2; finish it with the hbx that wrote it", false},
		{"zero with unversioned", `{"format": 0, "phase": "x"}`, "test journal %s has format 0, this hbx reads 2; finish it with the hbx that wrote it", true},
	} {
		f := testFile(t, tc.unversioned)
		if err := os.WriteFile(f.Path, []byte(tc.body), 0o600); err != nil {
			t.Fatal(err)
		}
		ok, err := f.Read(&r)
		if want := strings.ReplaceAll(tc.want, "%s", f.Path); ok || !errors.Is(err, ErrFormat) || err.Error() != want {
			t.Errorf("%s: Read() = %v, %v; want false, %q", tc.name, ok, err, want)
		}
	}
	f = testFile(t, false)
	if err := os.WriteFile(f.Path, []byte(`{"format": 2,`), 0o600); err != nil {
		t.Fatal(err)
	}
	if ok, err := f.Read(&r); ok || err == nil || !strings.HasPrefix(err.Error(), "test journal "+f.Path+" does not parse (") || !strings.HasSuffix(err.Error(), "); move it away") {
		t.Errorf("Read(torn) = %v, %v", ok, err)
	}
}

// TestReadUnversioned: a journal written before the format key existed is
// read as the current format when the File allows it.
func TestReadUnversioned(t *testing.T) {
	f := testFile(t, true)
	if err := os.WriteFile(f.Path, []byte(`{"phase": "done"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var r record
	if ok, err := f.Read(&r); !ok || err != nil || r.Phase != "done" || r.Format != 2 {
		t.Errorf("Read() = %v, %v, %+v; want true, nil, phase done, format 2", ok, err, r)
	}
}

// TestReadRefusesNonRegular: a journal path holding a FIFO, a symlink or
// more than MaxBytes is an error naming it, without blocking; nothing is
// decoded.
func TestReadRefusesNonRegular(t *testing.T) {
	for name, mk := range map[string]func(p string) error{
		"FIFO":    func(p string) error { return syscall.Mkfifo(p, 0o600) },
		"symlink": func(p string) error { return os.Symlink("/dev/zero", p) },
		"huge": func(p string) error {
			return os.WriteFile(p, []byte(`{"format":2,"phase":"`+strings.Repeat("x", MaxBytes)+`"}`), 0o600)
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := testFile(t, false)
			if err := mk(f.Path); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				var got record
				_, err := f.Read(&got)
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), f.Path) || strings.Contains(err.Error(), "\n") {
					t.Errorf("Read() of a %s = %v, want one line naming %s", name, err, f.Path)
				}
			case <-time.After(time.Minute):
				t.Fatalf("Read() of a %s still running after a minute: it hangs", name)
			}
		})
	}
}
