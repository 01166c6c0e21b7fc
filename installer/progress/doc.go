// Package progress renders the installer's progress events
// (installer.Event) for a person or a program: Term draws one line per
// layer on a terminal, redrawn in place and cut to its width, with log
// lines kept apart from it; JSON writes one JSON line per event, step and
// result. It decides nothing about the install; it writes only to the
// writer it is given. It sits under installer/, next to the events it
// renders, and imports no other verb package.
package progress
