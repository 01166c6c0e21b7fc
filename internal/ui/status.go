package ui

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/hermesbox/hbx/supervisor"
)

// StatusText is hbx status's text: supervisor.Table of programs, then
// "release change: ..." (change, nil: none) or else "note: ..." (note, "":
// none) on a line of its own.
func StatusText(programs []supervisor.Status, change error, note string) string {
	s := supervisor.Table(programs)
	if change != nil {
		s += fmt.Sprintf("release change: %v\n", change)
	} else if note != "" {
		s += fmt.Sprintf("note: %s\n", note)
	}
	return s
}

// StatusJSON writes hbx status --json: the programs as one indented JSON
// array (supervisor.Status's fields).
func StatusJSON(w io.Writer, programs []supervisor.Status) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(programs)
}
