package supervisor

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestErrorAnswersKeepTheirSentinel: every error a control handler
// answers with maps to its status and code, and the client turns the
// answer back into an error that is the same sentinel (errors.Is) with
// the same one-line message. A hold refused during shutdown, or a call
// that waited for a start that failed, is 503 ErrShuttingDown; before,
// it fell through to 500 and the client knew only "internal".
func TestErrorAnswersKeepTheirSentinel(t *testing.T) {
	errBadFile := errors.New("bad env file")
	classes := []ErrorClass{{Code: "env_file", Err: errBadFile}}
	s, err := New(Options{Programs: []Program{helperProgram(t, progDir(t, "app"), "app", "sleep", "")}, ErrorClasses: classes})
	if err != nil {
		t.Fatal(err)
	}
	c := &Client{Classes: classes}
	startErr := &StartError{fmt.Errorf("program app: open log /var/log/hbx/app.log: %w: a symbolic link, which hbx never follows; remove it", ErrLogNotRegular)}
	for _, tc := range []struct {
		name       string
		err        error
		wantStatus int
		wantCode   string
		wantIs     []error
		wantNot    []error
	}{
		{
			name:       "unknown program",
			err:        fmt.Errorf("%w: \"web\" (programs: app)", ErrUnknownProgram),
			wantStatus: http.StatusNotFound, wantCode: codeUnknownProgram,
			wantIs: []error{ErrUnknownProgram}, wantNot: []error{ErrShuttingDown},
		},
		{
			name:       "fatal",
			err:        fmt.Errorf("%w: app: exited too quickly", ErrFatal),
			wantStatus: http.StatusConflict, wantCode: codeFatal,
			wantIs: []error{ErrFatal},
		},
		{
			name:       "refused with a class",
			err:        &RefusedError{Name: "app", Err: fmt.Errorf("read /etc/hbx/env: %w", errBadFile)},
			wantStatus: http.StatusConflict, wantCode: codeRefused,
			wantIs: []error{ErrRefused, errBadFile},
		},
		{
			name:       "hold during shutdown",
			err:        fmt.Errorf("hold all: %w: try again once it has stopped", ErrShuttingDown),
			wantStatus: http.StatusServiceUnavailable, wantCode: codeShuttingDown,
			wantIs: []error{ErrShuttingDown}, wantNot: []error{ErrRefused},
		},
		{
			name:       "wait during shutdown",
			err:        fmt.Errorf("%w (app is STOPPED)", ErrShuttingDown),
			wantStatus: http.StatusServiceUnavailable, wantCode: codeShuttingDown,
			wantIs: []error{ErrShuttingDown},
		},
		{
			name:       "call that waited for a start that failed",
			err:        &notStartedError{startErr},
			wantStatus: http.StatusServiceUnavailable, wantCode: codeShuttingDown,
			wantIs: []error{ErrShuttingDown},
		},
		{
			name:       "anything else",
			err:        errors.New("wait for the install on start to finish: context canceled"),
			wantStatus: http.StatusInternalServerError, wantCode: codeInternal,
			wantNot: []error{ErrShuttingDown, ErrUnknownProgram, ErrFatal, ErrRefused},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			s.writeError(rec, tc.err)
			resp := rec.Result()
			if resp.StatusCode != tc.wantStatus {
				t.Errorf("writeError(%v) status = %d, want %d", tc.err, resp.StatusCode, tc.wantStatus)
			}
			if body := rec.Body.String(); !strings.Contains(body, `"code":"`+tc.wantCode+`"`) {
				t.Errorf("writeError(%v) body = %s, want code %q", tc.err, body, tc.wantCode)
			}
			got := c.responseError(resp)
			if got == nil || got.Error() != tc.err.Error() {
				t.Errorf("responseError() = %v, want the supervisor's message %q", got, tc.err)
			}
			for _, want := range tc.wantIs {
				if !errors.Is(got, want) {
					t.Errorf("responseError() = %v, want errors.Is %v", got, want)
				}
			}
			for _, not := range tc.wantNot {
				if errors.Is(got, not) {
					t.Errorf("responseError() = %v, want it not to be %v", got, not)
				}
			}
		})
	}
}

// TestNotStartedErrorSaysWhy: a call answered because Run did not start
// says so in one line with Run's error, and is both ErrShuttingDown and
// that error's own sentinel.
func TestNotStartedErrorSaysWhy(t *testing.T) {
	err := error(&notStartedError{&StartError{fmt.Errorf("program app: open log /l/app.log: %w: a FIFO, socket or device; remove it", ErrLogNotRegular)}})
	want := "supervisor did not start: program app: open log /l/app.log: log is not a regular file: a FIFO, socket or device; remove it"
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err, want)
	}
	for _, is := range []error{ErrShuttingDown, ErrLogNotRegular} {
		if !errors.Is(err, is) {
			t.Errorf("errors.Is(%v, %v) = false, want true", err, is)
		}
	}
}
