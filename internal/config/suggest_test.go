package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestEditDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "abc", 3},
		{"abc", "", 3},
		{"hermes", "hermes", 0},
		{"hermse", "hermes", 1}, // a swap of neighbours is one edit
		{"hemres", "hermes", 1},
		{"hermes", "herms", 1},
		{"hermes", "xhermes", 1},
		{"hermes", "hermex", 1},
		{"executor", "exector", 1},
		{"ca", "abc", 3}, // optimal string alignment: no edit of a swapped pair
		{"kitten", "sitting", 3},
	}
	for _, tt := range tests {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := editDistance(tt.b, tt.a); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.b, tt.a, got, tt.want)
		}
	}
}

func TestClosest(t *testing.T) {
	progs := []string{"executor", "hermes"}
	tests := []struct {
		s          string
		candidates []string
		want       string
	}{
		{"hermse", progs, "hermes"},
		{"HERMES", progs, "hermes"}, // case is ignored
		{"hermes", progs, ""},       // itself is not a suggestion
		{"worker", progs, ""},
		{"herm", progs, ""},        // 2 edits: too far for a 4-byte name
		{"hrmes", progs, "hermes"}, // 1 edit
		{"exectr", progs, "executor"},
		{"execu", progs, ""},
		{"ab", []string{"ac", "ab2"}, "ac"}, // first of equals wins
		{"executor.imge", Keys(), "executor.image"},
		{"supervisor.sockt", Keys(), "supervisor.socket"},
		{"executor.nonsense", Keys(), ""},
		{"HBX_EXECUTOR_PROT", []string{EnvName("executor.port"), EnvName("executor.image")}, "HBX_EXECUTOR_PORT"},
	}
	for _, tt := range tests {
		if got := Closest(tt.s, tt.candidates); got != tt.want {
			t.Errorf("Closest(%q, %q) = %q, want %q", tt.s, tt.candidates, got, tt.want)
		}
	}
}

func TestConfigEnv(t *testing.T) {
	fromEnv := writeConfig(t, "executor:\n  port: 4001\n")
	fromFlag := writeConfig(t, "executor:\n  port: 4002\n")
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	tests := []struct {
		name     string
		opts     LoadOptions
		wantFile File
		wantPort int
		wantErr  string
	}{
		{"env names the file", LoadOptions{Path: DefaultPath, Env: []string{"HBX_CONFIG=" + fromEnv}},
			File{fromEnv, Source{SourceEnv, "HBX_CONFIG"}, true}, 4001, ""},
		{"the last entry wins", LoadOptions{Env: []string{"HBX_CONFIG=" + missing, "HBX_CONFIG=" + fromEnv}},
			File{fromEnv, Source{SourceEnv, "HBX_CONFIG"}, true}, 4001, ""},
		{"the flag beats env", LoadOptions{Path: fromFlag, PathExplicit: true, Env: []string{"HBX_CONFIG=" + fromEnv}},
			File{fromFlag, Source{SourceFlag, "--config"}, true}, 4002, ""},
		{"empty env is unset", LoadOptions{Path: missing, Env: []string{"HBX_CONFIG="}},
			File{missing, Source{Kind: SourceDefault}, false}, 4788, ""},
		{"no env, absent default", LoadOptions{Path: missing},
			File{missing, Source{Kind: SourceDefault}, false}, 4788, ""},
		{"a missing env file is an error", LoadOptions{Env: []string{"HBX_CONFIG=" + missing}},
			File{}, 0, "config file " + missing + " (from env HBX_CONFIG) does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, srcs, err := Load(tt.opts)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Load() = %v, want ErrInvalid containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load() = %v", err)
			}
			if diff := cmp.Diff(srcs.File(), tt.wantFile); diff != "" {
				t.Errorf("File() (-got +want):\n%s", diff)
			}
			if cfg.Executor.Port != tt.wantPort {
				t.Errorf("executor.port = %d, want %d", cfg.Executor.Port, tt.wantPort)
			}
		})
	}
}

func TestFileString(t *testing.T) {
	tests := []struct {
		f    File
		want string
	}{
		{File{"/etc/hbx/hbx.yaml", Source{Kind: SourceDefault}, true}, "config file /etc/hbx/hbx.yaml"},
		{File{"/x.yaml", Source{SourceEnv, "HBX_CONFIG"}, true}, "config file /x.yaml (from env HBX_CONFIG)"},
		{File{"/x.yaml", Source{SourceFlag, "--config"}, true}, "config file /x.yaml (from flag --config)"},
		{File{"/etc/hbx/hbx.yaml", Source{Kind: SourceDefault}, false}, "no config file (/etc/hbx/hbx.yaml is absent), defaults"},
	}
	for _, tt := range tests {
		if got := tt.f.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.f, got, tt.want)
		}
	}
}
