package supervision

import (
	"strings"
	"testing"
)

func TestStateText(t *testing.T) {
	tests := []struct {
		s    State
		name string
		hold bool
	}{
		{Stopped, "STOPPED", false},
		{Starting, "STARTING", true},
		{Running, "RUNNING", true},
		{Backoff, "BACKOFF", true},
		{Stopping, "STOPPING", false},
		{Exited, "EXITED", false},
		{Fatal, "FATAL", false},
	}
	for _, tt := range tests {
		if got := tt.s.String(); got != tt.name {
			t.Errorf("State(%d).String() = %q, want %q", int(tt.s), got, tt.name)
		}
		for _, in := range []string{tt.name, strings.ToLower(tt.name)} {
			var got State
			if err := got.UnmarshalText([]byte(in)); err != nil || got != tt.s {
				t.Errorf("UnmarshalText(%q) = %v, %v; want %v", in, got, err, tt.s)
			}
		}
		if got := tt.s.HoldRestarts(); got != tt.hold {
			t.Errorf("%v.HoldRestarts() = %v, want %v", tt.s, got, tt.hold)
		}
	}
}

func TestStateTextErrors(t *testing.T) {
	for _, in := range []string{"", "RUNNIN", "State(7)"} {
		var s State
		if err := s.UnmarshalText([]byte(in)); err == nil || !strings.Contains(err.Error(), "unknown program state") {
			t.Errorf("UnmarshalText(%q) = %v, want an unknown program state error", in, err)
		}
	}
	if got := State(-1).String(); got != "State(-1)" {
		t.Errorf("State(-1).String() = %q", got)
	}
	if got := State(7).String(); got != "State(7)" {
		t.Errorf("State(7).String() = %q", got)
	}
}
