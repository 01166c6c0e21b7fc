#!/usr/bin/env bash
# race.sh is the install race of issue 3 (`make bench` runs it after
# bench.sh): on the realistic image of internal/benchimage (the
# ../shared/BENCHMARKING.md shape: 4 gzip layers, ~20,600 files, a 90 MiB
# binary, whiteouts), served by the real registry on loopback, it times in
# one interleaved run (A B C A B C ...):
#   A  a cold `hbx install` (fetch, verify digests and diff_ids, extract,
#      validate, syncfs, activate);
#   B  `skopeo copy` to an OCI layout + `umoci unpack` (Debian packages);
#   C  sequential `tar -xzf` of the same layer blobs (the floor);
#   D  the same followed by `sync -f` of the tree: the floor for an
#      installer that, like hbx, returns only once the tree is durable;
# then warm `hbx install`, cold installs of a half-size image to show
# peak memory does not grow with the image, and, when /dev/shm has room,
# C and A again on tmpfs (the CPU side alone: no disk, cheap creates).
# Each round also runs internal/bench/cmd/cpufloor: the CPU seconds of the
# work no cold install avoids (each layer's inflate with the installer's
# inflater; sha256 of the blobs, of the diff_ids and of the files), and from
# them the wall-time bound on this machine: max(the largest layer's inflate,
# which one core must do alone; all of it / nproc). Those rows show how
# close the A rows can get to C at all.
# Medians and min–max; it never fails on a time. RACE_ROUNDS (default 3)
# sets the counted rounds.
#
# Noise rules (BENCHMARKING.md): compare only rows of this run; trees of a
# round are renamed aside and deleted at the end (ext4 inode reuse).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"
export GOFLAGS='-buildvcs=false -tags=containers_image_openpgp' CGO_ENABLED=0
while read -r v; do unset "${v}"; done < <(compgen -v HBX_ || true)

rounds="${RACE_ROUNDS:-3}"
dir="${repo_root}/.run/race"
hbx="${repo_root}/bin/hbx"
GNU_TIME=/usr/bin/time
pids=()
trash=""
mem="" # a tmpfs directory, when /dev/shm has room

bench_name=race
# shellcheck source=scripts/benchlib.sh
source "${repo_root}/scripts/benchlib.sh"
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	stop_pids
	[[ -n "${trash}" && -d "${trash}" ]] && rm -rf "${trash}"
	[[ -n "${mem}" && -d "${mem}" ]] && rm -rf "${mem}"
	exit "${rc}"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM


bench_prepare layerblobs cpufloor

# serve SCALE starts a registry serving the bench image of that scale and
# sets ref, registry, manifest, layout.
serve() {
	local scale=$1 out="${dir}/serve-$1.out" i
	"${dir}/bin/mkbenchimage" -out "${repo_root}/.cache/benchimage/scale-${scale}" -scale "${scale}" \
		-registry "${dir}/registry-${scale}" >"${out}" 2>"${dir}/logs/mkbenchimage-${scale}.log" &
	pids+=($!)
	for ((i = 0; i < 3000; i++)); do
		grep -qs '^ref=' "${out}" && break
		kill -0 "${pids[-1]}" 2>/dev/null || die "mkbenchimage failed: $(tail -n 2 "${dir}/logs/mkbenchimage-${scale}.log")"
		sleep 0.1
	done
	v() { sed -n "s|^$1=||p" "${out}"; }
	ref=$(v ref) registry=$(v registry) manifest=$(v manifest) layout=$(v layout)
	[[ -n "${ref}" ]] || die "mkbenchimage did not push"
	echo "scale ${scale}: $(v files) files, $(($(v uncompressed) / 1048576)) MiB unpacked, $(($(v compressed) / 1048576)) MiB compressed"
}

config() { # config FILE: an hbx.yaml for the current ref
	cat >"$1" <<EOF
executor:
  image: "${ref}"
  platform: linux/amd64
  platform_digests:
    linux/amd64: "${manifest}"
  runtime_dir: ${dir}/work/unused
  data_dir: ${dir}/box/data
  state_dir: ${dir}/box/state
registry:
  insecure_hosts: ["${registry}"]
EOF
}

step "Machine"
echo "nproc $(nproc); kernel $(uname -r); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "disk: $(df -T "${dir}" | awk 'NR == 2 {print $2 " on " $1}')"

step "Images (built once into .cache/benchimage, then reused)"
serve 1
cfg1="${dir}/hbx-1.yaml"
config "${cfg1}"
ref1=${ref} registry1=${registry}
floor="${dir}/floor.sh"
{
	echo 'set -euo pipefail'
	"${dir}/bin/layerblobs" "${layout}" linux/amd64 >"${dir}/blobs.txt"
	while IFS=$'\t' read -r _ blob; do printf 'tar -xzf %q -C "$1"\n' "${blob}"; done <"${dir}/blobs.txt"
	echo '[[ "${2:-}" == sync ]] && sync -f "$1"'
	echo 'true'
} >"${floor}"
serve 0.5
cfg05="${dir}/hbx-0.5.yaml"
config "${cfg05}"

ts_s=() ts_k=() hbx_s=() hbx_k=() warm_k=() sk_s=() sk_k=() tar_s=() tar_k=() warm_s=() half_k=() half_s=()
mt_s=() mt_k=() mh_s=() mh_k=()
fl_inflate=() fl_largest=() fl_sha=() fl_cpu=() fl_bound=() fl_k=()
# On tmpfs (no disk, cheap file creation) the same pair shows the CPU side
# alone: what inflate and hashing cost against tar's gzip.
if [[ -d /dev/shm && -w /dev/shm ]] && (($(df -k --output=avail /dev/shm | tail -n 1) > 2 * 1024 * 1024)); then
	mem="$(mktemp -d /dev/shm/hbx-race.XXXXXX)"
	chmod 0755 "${mem}" # the validation run (the payload user) searches it
fi
step "Rounds: 1 warm-up + ${rounds} counted; A = hbx, B = skopeo + umoci, C = tar floor"
for ((r = 0; r <= rounds; r++)); do
	w="${dir}/work/r${r}"
	mkdir -p "${w}/tar"
	measure "r${r}-hbx" "${hbx}" --config "${cfg1}" --executor-runtime-dir "${w}/runtime" install -q
	a_s=${m_s} a_k=${m_kib}
	measure "r${r}-warm" "${hbx}" --config "${cfg1}" --executor-runtime-dir "${w}/runtime" install -q
	ws=${m_s} wk=${m_kib}
	# skopeo takes name@digest (not name:tag@digest).
	nametag=${ref1%@*}
	measure "r${r}-skopeo" skopeo copy --quiet --src-tls-verify=false "docker://${nametag%:*}@${ref1#*@}" "oci:${w}/oci:bench"
	s1=${m_s} k1=${m_kib}
	measure "r${r}-umoci" umoci unpack --image "${w}/oci:bench" "${w}/bundle"
	b_s=$(awk -v a="${s1}" -v b="${m_s}" 'BEGIN {print a + b}') b_k=$((k1 > m_kib ? k1 : m_kib))
	measure "r${r}-tar" bash "${floor}" "${w}/tar"
	c_s=${m_s} c_k=${m_kib}
	mkdir -p "${w}/tarsync"
	measure "r${r}-tarsync" bash "${floor}" "${w}/tarsync" sync
	d_s=${m_s} d_k=${m_kib}
	"${dir}/bin/cpufloor" <"${dir}/blobs.txt" >"${dir}/logs/r${r}-floor.log" || die "cpufloor failed"
	read -r g_inflate g_largest g_sha g_cpu g_bound < <(awk -v p="$(nproc)" '
		$1 == "total" {i = $3; s = $5 + $7 + $9} $1 == "largest" {l = $2} $1 == "cpu" {c = $2}
		END {print i, l, s, c, (l > c / p ? l : c / p)}' "${dir}/logs/r${r}-floor.log")
	measure "r${r}-half" "${hbx}" --config "${cfg05}" --executor-runtime-dir "${w}/half" install -q
	h_s=${m_s} h_k=${m_kib}
	e_s=0 e_k=0 f_s=0 f_k=0
	if [[ -n "${mem}" ]]; then
		mkdir -p "${mem}/tar"
		measure "r${r}-tmpfs-tar" bash "${floor}" "${mem}/tar"
		e_s=${m_s} e_k=${m_kib}
		measure "r${r}-tmpfs-hbx" "${hbx}" --config "${cfg1}" --executor-runtime-dir "${mem}/runtime" install -q
		f_s=${m_s} f_k=${m_kib}
		rm -rf "${mem:?}/tar" "${mem:?}/runtime"
	fi
	printf '%-8s hbx %6.2f s  skopeo+umoci %6.2f s  tar %6.2f s  tar+sync %6.2f s  warm %4.2f s  half-size hbx %6.2f s  tmpfs: tar %5.2f s hbx %5.2f s  floor %4.2f s\n' \
		"$([[ ${r} == 0 ]] && echo warm-up || echo "round ${r}")" "${a_s}" "${b_s}" "${c_s}" "${d_s}" "${ws}" "${h_s}" "${e_s}" "${f_s}" "${g_bound}"
	if ((r > 0)); then
		ts_s+=("${d_s}") ts_k+=("${d_k}") hbx_s+=("${a_s}") hbx_k+=("${a_k}") sk_s+=("${b_s}") sk_k+=("${b_k}") tar_s+=("${c_s}") tar_k+=("${c_k}")
		warm_s+=("${ws}") warm_k+=("${wk}") half_s+=("${h_s}") half_k+=("${h_k}")
		mt_s+=("${e_s}") mt_k+=("${e_k}") mh_s+=("${f_s}") mh_k+=("${f_k}")
		fl_inflate+=("${g_inflate}") fl_largest+=("${g_largest}") fl_sha+=("${g_sha}") fl_cpu+=("${g_cpu}") fl_bound+=("${g_bound}") fl_k+=(0)
	fi
	mv "${w}" "${trash}/"
done
: "${registry1}"

row() { # row NAME SECS_ARRAY KIB_ARRAY
	local -n s=$2 k=$3
	local med lo hi km tm
	read -r med lo hi <<<"$(stats "${s[@]}")"
	read -r km _ _ <<<"$(stats "${k[@]}")"
	read -r tm _ _ <<<"$(stats "${tar_s[@]}")"
	printf '| %-44s | %8.2f | %11s | %6.2f | %8.1f |\n' "$1" "${med}" "$(printf '%.2f–%.2f' "${lo}" "${hi}")" \
		"$(awk -v a="${med}" -v b="${tm}" 'BEGIN {print a / b}')" "$(awk -v k="${km}" 'BEGIN {print k / 1024}')"
}
step "Results (${rounds} rounds; × tar = ratio of medians)"
echo "| path                                         | median s |   min–max s | × tar  | RSS MiB  |"
echo "|----------------------------------------------|---------:|------------:|-------:|---------:|"
row "tar -xzf of the layers (the floor)" tar_s tar_k
row "tar -xzf + sync -f (the durable floor)" ts_s ts_k
row "hbx install, cold (full image)" hbx_s hbx_k
row "skopeo copy + umoci unpack" sk_s sk_k
row "hbx install, warm" warm_s warm_k
row "hbx install, cold (half-size image)" half_s half_k
if [[ -n "${mem}" ]]; then
	row "on tmpfs: tar -xzf of the layers" mt_s mt_k
	row "on tmpfs: hbx install, cold" mh_s mh_k
fi
row "floor: inflate of every layer (CPU s)" fl_inflate fl_k
row "floor: inflate of the largest layer (CPU s)" fl_largest fl_k
row "floor: sha256 of blobs, diff_ids, files" fl_sha fl_k
row "floor: all of the above (CPU s)" fl_cpu fl_k
row "floor: wall bound, max(largest, CPU / $(nproc))" fl_bound fl_k
echo
[[ -n "${mem}" ]] && echo "Wall bound × the tmpfs tar median: $(awk -v a="$(stats "${fl_bound[@]}" | cut -d' ' -f1)" -v b="$(stats "${mt_s[@]}" | cut -d' ' -f1)" 'BEGIN {printf "%.2f", a / b}')"
echo "The floor rows are CPU seconds of cpufloor's thread (RSS not measured); × tar divides by the tar row's median."
echo "Peak RSS of hbx includes the validation run of the image's program (a small shell script here)."
echo "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
