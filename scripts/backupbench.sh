#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# backupbench.sh prints hbx backup and hbx restore figures on a synthetic
# Executor data directory of about 1 GiB across 10,000 files (`make bench`),
# beside the pipeline boxes use without hbx, on the same data in the same
# run:
#   - backup:  tar -czf - -C DATA . | gpg --symmetric --batch
#   - restore: gpg --decrypt --batch ARCHIVE | tar -xz -C DIR
# under the project's noise rules: interleaved rounds, medians with min–max,
# one uncounted warm-up round, and it never fails on a time (only when a
# command itself fails).
#
# hbx does more than the pipeline in the same time: backup hashes every
# file for the manifest, fsyncs the archive and reads it back from disk to
# verify it; restore checks every file against the manifest, makes the tree
# durable (syncfs) and swaps it in atomically. The pipeline does none of
# that. No supervisor runs, so nothing is stopped or started.
#
# hbx restore needs the runtime the archive names to be installed: the
# script pushes the project's test image to a real registry on loopback and
# installs it once (a warm install afterwards, as every restore checks).
#
# BENCH_ROUNDS (default 3), BENCH_BYTES (default 1073741824) and BENCH_FILES
# (default 10000) tune it. Everything lives under the git-ignored
# .run/backupbench/.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"
export GOFLAGS='-buildvcs=false -tags=containers_image_openpgp' CGO_ENABLED=0
while read -r v; do unset "${v}"; done < <(compgen -v HBX_ || true)

rounds="${BENCH_ROUNDS:-3}"
bytes="${BENCH_BYTES:-1073741824}"
files="${BENCH_FILES:-10000}"
for v in rounds bytes files; do
	[[ "${!v}" =~ ^[1-9][0-9]*$ ]] || {
		echo "backupbench: ${v}=${!v}: want a positive integer" >&2
		exit 2
	}
done

bench_dir="${repo_root}/.run/backupbench"
hbx="${repo_root}/bin/hbx"
GNU_TIME=/usr/bin/time
trash=""
registry_pid=""

step() { printf '\n==> %s\n' "$*"; }
die() {
	echo "backupbench: $*" >&2
	exit 1
}

cleanup() {
	local rc=$? i
	trap - EXIT INT TERM
	if [[ -d "${bench_dir}/gnupg" ]]; then
		GNUPGHOME="${bench_dir}/gnupg" gpgconf --kill gpg-agent 2>/dev/null || true
	fi
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
	if ((rc != 0)); then
		echo "backupbench: failed or interrupted (exit ${rc}); logs are in ${bench_dir#"${repo_root}"/}/logs/" >&2
	fi
	exit "${rc}"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

apt_install() {
	[[ "$(id -u)" -eq 0 ]] || die "$* missing; as root run: apt-get install -y $*"
	echo "backupbench: installing $* with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	# shellcheck source=scripts/aptget.sh
	source "$(dirname "${BASH_SOURCE[0]}")/aptget.sh"
	apt_get install -y -qq "$@" >/dev/null 2>&1 || { apt_get update -qq && apt_get install -y -qq "$@" >/dev/null; }
}

step "Prerequisites"
command -v go >/dev/null || die "go is missing"
"${GNU_TIME}" -f '%e %M' -o /dev/null true 2>/dev/null || apt_install time
command -v gpg >/dev/null || apt_install gnupg
scripts/testdeps.sh
[[ -x "${hbx}" ]] || make --no-print-directory build

mkdir -p "${repo_root}/.run"
trash="$(mktemp -d "${repo_root}/.run/backupbench-trash.XXXXXX")"
if [[ -e "${bench_dir}" ]]; then
	mv "${bench_dir}" "${trash}/previous"
fi
mkdir -p "${bench_dir}/bin" "${bench_dir}/logs" "${bench_dir}/box" "${bench_dir}/pipe"
install -d -m 0700 "${bench_dir}/gnupg"
printf 'bench passphrase\n' >"${bench_dir}/pass"
chmod 0600 "${bench_dir}/pass"

step "Machine"
echo "nproc:  $(nproc)"
echo "memory: $(free -h | awk '/^Mem:/ {print "total " $2 ", available " $7}')"
echo "kernel: $(uname -srm)"
echo "disk:   $(df -T "${bench_dir}" | awk 'NR == 2 {print $2 " on " $1}')"
echo "hbx:    $("${hbx}" version | sed -n 's/^version: *//p')"
echo "gpg:    $(gpg --version | head -n 1)"

step "Test image, registry and runtime"
go build -o "${bench_dir}/bin/mktestimage" ./internal/testimage/cmd/mktestimage
go build -o "${bench_dir}/bin/backupdata" ./internal/bench/cmd/backupdata
"${bench_dir}/bin/mktestimage" -out "${bench_dir}/image" -registry "${bench_dir}/registry" \
	>"${bench_dir}/mktestimage.out" 2>"${bench_dir}/logs/mktestimage.log" &
registry_pid=$!
for ((i = 0; i < 1800; i++)); do
	grep -qs '^ref=' "${bench_dir}/mktestimage.out" && break
	kill -0 "${registry_pid}" 2>/dev/null || die "mktestimage exited before pushing: $(tail -n 1 "${bench_dir}/logs/mktestimage.log")"
	sleep 0.1
done
value() { sed -n "s|^$1=||p" "${bench_dir}/mktestimage.out"; }
case "$(uname -m)" in
x86_64 | amd64) platform=linux/amd64 ;;
aarch64 | arm64) platform=linux/arm64 ;;
*) die "no test image for machine $(uname -m)" ;;
esac
ref="$(value ref)" registry="$(value registry)"
[[ -n "${ref}" && -n "${registry}" ]] || die "mktestimage printed no ref or registry"
config="${bench_dir}/hbx.yaml"
cat >"${config}" <<EOF
executor:
  image: "${ref}"
  platform: ${platform}
  runtime_dir: ${bench_dir}/box/runtime
  data_dir: ${bench_dir}/box/data
  state_dir: ${bench_dir}/box/state
registry:
  insecure_hosts: ["${registry}"]
supervisor:
  socket: ${bench_dir}/box/hbx.sock
backup:
  dir: ${bench_dir}/box/backups
  passphrase_file: ${bench_dir}/pass
  keep: 1
  keep_pre_restore: 100
EOF
"${hbx}" --config "${config}" install --quiet >"${bench_dir}/logs/install.log" 2>&1 || die "hbx install failed: $(tail -n 1 "${bench_dir}/logs/install.log")"
echo "image:  ${ref} (installed for the restores)"

step "Data"
"${bench_dir}/bin/backupdata" -dir "${bench_dir}/box/data" -size "${bytes}" -files "${files}"
data_bytes=$(du -sb --apparent-size "${bench_dir}/box/data" | cut -f1)
data_files=$(find "${bench_dir}/box/data" -type f | wc -l)
echo "data:   ${data_files} files, $((data_bytes / 1024 / 1024)) MiB ($(find "${bench_dir}/box/data" -type d | wc -l) directories)"
sync

# measure LABEL CMD... runs CMD under GNU time, output in logs/LABEL.log;
# sets m_s and m_kib. A sync first, untimed, so no run pays for the
# writeback of the one before (hbx restore's syncfs would).
measure() {
	local label=$1
	shift
	sync
	if ! "${GNU_TIME}" -f '%e %M' -o "${bench_dir}/logs/${label}.time" "$@" >"${bench_dir}/logs/${label}.log" 2>&1; then
		tail -n 5 "${bench_dir}/logs/${label}.log" >&2
		die "${label}: $* failed"
	fi
	read -r m_s m_kib <"${bench_dir}/logs/${label}.time"
}

gpg_opts=(--batch --yes --quiet --no-symkey-cache --pinentry-mode loopback --passphrase-file "${bench_dir}/pass")
export GNUPGHOME="${bench_dir}/gnupg"
hb_s=() hb_kib=() pb_s=() pb_kib=() hr_s=() hr_kib=() pr_s=() pr_kib=()
hbx_backup() {
	measure "r$1-hbx-backup" "${hbx}" --config "${config}" --log-level warn backup --json
	archive=$(tail -n 1 "${bench_dir}/logs/r$1-hbx-backup.log" | sed -n 's/.*"path":"\([^"]*\)".*/\1/p')
	[[ -f "${archive}" ]] || die "round $1: hbx backup printed no archive"
	b_s=${m_s} b_kib=${m_kib}
}
pipe_backup() {
	# shellcheck disable=SC2016 # expanded by the inner bash
	measure "r$1-pipe-backup" bash -o pipefail -c 'tar -czf - -C "$1" . | gpg "${@:3}" --symmetric -o "$2"' _ \
		"${bench_dir}/box/data" "${bench_dir}/pipe/archive.tar.gz.gpg" "${gpg_opts[@]}"
	pb_one_s=${m_s} pb_one_kib=${m_kib}
}
hbx_restore() {
	measure "r$1-hbx-restore" "${hbx}" --config "${config}" --log-level warn restore "${archive}"
	r_s=${m_s} r_kib=${m_kib}
	# The replaced tree goes aside, not away (ext4 here reuses freed inodes slowly).
	mv "${bench_dir}"/box/data.pre-restore-* "${trash}/" 2>/dev/null || true
}
pipe_restore() {
	local out="${bench_dir}/pipe/r$1"
	mkdir "${out}"
	# shellcheck disable=SC2016 # expanded by the inner bash
	measure "r$1-pipe-restore" bash -o pipefail -c 'gpg "${@:3}" --decrypt "$1" | tar -xz -C "$2"' _ \
		"${bench_dir}/pipe/archive.tar.gz.gpg" "${out}" "${gpg_opts[@]}"
	pr_one_s=${m_s} pr_one_kib=${m_kib}
	mv "${out}" "${trash}/"
}

step "Rounds: 1 warm-up + ${rounds} counted, hbx and the pipeline interleaved"
for ((r = 0; r <= rounds; r++)); do
	if ((r % 2 == 1)); then
		pipe_backup "${r}"
		hbx_backup "${r}"
		pipe_restore "${r}"
		hbx_restore "${r}"
	else
		hbx_backup "${r}"
		pipe_backup "${r}"
		hbx_restore "${r}"
		pipe_restore "${r}"
	fi
	hbx_size=$(stat -c %s "${archive}")
	pipe_size=$(stat -c %s "${bench_dir}/pipe/archive.tar.gz.gpg")
	rm -f "${bench_dir}/pipe/archive.tar.gz.gpg"
	label="round ${r}"
	if ((r == 0)); then
		label="warm-up"
	else
		hb_s+=("${b_s}") hb_kib+=("${b_kib}") pb_s+=("${pb_one_s}") pb_kib+=("${pb_one_kib}")
		hr_s+=("${r_s}") hr_kib+=("${r_kib}") pr_s+=("${pr_one_s}") pr_kib+=("${pr_one_kib}")
	fi
	printf '%-8s backup: hbx %6.2f s, pipeline %6.2f s   restore: hbx %6.2f s, pipeline %6.2f s\n' \
		"${label}" "${b_s}" "${pb_one_s}" "${r_s}" "${pr_one_s}"
done

stats() {
	printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1}
		END {m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; print m, v[1], v[NR]}'
}
# ratio_median prints the median over rounds of A[i] / B[i].
ratio_median() {
	local -n a=$1 b=$2
	local i q=()
	for i in "${!a[@]}"; do
		q+=("$(awk -v x="${a[i]}" -v y="${b[i]}" 'BEGIN {print (y > 0) ? x / y : 0}')")
	done
	stats "${q[@]}" | cut -d' ' -f1
}
row() {
	local name=$1 ratio=$4 med lo hi kmed
	local -n secs=$2 kibs=$3
	read -r med lo hi <<<"$(stats "${secs[@]}")"
	read -r kmed _ _ <<<"$(stats "${kibs[@]}")"
	printf '| %-48s | %8.2f | %11s | %9.0f | %14.2f | %8.0f |\n' "${name}" "${med}" "$(printf '%.2f–%.2f' "${lo}" "${hi}")" \
		"$(awk -v b="${data_bytes}" -v s="${med}" 'BEGIN {print (s > 0) ? b / s / 1e6 : 0}')" "${ratio}" \
		"$(awk -v k="${kmed}" 'BEGIN {print k / 1024}')"
}

step "Results: ${rounds} rounds, ${data_files} files, $((data_bytes / 1024 / 1024)) MiB of data"
echo "| path                                             | median s |   min–max s |      MB/s | pipeline / hbx | RSS MiB |"
echo "|--------------------------------------------------|---------:|------------:|----------:|---------------:|--------:|"
row "tar -czf - | gpg --symmetric (backup)" pb_s pb_kib 1
row "hbx backup (hash, write, fsync, verify)" hb_s hb_kib "$(ratio_median pb_s hb_s)"
row "gpg --decrypt | tar -xz (restore)" pr_s pr_kib 1
row "hbx restore (verify, extract, syncfs, swap)" hr_s hr_kib "$(ratio_median pr_s hr_s)"
cat <<EOF

Archive sizes (last round): hbx ${hbx_size} bytes, pipeline ${pipe_size} bytes.

Notes:
  - "pipeline / hbx" is the median of the per-round ratios: above 1 means hbx
    is faster. MB/s is data bytes (10^6) per second of the median.
  - Target (issue 6): hbx at least as fast as the pipeline, both ways.
  - Times are GNU time's %e; RSS is %M (for the pipeline, its largest process).
    Each run starts after a sync, so none pays for the writeback of another.
  - hbx backup's time includes hashing every file, fsync of the archive and
    reading it back from disk (page cache dropped) to check it; hbx
    restore's includes checking every file, syncfs and the swap, and a warm
    runtime check. The pipeline verifies and syncs nothing.
  - Absolute times drift between runs on these machines: compare rows of the
    same run. Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg).
EOF
