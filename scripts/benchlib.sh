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
	# shellcheck source=scripts/aptget.sh
	source "$(dirname "${BASH_SOURCE[0]}")/aptget.sh"
	apt_get install -y -qq "${missing[@]}" >/dev/null 2>&1 ||
		{ apt_get update -qq && apt_get install -y -qq "${missing[@]}" >/dev/null; }
}

# settle: writes back every dirty page of the machine (sync), untimed, so
# the next timed run does not pay for the write-back of the runs before it:
# hbx syncs its filesystem before it activates, tar and umoci leave their
# trees dirty, and whoever syncs next (or the kernel's flusher, during the
# next run) writes them. measure calls it first.
settle() { sync; }

# measure LABEL CMD...: settles, then runs CMD under GNU time, its output
# in ${dir}/logs/LABEL.log; sets m_s and m_kib (%e, %M). A failing CMD
# prints the log's last lines and dies.
measure() {
	local label=$1
	shift
	settle
	if ! "${GNU_TIME}" -f '%e %M' -o "${dir}/logs/${label}.time" "$@" >"${dir}/logs/${label}.log" 2>&1; then
		tail -n 5 "${dir}/logs/${label}.log" >&2
		die "${label}: $* failed"
	fi
	read -r m_s m_kib <"${dir}/logs/${label}.time"
}

# stats VALUE...: prints the median, the minimum and the maximum.
stats() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {m=(NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2; print m, v[1], v[NR]}'; }

# stop_pids: SIGTERM to every pid in the caller's pids array, then waits
# for each (the cleanup traps' first step).
stop_pids() {
	local p
	for p in "${pids[@]}"; do kill -TERM "${p}" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "${p}" 2>/dev/null || true; done
}

# bench_prepare TOOL...: the prerequisites (skopeo, umoci, GNU time, the
# test dependencies, bin/hbx); sets trash to a fresh
# .run/${bench_name}-trash.XXXXXX holding the previous run's ${dir}, makes
# ${dir}/bin, logs and work, and builds mkbenchimage and each
# ./internal/bench/cmd/TOOL into ${dir}/bin.
bench_prepare() {
	local tool
	step "Prerequisites"
	apt_need skopeo:skopeo umoci:umoci
	"${GNU_TIME}" -f '%e' -o /dev/null true 2>/dev/null || apt_need time:time
	scripts/testdeps.sh >/dev/null
	[[ -x "${hbx}" ]] || make --no-print-directory build
	mkdir -p "${repo_root}/.run"
	trash="$(mktemp -d "${repo_root}/.run/${bench_name}-trash.XXXXXX")"
	[[ -e "${dir}" ]] && mv "${dir}" "${trash}/previous"
	mkdir -p "${dir}/bin" "${dir}/logs" "${dir}/work"
	go build -o "${dir}/bin/mkbenchimage" ./internal/benchimage/cmd/mkbenchimage
	for tool in "$@"; do
		go build -o "${dir}/bin/${tool}" "./internal/bench/cmd/${tool}"
	done
}
