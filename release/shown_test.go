package release

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestResolveErrorOneLine: a program name an image chose with a newline
// (or an escape sequence) is quoted in the error, which stays one line.
func TestResolveErrorOneLine(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, RootfsDir, "usr/local/bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	name := "serve\nINFO forged \x1b[2J"
	if err := os.WriteFile(filepath.Join(bin, name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	inst := &Installed{Dir: dir, Meta: Meta{Config: ImageConfig{Env: []string{"PATH=/usr/local/bin"}}}}
	_, err := inst.Resolve([]string{name})
	if err == nil || strings.ContainsAny(err.Error(), "\n\x1b") {
		t.Fatalf("Resolve() = %q; want an error on one line without escapes", err)
	}
}
