package suggest

import (
	"strconv"
	"strings"
)

// Closest returns the candidate nearest to s by edit distance
// (insertions, deletions, substitutions and swaps of two adjacent bytes),
// compared without regard to case, or "" when none is near enough: within
// 1 edit for names of up to 5 bytes, 2 up to 11, and 3 beyond. On a tie
// the earlier candidate wins; s itself is never suggested. hbx uses it for
// "did you mean" hints on mistyped keys, variables, flags and programs.
func Closest(s string, candidates []string) string {
	limit := 3
	switch {
	case len(s) <= 5:
		limit = 1
	case len(s) <= 11:
		limit = 2
	}
	low := strings.ToLower(s)
	best, bestD := "", limit+1
	for _, c := range candidates {
		if c == s || len(c) > len(s)+limit || len(s) > len(c)+limit {
			continue // the distance is at least the difference in length
		}
		if d := editDistance(low, strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// DidYouMean returns ` (did you mean "x"?)` for the closest candidate to
// s, or "" when none is close; see Closest.
func DidYouMean(s string, candidates []string) string {
	if c := Closest(s, candidates); c != "" {
		return " (did you mean " + strconv.Quote(c) + "?)"
	}
	return ""
}

// editDistance returns the number of single-byte insertions, deletions,
// substitutions and swaps of two adjacent bytes that turn a into b (the
// optimal string alignment distance): "hermse" is 1 from "hermes".
func editDistance(a, b string) int {
	// d[i][j] is the distance between a[:i] and b[:j]; three rows suffice.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
