# shellcheck shell=bash
# The helpers race.sh and upgradebench.sh share. Source it after setting
# bench_name (the prefix of error lines).

step() { printf '\n==> %s\n' "$*"; }

die() {
	echo "${bench_name}: $*" >&2
	exit 1
}

# apt_need CMD:PACKAGE...: installs, as root, the packages whose command is
# missing (else says how and exits).
apt_need() {
	local missing=() cmd_pkg
	for cmd_pkg in "$@"; do
		command -v "${cmd_pkg%%:*}" >/dev/null || missing+=("${cmd_pkg#*:}")
	done
	((${#missing[@]} == 0)) && return
	[[ "$(id -u)" -eq 0 ]] || die "missing ${missing[*]}; as root: apt-get install -y ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 ||
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; }
}

# stats VALUE...: prints the median, the minimum and the maximum.
stats() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {m=(NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2; print m, v[1], v[NR]}'; }
