package testenv

import "testing"

func TestRoutineLeftOut(t *testing.T) {
	const (
		head  = `level=error msg="response completed with error" err.code="blob unknown" http.request.method=HEAD http.response.status=404` + "\n"
		get   = `level=error msg="response completed with error" err.code="blob unknown" http.request.method=GET http.response.status=404` + "\n"
		other = `level=error msg="response completed with error" err.code="manifest unknown" http.request.method=HEAD` + "\n"
	)
	for _, tc := range []struct {
		name, log string
		max       int
		want      string
		routine   int
	}{
		{"empty", "", 100, "", 0},
		{"only a push's HEADs", head + head, 100, "", 2},
		{"a GET of a missing blob stays", head + get + head, 1000, get, 2},
		{"another error of a HEAD stays", other + head, 1000, other, 1},
		{"cut to max from the end", get + other, len(other), other, 0},
		{"last line without newline", head + "exiting", 100, "exiting", 1},
	} {
		got, routine := routineLeftOut([]byte(tc.log), tc.max)
		if got != tc.want || routine != tc.routine {
			t.Errorf("%s: routineLeftOut = %q, %d; want %q, %d", tc.name, got, routine, tc.want, tc.routine)
		}
	}
}
