package ui

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestConfigFlagsText: hbx config flags lists the flags it is given, the
// ones hidden from --help included, after its introduction, and leaves
// them hidden; a failing writer's error is returned.
func TestConfigFlagsText(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.Int("executor-port", 4788, "the port")
	fs.String("backup-dir", "", "the archives' directory")
	if err := fs.MarkHidden("executor-port"); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := ConfigFlagsText(&b, fs); err != nil {
		t.Fatalf("ConfigFlagsText = %v", err)
	}
	out := b.String()
	if !strings.HasPrefix(out, configFlagsIntro) {
		t.Errorf("ConfigFlagsText does not start with its introduction:\n%s", out)
	}
	for _, w := range []string{"--executor-port int", "the port (default 4788)\n", "--backup-dir string"} {
		if !strings.Contains(out, w) {
			t.Errorf("ConfigFlagsText = %q, want it to contain %q", out, w)
		}
	}
	if !fs.Lookup("executor-port").Hidden {
		t.Errorf("ConfigFlagsText unhid --executor-port in the flag set it was given")
	}
	if err := ConfigFlagsText(failingWriter{}, fs); !errors.Is(err, errWrite) {
		t.Errorf("ConfigFlagsText(failing writer) = %v, want %v", err, errWrite)
	}
}

// errWrite is failingWriter's error.
var errWrite = errors.New("write refused")

// failingWriter refuses every write.
type failingWriter struct{}

// Write returns errWrite.
func (failingWriter) Write([]byte) (int, error) { return 0, errWrite }
