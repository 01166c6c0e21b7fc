package rehearse

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/hermesbox/hbx/launch"
)

// TestTail: the last TailLines non-empty lines, each cut to TailLineMax
// bytes, the unfinished last one included, across writes that split
// lines anywhere.
func TestTail(t *testing.T) {
	many := ""
	for i := range 30 {
		many += "line " + strconv.Itoa(i) + "\n"
	}
	var want20 []string
	for i := 10; i < 30; i++ {
		want20 = append(want20, "line "+strconv.Itoa(i))
	}
	long := strings.Repeat("x", 500)
	for _, tc := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"nothing", nil, ""},
		{"split writes", []string{"exec", "utor: sta", "rting\nsecond\n"}, "executor: starting\nsecond"},
		{"unfinished last line", []string{"a\nb"}, "a\nb"},
		{"blank lines dropped", []string{"\n\n  \nx\r\n"}, "x"},
		{"last lines only", []string{many}, strings.Join(want20, "\n")},
		{"long line cut", []string{long + "\n"}, long[:TailLineMax]},
		{"escape sequences shown, not sent", []string{"\x1b[31merror\x1b[0m\tat\n\x1b]52;c;cm0gLXJmIH4=\x07\u009b2J"},
			"\\x1b[31merror\\x1b[0m\tat\n\\x1b]52;c;cm0gLXJmIH4=\\x07\\x9b2J"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tl tail
			for _, w := range tc.writes {
				if n, err := tl.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if got := tl.String(); got != tc.want {
				t.Errorf("tail = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRefusedQuotesTheLastLines: the refusal wraps ErrRefused, says what
// failed and quotes the lines indented ("its last line", "its last 2
// lines"), or says nothing was written.
func TestRefusedQuotesTheLastLines(t *testing.T) {
	var tl tail
	tl.Write([]byte("executor: data format 1 was made by an older release\n"))
	err := refused("it exited with status 1 before it was ready", &tl)
	if !errors.Is(err, ErrRefused) {
		t.Errorf("refused = %v, want it to wrap ErrRefused", err)
	}
	want := "the release failed its rehearsal: it exited with status 1 before it was ready on a copy of the data; its last line:\n  executor: data format 1 was made by an older release"
	if err.Error() != want {
		t.Errorf("refused = %q, want %q", err, want)
	}
	tl.Write([]byte("executor: exiting\n"))
	want = "the release failed its rehearsal: it exited with status 1 before it was ready on a copy of the data; its last 2 lines:\n" +
		"  executor: data format 1 was made by an older release\n  executor: exiting"
	if err := refused("it exited with status 1 before it was ready", &tl); err.Error() != want {
		t.Errorf("refused with two lines = %q, want %q", err, want)
	}
	if err := refused("x", &tail{}); !strings.HasSuffix(err.Error(), "it wrote nothing") {
		t.Errorf("refused with no output = %q", err)
	}
}

// TestExitedNeverCarriesThePayloadsCode: a payload that exited 7 is
// refused saying so, but the error does not wrap launch's *ExitError,
// whose code hbx would exit with (hbx upgrade exits 1).
func TestExitedNeverCarriesThePayloadsCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&launch.ExitError{Code: 7}, "it exited with status 7 before it was ready"},
		{nil, "it exited with status 0 before it was ready"},
		{errors.New("fork/exec bun: no such file"), "it did not start: fork/exec bun: no such file"},
	} {
		p := &proc{err: tc.err}
		err := refused(p.exited(), &tail{})
		var xe *launch.ExitError
		if errors.As(err, &xe) {
			t.Errorf("refused(%v) wraps launch's *ExitError %d", tc.err, xe.Code)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("refused(%v) = %q, want it to say %q", tc.err, err, tc.want)
		}
	}
}
