// Package suggest finds the name a user most likely meant when they
// mistyped one: the "did you mean" of hbx's configuration keys,
// environment variables, programs, commands and flags. It is pure (no I/O)
// and knows none of those names; callers pass the candidates.
//
// It does not guess beyond a few edits (see Closest), and it compares
// bytes, so it suits the ASCII names hbx uses, not arbitrary Unicode text.
package suggest
