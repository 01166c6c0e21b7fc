// Package ui renders each command's outcome, as text for a terminal and as
// JSON for --json: what cmd/hbx prints after a verb (or a composer)
// returns. One function per command and form (BackupText,
// BackupJSON, RestoreText, ...); it reads the verbs' result types, decides
// nothing and does no I/O beyond the writer it is given. A new field of a
// command's output goes here (and its test beside it). Like the composers it
// is imported only by cmd/ and e2e/ (internal/boundary).
package ui
