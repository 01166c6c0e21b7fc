package health

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadKeyFileTooLong: a key file longer than 64 KiB is refused even
// when its first line is a good key, as executor.token_file refuses it,
// so the payload and hbx health never disagree on the same file.
func TestReadKeyFileTooLong(t *testing.T) {
	p := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(p, []byte("good-key\n"+strings.Repeat("x", 64<<10)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadKeyFile(p); !errors.Is(err, ErrKey) || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("ReadKeyFile of a 64 KiB+ file = %v, want an ErrKey naming the size limit", err)
	}
	if err := os.WriteFile(p, []byte("good-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if k, err := ReadKeyFile(p); err != nil || k.v != "good-key" {
		t.Fatalf("ReadKeyFile of a good file = %v, %v", k, err)
	}
}
