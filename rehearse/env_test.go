package rehearse

import (
	"slices"
	"strings"
	"testing"
)

// TestOnTheCopy: the payload's EXECUTOR_DATA_DIR is the copy whatever
// the env file set it to when that was the live data directory (clean or
// not); one naming another directory refuses the rehearsal, saying what
// to do; other variables are kept.
func TestOnTheCopy(t *testing.T) {
	const live, cp = "/srv/executor/data", "/srv/executor/data.rehearsal-1/data"
	for _, tc := range []struct {
		name, set string
		want      string // "" when refused
	}{
		{name: "hbx's own setting", set: cp, want: cp},
		{name: "the live data directory", set: live, want: cp},
		{name: "the live data directory, not clean", set: live + "/", want: cp},
		{name: "another directory", set: "/srv/other"},
		{name: "a relative path", set: "data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := []string{"PATH=/bin", "EXECUTOR_DATA_DIR=" + tc.set, "PORT=1"}
			got, err := onTheCopy(env, live, cp)
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), "executor.env_file") || !strings.Contains(err.Error(), "--no-rehearsal") {
					t.Fatalf("onTheCopy() = %q, %v; want refused naming the env file and --no-rehearsal", got, err)
				}
				return
			}
			want := []string{"PATH=/bin", "EXECUTOR_DATA_DIR=" + tc.want, "PORT=1"}
			if err != nil || !slices.Equal(got, want) {
				t.Errorf("onTheCopy() = %q, %v; want %q", got, err, want)
			}
		})
	}
}
