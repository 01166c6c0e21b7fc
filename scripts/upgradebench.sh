#!/usr/bin/env bash
# upgradebench.sh is the upgrade row of issue 17 (`make bench` runs it after
# race.sh): on the realistic image of internal/benchimage (version 1, the
# race's image) and its version 2 (the same three base layers, byte for
# byte, under a new top layer with a rebuilt 8 MiB app bundle), both pushed
# to the real registry on loopback (tags v1 and v2), it times in one
# interleaved run (A B C A B C ...):
#   A  hbx's upgrade staging: `hbx install` of v2 into a runtime directory
#      where v1 is active with its kept blobs (install.keep_blobs, the
#      default): fetch what the store lacks, verify, start from the kept
#      state of the three base layers (docs/install.md, "Extracted layers
#      reused") and extract the top layer, validate, activate; bytes
#      fetched and reused from its --json result; on loopback, the disk
#      the two releases and their layer states take (du, hard links
#      counted once) against the cold install's one release;
#   B  a cold `hbx install` of v2 into an empty runtime directory;
#   C  `skopeo copy` of v2 into an OCI layout that already holds v1 (skopeo
#      reuses the layout's blobs) followed by `umoci unpack` of v2;
# each once with the registry on loopback and once behind throttleproxy
# (internal/bench/cmd/throttleproxy: one token bucket shared by every
# connection, UPGRADE_RATE bytes a second, default 20000000, about a good
# home link). The setup of A and C (v1 installed, v1 copied into the
# layout) is done before each round on loopback and not counted. Behind
# the proxy it prints the bytes the proxy served for each run beside hbx's
# fetched_bytes (the proxy's figure adds the index, manifest and config).
#
# Medians and min–max; it never fails on a time. UPGRADE_ROUNDS (default 3)
# sets the counted rounds; one loopback round before them warms up.
# UPGRADE_SCALE (default 1) sizes the image as mkbenchimage -scale does (a
# small fraction makes a quick trial of the script itself).
# UPGRADE_OLD_HBX=PATH adds path O, A's staging run by another hbx binary
# (its own runtime directory, where that binary installed v1), in the same
# rotation: a before/after of a change to the staging in one run.
# UPGRADE_QUICK=1 runs the loopback rounds only, without C (A, O and B)
# and without the rehearsal row.
# Peak RSS (GNU time's maximum resident set) is printed per path.
# Noise rules (BENCHMARKING.md): compare only rows of this run; a round's
# trees are renamed aside and deleted at the end (ext4 inode reuse), unless
# the disk is short, when they are deleted after each round (it says so).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"
export GOFLAGS='-buildvcs=false -tags=containers_image_openpgp' CGO_ENABLED=0
while read -r v; do unset "${v}"; done < <(compgen -v HBX_ || true)

rounds="${UPGRADE_ROUNDS:-3}"
rate="${UPGRADE_RATE:-20000000}"
scale="${UPGRADE_SCALE:-1}"
old_hbx="${UPGRADE_OLD_HBX:-}"
quick="${UPGRADE_QUICK:-0}"
paths=(A B C) links=(loopback limited)
[[ -n "${old_hbx}" ]] && paths=(A O B C)
[[ ${quick} == 1 ]] && paths=("${paths[@]/C/}") links=(loopback)
read -ra paths <<<"${paths[*]}"
[[ "${rounds}" =~ ^[1-9][0-9]*$ ]] || {
	echo "upgradebench: UPGRADE_ROUNDS=${rounds}: want a positive integer" >&2
	exit 2
}
[[ "${scale}" =~ ^(1|0\.[0-9]*[1-9])$ ]] || {
	echo "upgradebench: UPGRADE_SCALE=${scale}: want 1 or a fraction such as 0.5" >&2
	exit 2
}
[[ -z "${old_hbx}" || -x "${old_hbx}" ]] || {
	echo "upgradebench: UPGRADE_OLD_HBX=${old_hbx}: want an executable hbx binary" >&2
	exit 2
}
[[ "${rate}" =~ ^[1-9][0-9]*$ ]] || {
	echo "upgradebench: UPGRADE_RATE=${rate}: want bytes a second, a positive integer" >&2
	exit 2
}
dir="${repo_root}/.run/upgrade"
hbx="${repo_root}/bin/hbx"
GNU_TIME=/usr/bin/time
pids=()
trash=""
started=${SECONDS}

bench_name=upgradebench
# shellcheck source=scripts/benchlib.sh
source "${repo_root}/scripts/benchlib.sh"
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	stop_pids
	if [[ -n "${trash}" && -d "${trash}" ]]; then
		local t0=${SECONDS}
		rm -rf "${trash}"
		((rc == 0)) && echo "Deleting the run's trees took $((SECONDS - t0)) s (the disk's online discard; not in any figure)."
	fi
	((rc == 0)) || echo "upgradebench: failed (exit ${rc}); logs are in .run/upgrade/logs/" >&2
	exit "${rc}"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM


bench_prepare throttleproxy
# A round leaves about 2.5 GB per link (two runtimes with v1 and v2, the
# layout and umoci's bundle); keep them all only when the disk has room.
keep_trash=1
need_kib=$(((2 * rounds + 1) * 3 * 1024 * 1024 + 5 * 1024 * 1024))
if (($(df -k --output=avail "${dir}" | tail -n 1) < need_kib)); then
	keep_trash=0
fi

step "Machine"
echo "nproc $(nproc); kernel $(uname -r); load $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min; other work on the machine adds noise)"
echo "disk: $(df -T "${dir}" | awk 'NR == 2 {print $2 " on " $1}'), $(df -h --output=avail "${dir}" | tail -n 1 | tr -d ' ') free"
echo "hbx:  $("${hbx}" version | sed -n 's/^version: *//p')"
[[ -n "${old_hbx}" ]] && echo "O:    ${old_hbx}: $("${old_hbx}" version | sed -n 's/^version: *//p')"

# wait_for FILE KEY PID LOG: waits until FILE has a KEY= line or PID exits.
wait_for() {
	local i
	for ((i = 0; i < 3000; i++)); do
		grep -qs "^$2=" "$1" && return
		kill -0 "$3" 2>/dev/null || die "$(basename "$4" .log) failed: $(tail -n 2 "$4")"
		sleep 0.1
	done
	die "$(basename "$4" .log) printed no $2= within 300 s"
}
val() { sed -n "s|^$2=||p" "$1"; }

step "Images (built once into .cache/benchimage, then reused) and the limited link"
out1="${dir}/v1.out" out2="${dir}/v2.out" outp="${dir}/proxy.out"
"${dir}/bin/mkbenchimage" -out "${repo_root}/.cache/benchimage/scale-${scale}" -scale "${scale}" -registry "${dir}/registry" -repo bench/app:v1 \
	>"${out1}" 2>"${dir}/logs/mkbenchimage-v1.log" &
pids+=($!)
wait_for "${out1}" ref "${pids[-1]}" "${dir}/logs/mkbenchimage-v1.log"
registry=$(val "${out1}" registry)
"${dir}/bin/mkbenchimage" -out "${repo_root}/.cache/benchimage/scale-${scale}-v2" -scale "${scale}" -version 2 -push "${registry}/bench/app:v2" \
	>"${out2}" 2>"${dir}/logs/mkbenchimage-v2.log" || die "mkbenchimage -version 2 failed: $(tail -n 2 "${dir}/logs/mkbenchimage-v2.log")"
ref1=$(val "${out1}" ref) man1=$(val "${out1}" manifest)
ref2=$(val "${out2}" ref) man2=$(val "${out2}" manifest) compressed=$(val "${out2}" compressed)
[[ -n "${ref1}" && -n "${ref2}" && -n "${compressed}" ]] || die "mkbenchimage printed no ref or compressed line"
"${dir}/bin/throttleproxy" -upstream "${registry}" -rate "${rate}" >"${outp}" 2>"${dir}/logs/throttleproxy.log" &
pids+=($!)
wait_for "${outp}" addr "${pids[-1]}" "${dir}/logs/throttleproxy.log"
proxy=$(val "${outp}" addr)
echo "v1: ${ref1}: $(val "${out1}" files) files, $(($(val "${out1}" compressed) / 1048576)) MiB compressed"
echo "v2: ${ref2}: $(val "${out2}" files) files, $((compressed / 1048576)) MiB compressed"
echo "limited link: throttleproxy on ${proxy}, $(awk -v r="${rate}" 'BEGIN {printf "%.1f", r / 1e6}') MB/s shared by all connections"

# config FILE HOST REF MANIFEST: an hbx.yaml for REF served by HOST.
config() {
	cat >"$1" <<EOF
executor:
  image: "$2/${3#*/}"
  platform: linux/amd64
  platform_digests:
    linux/amd64: "$4"
  runtime_dir: ${dir}/work/unused
  data_dir: ${dir}/box/data
  state_dir: ${dir}/box/state
registry:
  insecure_hosts: ["${registry}", "${proxy}"]
EOF
}
config "${dir}/v1.yaml" "${registry}" "${ref1}" "${man1}"
config "${dir}/v2-loopback.yaml" "${registry}" "${ref2}" "${man2}"
config "${dir}/v2-limited.yaml" "${proxy}" "${ref2}" "${man2}"
# skopeo takes name@digest (not name:tag@digest).
src() { # src HOST REF
	local nametag=${2%@*}
	nametag=${nametag#*/}
	echo "docker://$1/${nametag%:*}@${2#*@}"
}

# timed LABEL CMD...: measure (benchlib), keeping in rss the largest peak
# RSS of each path; LABEL is ROUND-LINK-PATH[-STEP] (r1-loopback-C-copy:
# path C, so skopeo's and umoci's steps count for C).
timed() {
	measure "$@"
	local k
	IFS=- read -r _ _ k _ <<<"$1"
	((m_kib > ${rss[${k}]:-0})) && rss[${k}]=${m_kib}
	true
}
declare -A rss
served() { # the bytes the proxy has served so far
	curl -fsS "http://${proxy}/-/stats" | sed -n 's/^bytes=\([0-9]*\) .*/\1/p'
}
field() { # field LOG NAME: a number from the last JSON line of LOG
	tail -n 1 "$1" | grep -o "\"$2\":[0-9]*" | cut -d: -f2
}
mib() { awk -v b="$1" 'BEGIN {printf "%.2f", b / 1048576}'; }
via() { # via LINK BYTES: "; proxy N MiB" behind the proxy, else nothing
	[[ $1 == limited ]] && printf '; proxy served %d B' "$2"
	true
}
pct() { awk -v b="$1" -v t="${compressed}" 'BEGIN {printf "%.2f", 100 * b / t}'; }

declare -A secs fetched proxied
# run_A, run_B, run_C W LINK LABEL HOST: one run each, into round
# directory W, adding its figures to secs, fetched and proxied and its part
# of the round's line to line.
run_A() { staging A "${hbx}" upgrade "$@"; }
run_O() { staging O "${old_hbx}" upgrade-old "$@"; }
# staging PATH BINARY RUNTIME W LINK LABEL HOST: A's run (or O's: another
# binary, another runtime directory).
staging() {
	local A=$1 bin=$2 rt=$3 w=$4 link=$5 label=$6 p0 p1 fb rb
	p0=$(served)
	timed "${label}-${A}" "${bin}" --config "${dir}/v2-${link}.yaml" --executor-runtime-dir "${w}/${rt}" install --json
	p1=$(served)
	fb=$(field "${dir}/logs/${label}-${A}.log" fetched_bytes)
	rb=$(field "${dir}/logs/${label}-${A}.log" reused_bytes)
	[[ -n "${fb}" && -n "${rb}" ]] || die "${label}-${A}: no fetched_bytes or reused_bytes in hbx install --json's result"
	((rb > 0)) || die "${label}-${A}: the upgrade reused nothing (reused_bytes 0): are blobs kept?"
	secs[${A},${link}]+=" ${m_s}" fetched[${A},${link}]+=" ${fb}" proxied[${A},${link}]+=" $((p1 - p0))"
	line[${A}]=$(printf '%s upgrade %6.2f s (fetched %d B = %s %%, reused %s MiB%s)' "${A}" "${m_s}" "${fb}" "$(pct "${fb}")" "$(mib "${rb}")" "$(via "${link}" $((p1 - p0)))")
}
run_B() {
	local w=$1 link=$2 label=$3 p0 p1 fb
	p0=$(served)
	timed "${label}-B" "${hbx}" --config "${dir}/v2-${link}.yaml" --executor-runtime-dir "${w}/cold" install --json
	p1=$(served)
	fb=$(field "${dir}/logs/${label}-B.log" fetched_bytes)
	[[ -n "${fb}" ]] || die "${label}-B: no fetched_bytes in hbx install --json's result"
	secs[B,${link}]+=" ${m_s}" fetched[B,${link}]+=" ${fb}" proxied[B,${link}]+=" $((p1 - p0))"
	line[B]=$(printf 'B cold %6.2f s (fetched %s MiB%s)' "${m_s}" "$(mib "${fb}")" "$(via "${link}" $((p1 - p0)))")
}
run_C() {
	local w=$1 link=$2 label=$3 host=$4 p0 p1 copy_s
	p0=$(served)
	timed "${label}-C-copy" skopeo copy --quiet --src-tls-verify=false "$(src "${host}" "${ref2}")" "oci:${w}/oci:v2"
	p1=$(served)
	copy_s=${m_s}
	timed "${label}-C-unpack" umoci unpack --image "${w}/oci:v2" "${w}/bundle"
	m_s=$(awk -v a="${copy_s}" -v b="${m_s}" 'BEGIN {print a + b}')
	secs[C,${link}]+=" ${m_s}" proxied[C,${link}]+=" $((p1 - p0))"
	line[C]=$(printf 'C skopeo+umoci %6.2f s (copy %.2f s%s)' "${m_s}" "${copy_s}" "$(via "${link}" $((p1 - p0)))")
}
# round R LINK: one round on LINK (loopback or limited): the setup, then A,
# disk W: after a round on loopback, the upgraded runtime's current and
# previous releases and its layer states (du, each hard-linked inode
# counted once) against the one release of the cold install; the ratio
# joins disk_ratios.
disk_ratios=()
disk() {
	local w=$1 two one states
	two=$(du -sk "${w}/upgrade/releases" "${w}/upgrade/layers" 2>/dev/null | awk '{s += $1} END {print s}')
	states=$(du -sk "${w}/upgrade/releases" "${w}/upgrade/layers" 2>/dev/null | awk 'NR == 2 {print $1}')
	one=$(du -sk "${w}/cold/releases" | cut -f1)
	disk_ratios+=("$(awk -v a="${two}" -v b="${one}" 'BEGIN {print a / b}')")
	printf '         disk: current + previous + layer states %s MiB (states alone %s MiB), one release (cold) %s MiB: %.3fx\n' \
		"$(mib $((two * 1024)))" "$(mib $((${states:-0} * 1024)))" "$(mib $((one * 1024)))" "${disk_ratios[-1]}"
}
# B and C in an order that rotates from round to round (A B C, B C A,
# C A B), so no path always runs first after the setup.
round() {
	local r=$1 link=$2 w="${dir}/work/r$1-$2" label="r$1-$2" host=${registry} k
	[[ ${link} == limited ]] && host=${proxy}
	mkdir -p "${w}"
	# Setup, not counted: v1 active with its kept blobs; v1 in the layout.
	timed "${label}-setup-hbx" "${hbx}" --config "${dir}/v1.yaml" --executor-runtime-dir "${w}/upgrade" install -q
	[[ -n "${old_hbx}" ]] && timed "${label}-setup-old" "${old_hbx}" --config "${dir}/v1.yaml" --executor-runtime-dir "${w}/upgrade-old" install -q
	[[ ${quick} == 1 ]] || timed "${label}-setup-skopeo" skopeo copy --quiet --src-tls-verify=false "$(src "${registry}" "${ref1}")" "oci:${w}/oci:v1"
	declare -A line
	local n=${#paths[@]} order=("${paths[@]}" "${paths[@]}") said=""
	for k in "${order[@]:$((r % n)):n}"; do
		"run_${k}" "${w}" "${link}" "${label}" "${host}"
	done
	for k in "${paths[@]}"; do said+="${line[${k}]}  "; done
	printf '%-8s %-8s %s(order %s)\n' "$([[ ${r} == 0 ]] && echo warm-up || echo "round ${r}")" "${link}" \
		"${said}" "${order[*]:$((r % n)):n}"
	[[ ${link} == loopback && ${r} != 0 ]] && disk "${w}"
	mv "${w}" "${trash}/"
	if ((keep_trash == 0)); then
		rm -rf "${trash:?}/$(basename "${w}")"
	fi
}

step "Rounds: 1 warm-up (loopback) + ${rounds} counted on each link; A = hbx upgrade staging, B = hbx cold install, C = skopeo copy into the v1 layout + umoci unpack"
((keep_trash)) || echo "(the disk is short: each round's trees are deleted right after it, which can slow the next round's file creation)"
for ((r = 0; r <= rounds; r++)); do
	round "${r}" loopback
	if ((r == 0)); then
		for k in A O B C; do unset "secs[${k},loopback]" "fetched[${k},loopback]" "proxied[${k},loopback]"; done
		continue
	fi
	[[ ${quick} == 1 ]] || round "${r}" limited
done

# ratio KEY_A KEY_B: the median over rounds of secs[KEY_A] / secs[KEY_B].
ratio() {
	local -a a b q=()
	read -ra a <<<"${secs[$1]}"
	read -ra b <<<"${secs[$2]}"
	local i
	for i in "${!a[@]}"; do q+=("$(awk -v x="${a[i]}" -v y="${b[i]}" 'BEGIN {print (y > 0) ? x / y : 0}')"); done
	stats "${q[@]}" | cut -d' ' -f1
}
row() { # row NAME KEY: one table row
	local name=$1 key=$2 med lo hi fmed pmed cold
	local -a s f p
	read -ra s <<<"${secs[${key}]}"
	read -r med lo hi <<<"$(stats "${s[@]}")"
	fmed="" pmed=""
	if [[ -n "${fetched[${key}]:-}" ]]; then
		read -ra f <<<"${fetched[${key}]}"
		read -r fmed _ _ <<<"$(stats "${f[@]}")"
		fmed="$(mib "${fmed}") ($(pct "${fmed}") %)"
	fi
	if [[ ${key} == *limited ]]; then
		read -ra p <<<"${proxied[${key}]}"
		read -r pmed _ _ <<<"$(stats "${p[@]}")"
		pmed=$(mib "${pmed}")
	fi
	cold=$(ratio "${key}" "B,${key#*,}")
	printf '| %-46s | %8.2f | %11s | %6.2f | %-18s | %9s |\n' "${name}" "${med}" "$(printf '%.2f–%.2f' "${lo}" "${hi}")" \
		"${cold}" "${fmed}" "${pmed}"
}
step "Results (${rounds} rounds; × cold = median of per-round ratios to B on the same link; fetched = hbx's fetched_bytes, % of v2's $(mib "${compressed}") MiB of layers)"
echo "| path                                           | median s |   min–max s | × cold | fetched MiB (%)    | proxy MiB |"
echo "|------------------------------------------------|---------:|------------:|-------:|--------------------|----------:|"
for link in "${links[@]}"; do
	tag="loopback"
	[[ ${link} == limited ]] && tag="$(awk -v r="${rate}" 'BEGIN {printf "%g", r / 1e6}') MB/s"
	row "A hbx upgrade staging (v1 kept), ${tag}" "A,${link}"
	[[ -n "${old_hbx}" ]] && row "O the same staging, UPGRADE_OLD_HBX, ${tag}" "O,${link}"
	row "B hbx install, cold, ${tag}" "B,${link}"
	[[ ${quick} == 1 ]] || row "C skopeo copy (v1 layout) + umoci, ${tag}" "C,${link}"
done
echo
if [[ ${quick} != 1 ]]; then
	read -ra f <<<"${fetched[A,limited]}"
	read -r fa _ _ <<<"$(stats "${f[@]}")"
	echo "Targets: the upgrade fetches $(pct "${fa}") % of the image's compressed bytes (target < 10 %);"
	echo "         behind the limited link it takes $(printf '%.2f' "$(ratio "A,limited" "B,limited")") of a cold install's time (target < 0.5)."
fi
echo "Peak RSS (the largest of each path's counted and warm-up runs):$(for k in "${paths[@]}"; do printf ' %s %s MiB' "${k}" "$(mib $((${rss[${k}]:-0} * 1024)))"; done)"
read -r dmed dlo dhi <<<"$(stats "${disk_ratios[@]}")"
echo "Disk: current + previous (+ their layer states) take ${dmed}x one release (${dlo}–${dhi}; target < 1.15); upgrade staging on loopback takes $(printf '%.2f' "$(ratio "A,loopback" "B,loopback")") of a cold install (target < 0.25)."
echo "The proxy's figure is every response body it served (index, manifest, config and blobs); hbx's fetched_bytes counts the blobs."
echo "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg). The row took $((SECONDS - started)) s with ${rounds} rounds."

# ---- rehearsal row (issue 27): what the rehearsal adds to hbx upgrade ----
# rehearsal_row runs e2e's TestBenchRehearsal: on the test image (its
# server boots under the real Bun) with hbx supervise running, rounds of
# `hbx upgrade` 1.0.0 -> 2.0.0 with the rehearsal and with --no-rehearsal,
# interleaved, each rolled back, with a 32 MiB file in the data directory
# (UPGRADE_REHEARSAL_ROUNDS rounds, default 3). It prints the medians of
# both upgrades, of the rehearsal itself and of its copy, and how many
# copies needed a hold. Not comparable with the rows above (another image).
rehearsal_row() {
	step "Rehearsal: hbx upgrade with and without it (test image, interleaved)"
	local out
	if ! out=$(HBXTEST_E2E=1 HBXTEST_BENCH=1 HBXTEST_REHEARSAL_ROUNDS="${UPGRADE_REHEARSAL_ROUNDS:-3}" HBXTEST_BIN="${hbx}" \
		go test -count=1 -run '^TestBenchRehearsal$' -v ./e2e/ 2>&1); then
		tail -20 <<<"${out}" >&2
		return 1
	fi
	grep '^rehearsal:' <<<"${out}" | sed 's/^rehearsal: //'
}
[[ ${quick} == 1 ]] || rehearsal_row
# ---- end of the rehearsal row ----
