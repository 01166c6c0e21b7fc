package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rehearsedNote is the result note of a rehearsed upgrade: its total, the
// copy and the hold.
var rehearsedNote = regexp.MustCompile(`rehearsed on a copy of the data in ([0-9.]+[a-zµ]+) \((\d+) files, (\d+) bytes copied in ([0-9.]+[a-zµ]+), (nothing stopped|programs held [0-9.]+[a-zµ]+); ready in ([0-9.]+[a-zµ]+)\)`)

// TestBenchRehearsal measures, on the real test image under hbx
// supervise, what the rehearsal adds to hbx upgrade (1.0.0 -> 2.0.0):
// HBXTEST_REHEARSAL_ROUNDS rounds (default 3) of an upgrade with it and
// one with --no-rehearsal, interleaved, each followed by hbx rollback,
// with a 32 MiB file beside the test image's own data so the copy has
// something of a real data.db's size to read. It prints one line per
// figure prefixed "rehearsal:" (scripts/upgradebench.sh shows them). It
// runs only with HBXTEST_BENCH=1 (make bench) and never fails on a time.
func TestBenchRehearsal(t *testing.T) {
	requireE2E(t)
	if os.Getenv("HBXTEST_BENCH") != "1" {
		// Not a missing prerequisite: a gate, opened by make bench.
		t.Skip("benchmark: run with HBXTEST_BENCH=1 (make bench)")
	}
	rounds := 3
	if v, err := strconv.Atoi(os.Getenv("HBXTEST_REHEARSAL_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	b, _, _, v2, _ := upgradeBox(t)
	writeFile(t, filepath.Join(b.dataDir, "filler.db"), strings.Repeat("p", 32<<20), 0o600)
	var with, without, total, copied []time.Duration
	held := 0
	for i := range rounds {
		for _, rehearse := range []bool{true, false} {
			args := []string{"upgrade", "--image", v2}
			if !rehearse {
				args = append(args, "--no-rehearsal")
			}
			start := time.Now()
			r := b.hbx(args...)
			took := time.Since(start)
			if r.code != 0 {
				t.Fatalf("round %d: hbx %s = %d\n%s", i, strings.Join(args, " "), r.code, r.stderr)
			}
			if !rehearse {
				without = append(without, took)
			} else {
				with = append(with, took)
				m := rehearsedNote.FindStringSubmatch(r.stdout)
				if m == nil {
					t.Fatalf("round %d: no rehearsal note in %q", i, r.stdout)
				}
				total = append(total, mustDuration(t, m[1]))
				copied = append(copied, mustDuration(t, m[4]))
				if m[5] != "nothing stopped" {
					held++
				}
			}
			if r := b.hbx("rollback"); r.code != 0 {
				t.Fatalf("round %d: hbx rollback = %d\n%s", i, r.code, r.stderr)
			}
		}
	}
	fmt.Printf("rehearsal: %d interleaved rounds on the test image (real Bun), data 32 MiB + the image's own files; medians (min–max)\n", rounds)
	fmt.Printf("rehearsal: hbx upgrade with rehearsal     %s\n", spread(with))
	fmt.Printf("rehearsal: hbx upgrade --no-rehearsal     %s\n", spread(without))
	fmt.Printf("rehearsal: the rehearsal itself (note)    %s\n", spread(total))
	fmt.Printf("rehearsal: of which the copy (two reads)  %s\n", spread(copied))
	fmt.Printf("rehearsal: copies that needed a hold      %d of %d\n", held, rounds)
}

// mustDuration parses a Go duration as the note prints it.
func mustDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// spread is "median (min–max)" of ds in seconds.
func spread(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("%.3f s (%.3f–%.3f)", s[len(s)/2].Seconds(), s[0].Seconds(), s[len(s)-1].Seconds())
}
