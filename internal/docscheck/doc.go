// Package docscheck holds no product code: its tests keep the operator's
// README.md and the pages under docs/ true to the tree.
//
// Links: every relative link in them must name a file or directory of the
// repository, and every #anchor a heading of its target page, spelled the
// way GitHub makes heading anchors (lower case, punctuation dropped,
// spaces to hyphens, -1, -2 ... for repeated headings). Links to the web
// (http, https, mailto) are not followed, and text inside code spans and
// fenced code blocks is not read as links.
//
// Paths: a code span that names a path under one of the repository's
// top-level directories (`e2e/restore_release_test.go`, `internal/datalock`)
// must name one that exists, so a rename cannot leave the docs pointing at
// a file that is gone. Generated directories (bin, dist) are not checked.
//
// Exit codes: the table under "## Exit codes" in docs/configuration.md
// names exactly the codes cmd/hbx defines (its exit* integer constants,
// read from the source with go/parser). What each code means is checked
// by cmd/hbx's own tests of `hbx --help`, not here.
//
// The configuration-key table of docs/configuration.md is checked by
// internal/config's tests, next to the keys.
package docscheck
