package rehearse

import (
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestOnTheCopy: a variable of the payload's environment naming the
// live data or state directory, or a path inside one (clean or not), names
// the same path in the rehearsal's copy; EXECUTOR_DATA_DIR naming another
// directory refuses the rehearsal, saying what to do; other values are
// kept.
func TestOnTheCopy(t *testing.T) {
	const live, cp = "/srv/executor/data", "/srv/executor/data.rehearsal-1/data"
	const state, cpState = "/srv/executor/state", "/srv/executor/data.rehearsal-1/state"
	moves := [][2]string{{live, cp}, {state, cpState}}
	// A state directory holding the data directory holds the copies too.
	nested := [][2]string{{"/srv/x/data", "/srv/x/data.rehearsal-1/data"}, {"/srv/x", "/srv/x/data.rehearsal-1/state"}}
	for _, tc := range []struct {
		name, key, set string
		want           string // "" when refused
		moves          [][2]string
	}{
		{name: "the copy's home below the live state directory", key: "HOME", set: "/srv/x/data.rehearsal-1/state/home", want: "/srv/x/data.rehearsal-1/state/home", moves: nested},
		{name: "a file of the live state directory holding the data", key: "CACHE", set: "/srv/x/cache", want: "/srv/x/data.rehearsal-1/state/cache", moves: nested},
		{name: "hbx's own setting", key: "EXECUTOR_DATA_DIR", set: cp, want: cp},
		{name: "the live data directory", key: "EXECUTOR_DATA_DIR", set: live, want: cp},
		{name: "the live data directory, not clean", key: "EXECUTOR_DATA_DIR", set: live + "/", want: cp},
		{name: "another directory", key: "EXECUTOR_DATA_DIR", set: "/srv/other"},
		{name: "a relative path", key: "EXECUTOR_DATA_DIR", set: "data"},
		{name: "a file of the live data", key: "DB_PATH", set: live + "/db/main.sqlite", want: cp + "/db/main.sqlite"},
		{name: "the live state directory", key: "XDG_DATA_HOME", set: state + "/xdg", want: cpState + "/xdg"},
		{name: "a sibling of the data directory", key: "DB_PATH", set: live + "-old/x", want: live + "-old/x"},
		{name: "not a path", key: "DB_PATH", set: "file:" + live + "/x", want: "file:" + live + "/x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := []string{"PATH=/bin", tc.key + "=" + tc.set, "PORT=1"}
			m := moves
			if tc.moves != nil {
				m = tc.moves
			}
			got, err := onTheCopy(env, m)
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), "executor.env_file") || !strings.Contains(err.Error(), "--no-rehearsal") {
					t.Fatalf("onTheCopy() = %q, %v; want refused naming the env file and --no-rehearsal", got, err)
				}
				return
			}
			want := []string{"PATH=/bin", tc.key + "=" + tc.want, "PORT=1"}
			if err != nil || !slices.Equal(got, want) {
				t.Errorf("onTheCopy() = %q, %v; want %q", got, err, want)
			}
		})
	}
}

// TestRunRefusesAnotherDataDirBeforeCopying: an env file whose
// EXECUTOR_DATA_DIR (its last one: the one the payload gets) names
// another directory than the data directory refuses the rehearsal with
// onTheCopy's one line before anything is made or copied: no scratch
// directory, no file of the data opened, the state directory untouched.
func TestRunRefusesAnotherDataDirBeforeCopying(t *testing.T) {
	for _, tc := range []struct{ name, lines string }{
		{name: "another directory", lines: "EXECUTOR_DATA_DIR=/srv/other\n"},
		{name: "a relative path", lines: "EXECUTOR_DATA_DIR=data\n"},
		{name: "the last of two", lines: "EXECUTOR_DATA_DIR=%DATA%\nexport EXECUTOR_DATA_DIR=\"/srv/other\"\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rp := newRunParams(t, "serve", true)
			killEscapees(t, rp)
			envFile := filepath.Join(t.TempDir(), "executor.env")
			if err := os.WriteFile(envFile, []byte(strings.ReplaceAll(tc.lines, "%DATA%", rp.DataDir)), 0o600); err != nil {
				t.Fatal(err)
			}
			opened := 0
			beforeOpen = func(string) { opened++ }
			t.Cleanup(func() { beforeOpen = func(string) {} })
			before := listing(t, filepath.Dir(rp.DataDir), rp.StateDir)
			o := rp.options(slog.New(slog.DiscardHandler))
			o.Launch.EnvFile = envFile
			_, err := Run(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), "sets EXECUTOR_DATA_DIR=") || !strings.Contains(err.Error(), "--no-rehearsal") || strings.Contains(err.Error(), "\n") {
				t.Fatalf("Run() = %v; want the one-line refusal naming EXECUTOR_DATA_DIR and --no-rehearsal", err)
			}
			if opened != 0 {
				t.Errorf("Run opened %d files of the data before refusing; want none", opened)
			}
			if after := listing(t, filepath.Dir(rp.DataDir), rp.StateDir); !slices.Equal(after, before) {
				t.Errorf("after the refusal: %q; want as before: %q", after, before)
			}
		})
	}
}

// listing returns every path below dirs (themselves included).
func listing(t *testing.T, dirs ...string) []string {
	t.Helper()
	var out []string
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(p string, _ fs.DirEntry, err error) error {
			out = append(out, p)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}
