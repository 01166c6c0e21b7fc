package ui

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/hermesbox/hbx/supervisor"
)

// TestStatusText: hbx status's text is the table, then the pending change
// or else the recovery note; --json is the programs alone.
func TestStatusText(t *testing.T) {
	list := []supervisor.Status{{Name: "executor", State: supervisor.Running, Detail: "pid 1"}, {Name: "hermes", State: supervisor.Fatal}}
	change := errors.New("upgrade to x interrupted")
	for _, tc := range []struct {
		name   string
		change error
		note   string
		want   string
	}{
		{"change wins over a note", change, "ignored", supervisor.Table(list) + "release change: " + change.Error() + "\n"},
		{"note", nil, "data kept in /d.rolled-back", supervisor.Table(list) + "note: data kept in /d.rolled-back\n"},
		{"neither", nil, "", supervisor.Table(list)},
	} {
		if got := StatusText(list, tc.change, tc.note); got != tc.want {
			t.Errorf("%s: StatusText = %q, want %q", tc.name, got, tc.want)
		}
	}
	var buf bytes.Buffer
	if err := StatusJSON(&buf, list); err != nil {
		t.Fatal(err)
	}
	var back []map[string]any
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil || len(back) != 2 || back[0]["name"] != "executor" {
		t.Errorf("StatusJSON = %s (%v), want the two programs", buf.String(), err)
	}
}
