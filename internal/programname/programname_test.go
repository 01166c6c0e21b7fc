package programname

import (
	"errors"
	"testing"

	"github.com/hermesbox/hbx/internal/config"
	"github.com/hermesbox/hbx/supervisor"
)

// TestCheckProgramNames: a name the supervisor runs passes ("all" only
// where allowed); a program the configuration disables is named as such;
// any other name lists the supervisor's programs with a "did you mean"
// when one is near; every refusal wraps supervisor.ErrUnknownProgram and
// all of them come in one line.
func TestCheckProgramNames(t *testing.T) {
	cfg := config.Defaults()
	cfg.Programs["hermes"] = config.Program{Enabled: false}
	known := []string{"executor", "worker"}
	if err := Check(&cfg, known, []string{"worker", "all"}, true); err != nil {
		t.Errorf("known names and all (allowed) = %v, want nil", err)
	}
	tests := []struct {
		names []string
		want  string
	}{
		{[]string{"all"}, `no such program: "all" (programs: executor, worker)`},
		{[]string{"hermes"}, `program "hermes" is disabled (programs.hermes.enabled: false)`},
		{[]string{"wroker"}, `no such program: "wroker" (programs: executor, worker; did you mean "worker"?)`},
		{[]string{"hermes", "zzz"}, `program "hermes" is disabled (programs.hermes.enabled: false); no such program: "zzz" (programs: executor, worker)`},
	}
	for _, tt := range tests {
		err := Check(&cfg, known, tt.names, false)
		if !errors.Is(err, supervisor.ErrUnknownProgram) || err.Error() != tt.want {
			t.Errorf("Check(%q) = %v, want %q wrapping ErrUnknownProgram", tt.names, err, tt.want)
		}
	}
	// Without a configuration, a name is only unknown.
	if err := Check(nil, known, []string{"hermes"}, false); err == nil || err.Error() != `no such program: "hermes" (programs: executor, worker)` {
		t.Errorf("Check(nil cfg) = %v", err)
	}
}
