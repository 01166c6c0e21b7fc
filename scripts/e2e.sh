#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# e2e.sh runs the amd64 e2e suite (./e2e/, `make e2e`) as E2E_SHARDS
# (default 3) concurrent `go test` processes over disjoint parts of its
# test list: most of the suite's time is tests waiting on processes (Bun
# starting, health waits, startsecs), not CPU. It lists the tests with
# `go test -list`, deals them out heaviest first to the lightest shard
# (weights: scripts/e2e-durations.txt, 10 s for a test not there), and
# runs each shard with -count=1 -timeout E2E_TIMEOUT (default 45m) -v,
# its output in .run/e2e/shard-N.log. As tests end it prints their
# --- PASS/FAIL/SKIP lines prefixed with the shard; when all are done it
# prints each shard's whole log (so `--- FAIL: TestX` and go test's final
# ok/FAIL lines appear as a single run's would), then checks that every
# listed test was reported by its shard (none dropped by a panic, a
# timeout or a renamed test).
# It exits non-zero when any shard fails or any test is not reported.
# The tests share nothing across processes (each box, registry, image
# and cgroup lives under its own temporary directory; a box's port comes
# from testenv.FreePort, held by a flock until its test ends), so the
# shards need no coordination; a second e2e.sh in the same tree at once is
# refused (flock on .run/e2e.lock).
# The caller's environment (HBXTEST_E2E, HBXTEST_BIN, ...) is passed on.
#
# E2E_TESTS (space-separated names) runs only those tests; each must be
# in the package's list (a renamed one fails the run) and must pass (a
# skipped one fails it too). E2E_LOGS (default
# .run/e2e) is where the logs and the lock go, and E2E_DURATIONS (default
# scripts/e2e-durations.txt) the weights: `make e2e-arm64` runs its
# lifecycle tests through this script with its own of each.
# The last lines it prints name every failed test and, for a shard that
# hit its timeout, the tests that were still running (go test prints
# them under "panic: test timed out"), so a log cut to its tail still
# says what failed.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"

shards="${E2E_SHARDS:-3}"
timeout="${E2E_TIMEOUT:-45m}"
pkg=./e2e/
logs="${E2E_LOGS:-.run/e2e}"
durations="${E2E_DURATIONS:-scripts/e2e-durations.txt}"
if ! [[ "${shards}" =~ ^[1-9][0-9]*$ ]]; then
	echo "e2e.sh: E2E_SHARDS=${shards}: not a whole number of at least 1" >&2
	exit 2
fi

if [[ ! -f "${durations}" ]]; then
	echo "e2e.sh: E2E_DURATIONS=${durations}: no such file" >&2
	exit 2
fi
mkdir -p "$(dirname "${logs}")"
exec 9>"${logs}.lock"
if ! flock -n 9; then
	echo "e2e.sh: another e2e.sh runs in ${repo_root} with ${logs} (it holds ${logs}.lock)" >&2
	exit 1
fi
rm -rf "${logs}"
mkdir -p "${logs}"

# The list also builds the test binary the shards then take from the
# build cache. Benchmarks do not run without -bench, so only Test,
# Example and Fuzz functions count.
if ! go test -count=1 -list '.*' "${pkg}" >"${logs}/list.out" 2>&1; then
	cat "${logs}/list.out" >&2
	echo "e2e.sh: go test -list ${pkg} failed" >&2
	exit 1
fi
grep -E '^(Test|Example|Fuzz)[A-Za-z0-9_]*$' "${logs}/list.out" >"${logs}/tests" || true
if [[ -n "${E2E_TESTS:-}" ]]; then
	: >"${logs}/chosen"
	for name in ${E2E_TESTS}; do
		if ! grep -qxF "${name}" "${logs}/tests"; then
			echo "e2e.sh: E2E_TESTS names ${name}, which ${pkg} does not have (renamed or removed?)" >&2
			exit 1
		fi
		echo "${name}" >>"${logs}/chosen"
	done
	sort -u "${logs}/chosen" >"${logs}/tests"
fi
total=$(grep -c . "${logs}/tests" || true)
if ((total == 0)); then
	cat "${logs}/list.out" >&2
	echo "e2e.sh: go test -list ${pkg} listed no tests" >&2
	exit 1
fi

# Longest processing time first: each test, heaviest first, goes to the
# shard with the least weight so far. Out: "shard test weight" lines.
awk -v n="${shards}" '
	FNR == NR { if ($1 !~ /^#/ && NF == 2) w[$1] = $2; next }
	{ t[++m] = $1; tw[m] = ($1 in w) ? w[$1] : 10 }
	END {
		for (i = 1; i <= m; i++) order[i] = i
		for (i = 2; i <= m; i++) { # insertion sort, heaviest first, then by name
			j = i
			while (j > 1 && (tw[order[j-1]] < tw[order[j]] || (tw[order[j-1]] == tw[order[j]] && t[order[j-1]] > t[order[j]]))) {
				k = order[j]; order[j] = order[j-1]; order[j-1] = k; j--
			}
		}
		for (s = 1; s <= n; s++) load[s] = 0
		for (i = 1; i <= m; i++) {
			best = 1
			for (s = 2; s <= n; s++) if (load[s] < load[best]) best = s
			load[best] += tw[order[i]]
			print best, t[order[i]], tw[order[i]]
		}
	}' "${durations}" "${logs}/tests" >"${logs}/plan"

# run_shard runs shard $1's tests, its whole output in shard-$1.log and
# its exit code in shard-$1.rc; it prints their result lines as they come.
run_shard() {
	local i="$1" names
	names=$(awk -v s="${i}" '$1 == s { printf "%s%s", sep, $2; sep = "|" }' "${logs}/plan")
	if [[ -z "${names}" ]]; then
		echo 0 >"${logs}/shard-${i}.rc"
		return
	fi
	{
		local rc=0
		go test -count=1 -timeout "${timeout}" -run "^(${names})\$" -v "${pkg}" 2>&1 || rc=$?
		echo "${rc}" >"${logs}/shard-${i}.rc"
	} | tee "${logs}/shard-${i}.log" |
		grep --line-buffered -E '^(--- (PASS|FAIL|SKIP): |ok |FAIL|panic: )' |
		sed -u "s/^/[e2e shard ${i}\/${shards}] /" || true
}

echo "e2e.sh: ${total} tests in ${shards} shards; load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
pids=()
# Ctrl-C, a hangup or a kill of e2e.sh ends the shards (each its own process group).
trap 'for p in "${pids[@]}"; do kill -TERM -- "-${p}" 2>/dev/null || true; done' INT TERM HUP
start=$(date +%s)
set -m
for ((i = 1; i <= shards; i++)); do
	echo "e2e.sh: shard ${i}/${shards}: $(awk -v s="${i}" '$1 == s { n++; w += $3 } END { printf "%d tests, about %d s", n, w }' "${logs}/plan")"
	run_shard "${i}" &
	pids+=("$!")
done
set +m
for p in "${pids[@]}"; do
	wait "${p}" || true
done
trap - INT TERM HUP
took=$(($(date +%s) - start))

failed=0
for ((i = 1; i <= shards; i++)); do
	rc=$(cat "${logs}/shard-${i}.rc" 2>/dev/null || echo "none")
	echo
	echo "=== e2e.sh: shard ${i}/${shards} (exit ${rc}), its whole log (${logs}/shard-${i}.log):"
	cat "${logs}/shard-${i}.log" 2>/dev/null || true
	[[ "${rc}" == 0 ]] || failed=1
done

# Every listed test must be reported at the top level by its shard.
missing=0
while read -r i name _; do
	if ! grep -qE "^--- (PASS|FAIL|SKIP): ${name} \(" "${logs}/shard-${i}.log" 2>/dev/null; then
		echo "e2e.sh: ${name} (shard ${i}) was not reported: it did not run to its end (see ${logs}/shard-${i}.log)" >&2
		missing=1
	elif [[ -n "${E2E_TESTS:-}" ]] && grep -qE "^--- SKIP: ${name} \(" "${logs}/shard-${i}.log"; then
		echo "e2e.sh: ${name} (shard ${i}) was skipped; E2E_TESTS names tests that must run" >&2
		missing=1
	fi
done <"${logs}/plan"

echo
echo "e2e.sh: ${total} tests in ${shards} shards, ${took} s; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((i = 1; i <= shards; i++)); do
	grep -hE '^(ok|FAIL)[[:space:]]' "${logs}/shard-${i}.log" 2>/dev/null | sed "s/^/e2e.sh: shard ${i}\/${shards}: /" || true
done
# What failed, last, so a log cut to its tail still names it.
for ((i = 1; i <= shards; i++)); do
	grep -hE '^--- FAIL: ' "${logs}/shard-${i}.log" 2>/dev/null | sed "s/^/e2e.sh: shard ${i}\/${shards}: /" || true
	# With each failed test, the last two lines its own code said (a
	# Fatalf is the last): the cleanup's dumps (a registry's log) come
	# after it and would push it out of a tail.
	awk -v p="e2e.sh: shard ${i}/${shards}: " '
		/^=== RUN   Test[^\/]*$/ { n = 0; next }
		/^ +[A-Za-z0-9_]+_test\.go:[0-9]+: / { said[n % 2] = $0; n++; next }
		/^--- FAIL: / {
			for (k = (n > 2 ? n - 2 : 0); k < n; k++) {
				l = said[k % 2]; sub(/^ +/, "", l)
				print p "  " $3 ": " substr(l, 1, 500)
			}
		}' "${logs}/shard-${i}.log" 2>/dev/null || true
	# go test -timeout: "panic: test timed out after D", then a tab-indented
	# "running tests:" and a "TestX (D)" line, indented deeper, for each test.
	awk -v p="e2e.sh: shard ${i}/${shards}: " '
		/^panic: test timed out/ { print p $0; t = 1; next }
		t && /^[[:space:]]+running tests:/ { r = 1; next }
		r && /^[[:space:]]+Test/ { sub(/^[[:space:]]+/, ""); print p "still running at the timeout: " $0; next }
		r { exit }' "${logs}/shard-${i}.log" 2>/dev/null || true
done
if ((failed || missing)); then
	# A failure on a busy machine: what else was running.
	echo "e2e.sh: the busiest processes now (%CPU over their lifetime):"
	ps -eo pcpu,etimes,comm --sort=-pcpu 2>/dev/null | head -n 11 | sed 's/^/e2e.sh:   /' || true
	echo "e2e.sh: FAIL" >&2
	exit 1
fi
echo "e2e.sh: ok"
