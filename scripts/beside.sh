#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# beside.sh NAME COMMAND [NAME COMMAND ...] runs each COMMAND (bash -c) at
# once, each in a process group of its own, its whole output in
# .run/beside/NAME.log and its exit code in .run/beside/NAME.rc. `make
# check` runs the arm64 suite and the Docker suite this way (the Makefile's
# e2e-beside): the Docker suite mostly waits on the engine and its
# containers (measured at load average 10: 430 CPU-seconds over 908 s, a
# quarter of a 2-vCPU machine), so it fits beside the arm64 suite.
# While they run it prints their test result lines, each prefixed with
# [NAME]. When all have ended it prints each log whole, then, last, the
# summary lines of each (go test's ok/FAIL, --- FAIL, panics, e2e.sh's own
# lines, make's errors) and each one's exit code, so a log cut to its tail
# still says what failed, whichever it was. One failing never stops the
# others. It exits non-zero when any failed. A second beside.sh in the same
# tree at once is refused (flock on .run/beside.lock).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"

if (($# == 0 || $# % 2 != 0)); then
	echo "usage: beside.sh NAME COMMAND [NAME COMMAND ...]" >&2
	exit 2
fi
names=()
cmds=()
while (($#)); do
	if ! [[ "$1" =~ ^[a-z0-9][a-z0-9-]*$ ]]; then
		echo "beside.sh: name ${1@Q}: want a-z, 0-9 and '-'" >&2
		exit 2
	fi
	names+=("$1")
	cmds+=("$2")
	shift 2
done

logs=.run/beside
mkdir -p .run
exec 9>.run/beside.lock
if ! flock -n 9; then
	echo "beside.sh: another beside.sh runs in ${repo_root} (it holds .run/beside.lock)" >&2
	exit 1
fi
rm -rf "${logs}"
mkdir -p "${logs}"

# run_one runs command $2 as $1, its output in $1.log, its exit code in
# $1.rc; it prints the result lines as they come.
run_one() {
	local name="$1" cmd="$2"
	{
		local rc=0
		bash -c "${cmd}" </dev/null 2>&1 || rc=$?
		echo "${rc}" >"${logs}/${name}.rc"
		echo "$(($(date +%s) - start))" >"${logs}/${name}.took"
	} | tee "${logs}/${name}.log" |
		grep --line-buffered -E '^(\[e2e shard [0-9]+/[0-9]+\] |--- (PASS|FAIL|SKIP): |ok |FAIL|panic: )' |
		sed -u "s/^/[${name}] /" || true
}

echo "beside.sh: ${names[*]} at once; load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
pids=()
trap 'for p in "${pids[@]}"; do kill -TERM -- "-${p}" 2>/dev/null || true; done' INT TERM HUP
start=$(date +%s)
set -m
for i in "${!names[@]}"; do
	run_one "${names[$i]}" "${cmds[$i]}" &
	pids+=("$!")
done
set +m
for i in "${!pids[@]}"; do
	wait "${pids[$i]}" || true
	echo "beside.sh: ${names[$i]} ended, exit $(cat "${logs}/${names[$i]}.rc" 2>/dev/null || echo none), in $(cat "${logs}/${names[$i]}.took" 2>/dev/null || echo "?") s"
done
trap - INT TERM HUP
took=$(($(date +%s) - start))

for name in "${names[@]}"; do
	echo
	echo "=== beside.sh: ${name} (exit $(cat "${logs}/${name}.rc" 2>/dev/null || echo none)), its whole log (${logs}/${name}.log):"
	cat "${logs}/${name}.log" 2>/dev/null || true
done

echo
echo "beside.sh: ${names[*]} at once, ${took} s; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
failed=()
for name in "${names[@]}"; do
	grep -E '^(ok |FAIL|--- FAIL: |panic: |e2e\.sh: [^s]|e2e\.sh: shard [0-9]+/[0-9]+: (ok|FAIL|---|still)|make(\[[0-9]+\])?: \*\*\*)' "${logs}/${name}.log" 2>/dev/null |
		awk '!seen[$0]++' | sed "s/^/beside.sh: ${name}: /" || true
	rc=$(cat "${logs}/${name}.rc" 2>/dev/null || echo none)
	echo "beside.sh: ${name}: exit ${rc}, in $(cat "${logs}/${name}.took" 2>/dev/null || echo "?") s"
	[[ "${rc}" == 0 ]] || failed+=("${name}")
done
if ((${#failed[@]})); then
	echo "beside.sh: FAIL: ${failed[*]}" >&2
	exit 1
fi
echo "beside.sh: ok"
