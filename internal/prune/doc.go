// Package prune removes, after a command changed the active release
// (hbx upgrade, hbx rollback, hbx restore), the releases under
// releases/ that are neither current nor previous nor needed by an
// unfinished restore or release change, with the blobs and layer state
// no remaining release needs (release.Prune does the removal; this
// package decides what to keep from the journals).
//
// It is best effort: it runs once the command's change is durable, under
// the runtime directory's lock, and its failure is the caller's note,
// never the command's failure; whatever it could not remove the next
// run removes. When a journal cannot be read it removes nothing.
//
// It is a composer (it reads package backup's and upgrade's journals;
// internal/boundary's test names it): only cmd/, e2e/ and another
// composer import it.
package prune
