#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# bench.sh prints install figures for the project's test image (`make bench`)
# under the project's noise rules: interleaved rounds, medians with min–max,
# one uncounted warm-up round, and it never fails on a time (only when a
# command itself fails).
#
# Each round measures, with GNU time (/usr/bin/time -f '%e %M'):
#   - a cold `hbx install` into a fresh runtime directory, from the real
#     registry on loopback;
#   - a warm `hbx install` into the same directory (a no-op);
#   - the floor: sequential `tar -xzf` (`zstd -dc | tar -x` for a zstd layer)
#     of the same platform's layer blobs, in manifest order, into a fresh
#     directory, read from the OCI layout mktestimage wrote.
# The order of hbx and tar alternates between rounds. Used trees are renamed
# into a trash directory and deleted only at the end: ext4 here is slow to
# reuse freshly freed inodes, which would slow later rounds.
#
# BENCH_ROUNDS (default 5) sets the number of counted rounds. Everything lives
# under the git-ignored .run/bench/ and listens on 127.0.0.1 only.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"
export GOFLAGS='-buildvcs=false -tags=containers_image_openpgp' CGO_ENABLED=0
while read -r v; do unset "${v}"; done < <(compgen -v HBX_ || true)

rounds="${BENCH_ROUNDS:-5}"
[[ "${rounds}" =~ ^[1-9][0-9]*$ ]] || {
	echo "bench: BENCH_ROUNDS=${rounds}: want a positive integer" >&2
	exit 2
}

bench_dir="${repo_root}/.run/bench"
trash="" # renamed-aside trees, deleted at the end
registry_pid=""
hbx="${repo_root}/bin/hbx"
GNU_TIME=/usr/bin/time

step() { printf '\n==> %s\n' "$*"; }
die() {
	echo "bench: $*" >&2
	exit 1
}
now_us() { echo "${EPOCHREALTIME//[.,]/}"; }

cleanup() {
	local rc=$? i
	trap - EXIT INT TERM
	if [[ -n "${registry_pid}" ]]; then
		kill -TERM "${registry_pid}" 2>/dev/null || true
		for ((i = 0; i < 100; i++)); do
			kill -0 "${registry_pid}" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "${registry_pid}" 2>/dev/null || true
		wait "${registry_pid}" 2>/dev/null || true
	fi
	if [[ -n "${trash}" && -d "${trash}" ]]; then
		rm -rf "${trash}"
	fi
	if ((rc == 130 || rc == 143)); then
		echo "bench: interrupted; logs are in ${bench_dir#"${repo_root}"/}/" >&2
	elif ((rc != 0)); then
		echo "bench: failed (exit ${rc}); logs are in ${bench_dir#"${repo_root}"/}/" >&2
	fi
	exit "${rc}"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# apt_install installs Debian packages when running as root.
apt_install() {
	[[ "$(id -u)" -eq 0 ]] || die "$* missing; as root run: apt-get install -y $*"
	echo "bench: installing $* with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	# shellcheck source=scripts/aptget.sh
	source "$(dirname "${BASH_SOURCE[0]}")/aptget.sh"
	apt_get install -y -qq "$@" >/dev/null 2>&1 || { apt_get update -qq && apt_get install -y -qq "$@" >/dev/null; }
}

step "Prerequisites"
command -v go >/dev/null || die "go is missing (the test image is built with it)"
"${GNU_TIME}" -f '%e %M' -o /dev/null true 2>/dev/null || apt_install time
command -v zstd >/dev/null || apt_install zstd
scripts/testdeps.sh
if [[ ! -x "${hbx}" ]]; then
	echo "bench: bin/hbx is missing: make build"
	make --no-print-directory build
fi

# A fresh bench directory; an earlier one goes to the trash.
mkdir -p "${repo_root}/.run"
trash="$(mktemp -d "${repo_root}/.run/bench-trash.XXXXXX")"
if [[ -e "${bench_dir}" ]]; then
	mv "${bench_dir}" "${trash}/previous"
fi
mkdir -p "${bench_dir}/bin" "${bench_dir}/logs" "${bench_dir}/work"

step "Machine"
echo "nproc:  $(nproc)"
echo "memory: $(free -h | awk '/^Mem:/ {print "total " $2 ", used " $3 ", free " $4 ", available " $7}')"
echo "kernel: $(uname -srm)"
echo "cpu:    $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
echo "disk:   $(df -T "${bench_dir}" | awk 'NR == 2 {print $2 " on " $1}') (${bench_dir#"${repo_root}"/})"
echo "hbx:    $("${hbx}" version | sed -n 's/^version: *//p')"
echo "load:   $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min averages; other work on the machine adds noise)"

step "Test image and registry"
go build -o "${bench_dir}/bin/mktestimage" ./internal/testimage/cmd/mktestimage
go build -o "${bench_dir}/bin/layerblobs" ./internal/bench/cmd/layerblobs
: >"${bench_dir}/mktestimage.out"
"${bench_dir}/bin/mktestimage" -out "${bench_dir}/image" -registry "${bench_dir}/registry" \
	>"${bench_dir}/mktestimage.out" 2>"${bench_dir}/logs/mktestimage.log" &
registry_pid=$!
for ((i = 0; i < 1800; i++)); do
	grep -qs '^ref=' "${bench_dir}/mktestimage.out" && break
	kill -0 "${registry_pid}" 2>/dev/null || die "mktestimage exited before pushing: $(tail -n 1 "${bench_dir}/logs/mktestimage.log")"
	sleep 0.1
done
grep -q '^ref=' "${bench_dir}/mktestimage.out" || die "mktestimage did not push within 180s"
value() { sed -n "s|^$1=||p" "${bench_dir}/mktestimage.out"; }
case "$(uname -m)" in
x86_64 | amd64) arch=amd64 ;;
aarch64 | arm64) arch=arm64 ;;
*) die "no test image for machine $(uname -m)" ;;
esac
platform="linux/${arch}"
ref="$(value ref)"
registry="$(value registry)"
manifest="$(value "${platform}")"
layout="$(value layout)"
[[ -n "${ref}" && -n "${registry}" && -n "${manifest}" && -n "${layout}" ]] ||
	die "mktestimage printed no ref, registry, layout or ${platform} line"
echo "image:    ${ref}"
echo "platform: ${platform}, manifest ${manifest}"

# The floor: one script extracting the layer blobs in manifest order.
floor="${bench_dir}/floor.sh"
# shellcheck disable=SC2016 # ${dir} and $1 expand when the floor script runs
{
	echo 'set -euo pipefail'
	echo 'dir=$1'
} >"${floor}"
layer_kinds=()
compressed=0
# shellcheck disable=SC2016
while IFS=$'\t' read -r media_type blob; do
	case "${media_type}" in
	*tar+gzip | *tar.gzip) printf 'tar -xzf %q -C "${dir}"\n' "${blob}" ;;
	*tar+zstd) printf 'zstd -dcq %q | tar -x -C "${dir}"\n' "${blob}" ;;
	*tar) printf 'tar -xf %q -C "${dir}"\n' "${blob}" ;;
	*) die "layer ${blob}: media type ${media_type} has no tar floor" ;;
	esac >>"${floor}"
	layer_kinds+=("${media_type##*.}")
	compressed=$((compressed + $(stat -c %s "${blob}")))
done < <("${bench_dir}/bin/layerblobs" "${layout}" "${platform}")
((${#layer_kinds[@]} > 0)) || die "no layers found for ${platform} in ${layout}"
echo "layers:   ${#layer_kinds[@]} (${layer_kinds[*]}), $((compressed / 1024 / 1024)) MiB compressed"

config="${bench_dir}/hbx.yaml"
cat >"${config}" <<EOF
executor:
  image: "${ref}"
  platform: ${platform}
  platform_digests:
    ${platform}: "${manifest}"
  runtime_dir: ${bench_dir}/work/unused
  data_dir: ${bench_dir}/box/data
  state_dir: ${bench_dir}/box/state
registry:
  insecure_hosts: ["${registry}"]
EOF

# measure LABEL CMD... runs CMD under GNU time, its output in logs/LABEL.log,
# and sets m_s (GNU time's %e), m_kib (%M) and m_us (the shell's clock
# around the run, microseconds).
measure() {
	local label=$1 t0 t1
	shift
	local tf="${bench_dir}/logs/${label}.time"
	t0=$(now_us)
	if ! "${GNU_TIME}" -f '%e %M' -o "${tf}" "$@" >"${bench_dir}/logs/${label}.log" 2>&1; then
		tail -n 5 "${bench_dir}/logs/${label}.log" >&2
		die "${label}: $* failed"
	fi
	t1=$(now_us)
	read -r m_s m_kib <"${tf}"
	m_us=$((t1 - t0))
}

cold_s=() cold_kib=() warm_s=() warm_kib=() warm_us=() tar_s=() tar_kib=()
run_hbx() {
	local r=$1 rt="${bench_dir}/work/r$1/runtime"
	measure "r${r}-cold" "${hbx}" --config "${config}" --executor-runtime-dir "${rt}" install
	grep -q '^installed ' "${bench_dir}/logs/r${r}-cold.log" || die "round ${r}: the cold install installed nothing"
	c_s=${m_s} c_kib=${m_kib}
	measure "r${r}-warm" "${hbx}" --config "${config}" --executor-runtime-dir "${rt}" install
	grep -q '^up to date' "${bench_dir}/logs/r${r}-warm.log" || die "round ${r}: the warm install was not a no-op"
	w_s=${m_s} w_kib=${m_kib} w_us=${m_us}
}
run_tar() {
	local r=$1 dir="${bench_dir}/work/r$1/tar"
	mkdir -p "${dir}"
	measure "r${r}-tar" bash "${floor}" "${dir}"
	t_s=${m_s} t_kib=${m_kib}
}

step "Rounds: 1 warm-up + ${rounds} counted, hbx and tar interleaved"
for ((r = 0; r <= rounds; r++)); do
	# The previous round's trees go aside, not away.
	if ((r > 0)); then
		mv "${bench_dir}/work/r$((r - 1))" "${trash}/"
	fi
	mkdir -p "${bench_dir}/work/r${r}"
	if ((r % 2 == 1)); then
		run_tar "${r}"
		run_hbx "${r}"
	else
		run_hbx "${r}"
		run_tar "${r}"
	fi
	if ((r == 0)); then
		label="warm-up"
		entries=$(find "${bench_dir}/work/r0/tar" -mindepth 1 | wc -l)
		tree_mib=$(($(du -sb "${bench_dir}/work/r0/tar" | cut -f1) / 1024 / 1024))
		bun_kib=$("${GNU_TIME}" -f '%M' "${bench_dir}/work/r0/runtime/current/rootfs/usr/local/bin/bun" --version 2>&1 >/dev/null | tail -n 1)
	else
		label="round ${r}"
		cold_s+=("${c_s}") cold_kib+=("${c_kib}")
		warm_s+=("${w_s}") warm_kib+=("${w_kib}") warm_us+=("${w_us}")
		tar_s+=("${t_s}") tar_kib+=("${t_kib}")
	fi
	printf '%-8s cold install %5.2f s   warm install %6.1f ms   tar floor %5.2f s\n' \
		"${label}" "${c_s}" "$(awk -v u="${w_us}" 'BEGIN {print u / 1000}')" "${t_s}"
done
mv "${bench_dir}/work/r${rounds}" "${trash}/"

# stats prints "median min max" of its arguments.
stats() {
	printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1}
		END {m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; print m, v[1], v[NR]}'
}
# ratio_median prints the median over rounds of A[i] / B[i], given the
# arrays' names.
ratio_median() {
	local -n a=$1 b=$2
	local i q=()
	for i in "${!a[@]}"; do
		q+=("$(awk -v x="${a[i]}" -v y="${b[i]}" 'BEGIN {print (y > 0) ? x / y : 0}')")
	done
	stats "${q[@]}" | cut -d' ' -f1
}
# row prints one table row from the names of a seconds and a KiB array.
row() {
	local name=$1 ratio=$4 med lo hi kmed
	local -n secs=$2 kibs=$3
	read -r med lo hi <<<"$(stats "${secs[@]}")"
	read -r kmed _ _ <<<"$(stats "${kibs[@]}")"
	printf '| %-37s | %8.2f | %9s | %11.2f | %12.1f |\n' "${name}" "${med}" \
		"$(printf '%.2f–%.2f' "${lo}" "${hi}")" "${ratio}" "$(awk -v k="${kmed}" 'BEGIN {print k / 1024}')"
}

step "Results: ${rounds} rounds, ${platform}, ${#layer_kinds[@]} layers, ${entries} paths, ${tree_mib} MiB unpacked"
echo "| path                                  | median s | min–max s | × tar floor | peak RSS MiB |"
echo "|---------------------------------------|---------:|----------:|------------:|-------------:|"
row "tar -x of the layers (the floor)" tar_s tar_kib 1
row "hbx install, cold" cold_s cold_kib "$(ratio_median cold_s tar_s)"
row "hbx install, warm (no-op)" warm_s warm_kib "$(ratio_median warm_s tar_s)"
read -r wmed wlo whi <<<"$(stats "${warm_us[@]}")"
printf '\nwarm install: median %.1f ms, min–max %.1f–%.1f ms (shell clock, µs resolution, including process start)\n' \
	"$(awk -v u="${wmed}" 'BEGIN {print u / 1000}')" "$(awk -v u="${wlo}" 'BEGIN {print u / 1000}')" \
	"$(awk -v u="${whi}" 'BEGIN {print u / 1000}')"
cat <<EOF

Notes:
  - Times are GNU time's %e (10 ms resolution); "× tar floor" is the median of
    the per-round ratios, so drift between rounds cancels.
  - The cold install fetches from the registry on loopback, verifies every
    digest, makes the tree durable and validates it; the floor only unpacks
    local blobs and writes whiteouts as plain files.
  - The floor is \`tar -xzf\` per gzip layer and \`zstd -dc | tar -x\` per zstd
    layer, one after the other, as one bash script.
  - Peak RSS is GNU time's %M: the largest of the process and the children it
    reaped. For hbx install that includes the \`bun --version\` it runs to
    validate the staged release ($(awk -v k="${bun_kib:-0}" 'BEGIN {printf "%.1f", k / 1024}') MiB on its own); for the floor,
    the largest of bash, tar, gzip and zstd.
  - Absolute times drift 1.3–2.5x between runs on these machines: compare rows
    of the same run only. Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg).
EOF
