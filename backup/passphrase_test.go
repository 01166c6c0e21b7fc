package backup

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// answers is a Terminal that gives its answers in order and records the
// prompts.
type answers struct {
	say     []string
	prompts []string
	closed  bool
}

func (a *answers) Ask(prompt string) ([]byte, error) {
	a.prompts = append(a.prompts, prompt)
	if len(a.say) == 0 {
		return nil, errors.New("read passphrase: EOF")
	}
	s := a.say[0]
	a.say = a.say[1:]
	return []byte(s), nil
}

func (a *answers) open() (Terminal, func(), error) { return a, func() { a.closed = true }, nil }

// TestPassphraseSource: the file wins over the terminal; the terminal
// asks once, or twice with confirm, and is closed; an empty answer, two
// different answers and no terminal are refused.
func TestPassphraseSource(t *testing.T) {
	f := filepath.Join(t.TempDir(), "pass")
	if err := os.WriteFile(f, []byte("from file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := &answers{say: []string{"typed"}}
	if p, err := PassphraseSource(f, true, a.open)(); err != nil || string(p) != "from file" || len(a.prompts) != 0 {
		t.Errorf("with a file = %q, %v, prompts %q; want the file's, no prompt", p, err, a.prompts)
	}
	a = &answers{say: []string{"typed"}}
	if p, err := PassphraseSource("", false, a.open)(); err != nil || string(p) != "typed" || len(a.prompts) != 1 || !a.closed {
		t.Errorf("asked once = %q, %v, prompts %q, closed %v", p, err, a.prompts, a.closed)
	}
	a = &answers{say: []string{"typed", "typed"}}
	if p, err := PassphraseSource("", true, a.open)(); err != nil || string(p) != "typed" || strings.Join(a.prompts, "|") != "Backup passphrase: |Repeat it: " {
		t.Errorf("confirmed = %q, %v, prompts %q", p, err, a.prompts)
	}
	a = &answers{say: []string{"typed", "other"}}
	if _, err := PassphraseSource("", true, a.open)(); err == nil || err.Error() != "the passphrases differ" {
		t.Errorf("different answers = %v, want the passphrases differ", err)
	}
	a = &answers{say: []string{""}}
	if _, err := PassphraseSource("", true, a.open)(); !errors.Is(err, ErrNoPassphrase) || len(a.prompts) != 1 {
		t.Errorf("empty answer = %v (prompts %q), want ErrNoPassphrase at once", err, a.prompts)
	}
	noTTY := func() (Terminal, func(), error) { return nil, nil, errors.New("no such device") }
	if _, err := PassphraseSource("", false, noTTY)(); !errors.Is(err, ErrNoPassphrase) || !strings.Contains(err.Error(), "set backup.passphrase_file") {
		t.Errorf("no terminal = %v, want ErrNoPassphrase saying how to give one", err)
	}
}
