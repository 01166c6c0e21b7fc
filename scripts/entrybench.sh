#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# entrybench.sh prints peak memory beside entry count (`make bench`): for
# each count in ENTRY_COUNTS (default "100000 1000000") it builds the
# entry-count image (mkbenchimage -files N: the base layer and one layer of
# N files of 16 to 80 bytes, 1,000 to a directory), then runs, under GNU
# time, a cold `hbx install --from LAYOUT` into a fresh runtime directory
# and an `hbx install --verify --from LAYOUT` of the release it made
# (re-hashing every file against files.json). One round each: the figure
# is peak RSS (%M), which does not depend on load; times are shown for
# scale only. Images are kept in .run/entrybench/ for the next run; the
# runtime directories are removed at the end. Nothing listens.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"
export GOFLAGS='-buildvcs=false -tags=containers_image_openpgp' CGO_ENABLED=0
while read -r v; do unset "${v}"; done < <(compgen -v HBX_ || true)

counts="${ENTRY_COUNTS:-100000 1000000}"
dir="${repo_root}/.run/entrybench"
hbx="${repo_root}/bin/hbx"
GNU_TIME=/usr/bin/time

die() {
	echo "entrybench: $*" >&2
	exit 1
}
for n in ${counts}; do
	[[ "${n}" =~ ^[1-9][0-9]*$ ]] || die "ENTRY_COUNTS: ${n}: want positive integers"
done
"${GNU_TIME}" -f '%e %M' -o /dev/null true 2>/dev/null || die "GNU time is missing: apt-get install time"
[[ -x "${hbx}" ]] || make --no-print-directory build
case "$(uname -m)" in
x86_64 | amd64) ;;
*) die "the entry-count image is linux/amd64 only; this is $(uname -m)" ;;
esac

mkdir -p "${dir}/bin" "${dir}/logs"
go build -o "${dir}/bin/mkbenchimage" ./internal/benchimage/cmd/mkbenchimage
work="$(mktemp -d "${dir}/work.XXXXXX")"
trap 'rm -rf "${work}"' EXIT

# measure LABEL CMD... runs CMD under GNU time; sets m_s and m_kib.
measure() {
	local label=$1
	shift
	if ! "${GNU_TIME}" -f '%e %M' -o "${dir}/logs/${label}.time" "$@" >"${dir}/logs/${label}.log" 2>&1; then
		tail -n 5 "${dir}/logs/${label}.log" >&2
		die "${label}: $* failed"
	fi
	read -r m_s m_kib <"${dir}/logs/${label}.time"
}

rows=()
for n in ${counts}; do
	img="${dir}/img-${n}"
	"${dir}/bin/mkbenchimage" -out "${img}" -files "${n}" >"${dir}/img-${n}.out" 2>"${dir}/logs/mkbenchimage-${n}.log" ||
		die "mkbenchimage -files ${n}: $(tail -n 1 "${dir}/logs/mkbenchimage-${n}.log")"
	value() { sed -n "s|^$1=||p" "${dir}/img-${n}.out"; }
	entries=$(value files)
	cat >"${work}/hbx-${n}.yaml" <<EOF
executor:
  image: "bench.invalid/entries:v1@$(value index)"
  platform: linux/amd64
  platform_digests:
    linux/amd64: "$(value manifest)"
  runtime_dir: ${work}/unused
  data_dir: ${work}/box/data
  state_dir: ${work}/box/state
EOF
	rt="${work}/rt-${n}"
	measure "install-${n}" "${hbx}" --config "${work}/hbx-${n}.yaml" --executor-runtime-dir "${rt}" install --from "${img}" -q
	grep -q '^installed ' "${dir}/logs/install-${n}.log" || die "install of ${n} files installed nothing"
	i_s=${m_s} i_kib=${m_kib}
	measure "verify-${n}" "${hbx}" --config "${work}/hbx-${n}.yaml" --executor-runtime-dir "${rt}" install --verify --from "${img}" -q
	grep -q '^up to date, every file verified' "${dir}/logs/verify-${n}.log" || die "verify of ${n} files did not verify"
	v_s=${m_s} v_kib=${m_kib}
	paths=$(wc -l <"${rt}/current/files.json")
	rows+=("$(printf '| %9d | %9d | %9.1f | %15.1f | %8.1f | %14.1f |' "${entries}" "$((paths - 2))" \
		"${i_s}" "$(awk -v k="${i_kib}" 'BEGIN {print k / 1024}')" "${v_s}" "$(awk -v k="${v_kib}" 'BEGIN {print k / 1024}')")")
	rm -rf "${rt}"
done

printf '\n==> Peak memory by entry count (%s, %s)\n' "$(uname -srm)" "$("${hbx}" version | sed -n 's/^version: *//p')"
echo "|  tar files |     paths | install s | install RSS MiB | verify s | verify RSS MiB |"
echo "|-----------:|----------:|----------:|----------------:|---------:|---------------:|"
printf '%s\n' "${rows[@]}"
cat <<EOF

Notes:
  - Peak RSS is GNU time's %M for the hbx process (the install includes
    the entry program's validation, a #!/bin/sh script here).
  - "paths" counts files.json's entries (every file, directory and symlink).
  - One round each: times move 1.3-2.5x with the machine's load; peak RSS
    does not.
EOF
