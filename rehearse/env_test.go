package rehearse

import (
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
