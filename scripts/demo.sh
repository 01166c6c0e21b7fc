#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# demo.sh is a guided tour of hbx on the project's test image (`make demo`):
# it builds the image and serves it from the real registry on loopback,
# writes a config, installs the image cold and then warm, runs Executor with
# `hbx run executor`, checks its health and its MCP challenge, stops it with
# SIGTERM and shows the state it left in its data directory.
#
# Everything it creates lives under the git-ignored .run/demo/ (an earlier
# .run/demo is moved aside and deleted), and everything it starts listens on
# 127.0.0.1 only and is stopped on any exit: success, failure or Ctrl-C.
# It works from any directory and on a fresh machine: it runs
# scripts/testdeps.sh --demo itself (the registry and Bun only) and builds
# bin/hbx when it is missing.
# It exits non-zero when any step fails.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"
export GOFLAGS='-buildvcs=false -tags=containers_image_openpgp' CGO_ENABLED=0
# Only the demo's config file counts: drop the caller's HBX_* variables.
while read -r v; do unset "${v}"; done < <(compgen -v HBX_ || true)

run_dir=.run/demo
hbx="${repo_root}/bin/hbx"
run_pid=""      # hbx run executor
registry_pid="" # mktestimage serving the registry
old_demo=""     # an earlier .run/demo, moved aside
made_run_dir=false

step() { printf '\n==> %s\n' "$*"; }
# indent prefixes every line with four spaces and ends the last one.
# shellcheck disable=SC1003 # sed's "append" command, not a quote escape
indent() { sed -e 's/^/    /' -e '$a\'; }
die() {
	echo "demo: $*" >&2
	exit 1
}
# now_us prints the wall clock in microseconds.
now_us() { echo "${EPOCHREALTIME//[.,]/}"; }
# fmt_ms prints a duration given in microseconds as milliseconds.
fmt_ms() { printf '%d.%d ms' $(($1 / 1000)) $(($1 % 1000 / 100)); }
fmt_s() { printf '%d.%03d s' $(($1 / 1000000)) $(($1 % 1000000 / 1000)); }

# stop_pid sends SIGTERM to pid, waits up to $2 seconds, then SIGKILL; it
# returns the process's exit status.
stop_pid() {
	local pid=$1 wait_s=$2 i status=0
	kill -TERM "${pid}" 2>/dev/null || true
	for ((i = 0; i < wait_s * 10; i++)); do
		kill -0 "${pid}" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "${pid}" 2>/dev/null; then
		echo "demo: pid ${pid} ignored SIGTERM for ${wait_s}s; sending SIGKILL" >&2
		kill -KILL "${pid}" 2>/dev/null || true
	fi
	wait "${pid}" 2>/dev/null || status=$?
	return "${status}"
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [[ -n "${run_pid}" ]]; then
		stop_pid "${run_pid}" 20 || true
	fi
	if [[ -n "${registry_pid}" ]]; then
		stop_pid "${registry_pid}" 20 || true
	fi
	if [[ -n "${old_demo}" ]]; then
		rm -rf "${old_demo}"
	fi
	if ((rc != 0)); then
		# Name the run's files only when this run made them (a failure
		# before, in the prerequisites, has none).
		local where=""
		if "${made_run_dir}" && [[ -d "${run_dir}" ]]; then
			where="; its files are in ${run_dir}/"
		fi
		{
			echo
			if ((rc == 130 || rc == 143)); then
				echo "==> demo interrupted; background processes stopped${where}"
			else
				echo "==> demo FAILED (exit ${rc})${where}"
			fi
			# An earlier run's logs are not this run's: only what it made.
			if "${made_run_dir}" && [[ -s "${run_dir}/executor.log" ]]; then
				echo "    last lines of ${run_dir}/executor.log:"
				tail -n 15 "${run_dir}/executor.log" | indent
			fi
			if "${made_run_dir}" && [[ -s "${run_dir}/mktestimage.log" ]]; then
				echo "    last lines of ${run_dir}/mktestimage.log:"
				tail -n 5 "${run_dir}/mktestimage.log" | indent
			fi
		} >&2
	fi
	exit "${rc}"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# port_in_use reports whether something accepts connections on 127.0.0.1:$1.
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

step "Prerequisites: the real registry, the real Bun tarballs, bin/hbx"
command -v go >/dev/null || die "go is missing (the test image is built with it)"
if ! command -v curl >/dev/null; then
	[[ "$(id -u)" -eq 0 ]] || die "curl is missing; as root run: apt-get install -y curl"
	echo "installing curl with apt-get"
	# shellcheck source=scripts/aptget.sh
	source scripts/aptget.sh
	apt_get install -y -qq curl >/dev/null || { apt_get update -qq && apt_get install -y -qq curl >/dev/null; }
fi
scripts/testdeps.sh --demo | indent
if [[ ! -x "${hbx}" ]]; then
	echo "    bin/hbx is missing: make build"
	make --no-print-directory build | indent
fi
echo "    \$ bin/hbx version"
"${hbx}" version | indent

if [[ -e "${run_dir}" ]]; then
	old_demo="$(mktemp -d "${run_dir}.old.XXXXXX")"
	mv "${run_dir}" "${old_demo}/"
fi
mkdir -p "${run_dir}/bin"
made_run_dir=true

step "Build the test image and serve it from a registry on loopback"
echo "    The test image is a small stand-in for the pinned Executor image: an OCI"
echo "    index for linux/amd64 and linux/arm64 with the real Bun 1.3.14 inside."
go build -o "${run_dir}/bin/mktestimage" ./internal/testimage/cmd/mktestimage
: >"${run_dir}/mktestimage.out"
"${run_dir}/bin/mktestimage" -out "${run_dir}/image" -registry "${run_dir}/registry" \
	>"${run_dir}/mktestimage.out" 2>"${run_dir}/mktestimage.log" &
registry_pid=$!
for ((i = 0; i < 1800; i++)); do
	grep -qs '^ref=' "${run_dir}/mktestimage.out" && break
	kill -0 "${registry_pid}" 2>/dev/null || die "mktestimage exited before pushing"
	sleep 0.1
done
grep -q '^ref=' "${run_dir}/mktestimage.out" || die "mktestimage did not push within 180s"
indent <"${run_dir}/mktestimage.out"
value() { sed -n "s|^$1=||p" "${run_dir}/mktestimage.out"; }
ref="$(value ref)"
registry="$(value registry)"
case "$(uname -m)" in
x86_64 | amd64) arch=amd64 ;;
aarch64 | arm64) arch=arm64 ;;
*) die "no test image for machine $(uname -m)" ;;
esac
platform="linux/${arch}"
manifest="$(value "${platform}")"
[[ -n "${ref}" && -n "${registry}" && -n "${manifest}" ]] || die "mktestimage printed no ref, registry or ${platform} line"

step "Pick Executor's port"
port=4788
if port_in_use "${port}"; then
	for ((i = 0; i < 100; i++)); do
		port=$((20000 + RANDOM % 40000))
		port_in_use "${port}" || break
	done
	port_in_use "${port}" && die "found no free loopback port"
	echo "    4788 is taken on 127.0.0.1; using ${port}"
else
	echo "    127.0.0.1:${port} is free"
fi

step "Write the configuration: ${run_dir}/hbx.yaml"
box="${repo_root}/${run_dir}/box"
runtime_dir="${box}/storage/executor-runtime"
data_dir="${box}/workspace/executor/data"
state_dir="${box}/var/lib/hbx/executor"
config="${repo_root}/${run_dir}/hbx.yaml"
# The keys below registry: are for trying hbx supervise, backup, upgrade
# and rollback by hand afterwards (README, "Upgrade and rollback").
socket="${repo_root}/${run_dir}/hbx.sock"
if ((${#socket} > 107)); then # a unix socket path has at most 107 bytes
	socket="/tmp/hbx-demo-$(id -u).sock"
fi
passphrase="${repo_root}/${run_dir}/backup.pass"
(umask 077 && head -c 24 /dev/urandom | base64 >"${passphrase}")
cat >"${config}" <<EOF
# hbx demo configuration (see configs/hbx.yaml for every key).
executor:
  # The image is pinned by its tag and its index digest...
  image: "${ref}"
  platform: ${platform}
  # ...and this platform's manifest by its own digest.
  platform_digests:
    ${platform}: "${manifest}"
  runtime_dir: ${runtime_dir}
  data_dir: ${data_dir}
  state_dir: ${state_dir}
  port: ${port}
  host_port: ${port}
registry:
  # The demo registry speaks plain HTTP on loopback.
  insecure_hosts: ["${registry}"]
# For hbx supervise, backup and upgrade by hand; the demo itself uses none.
supervisor:
  socket: ${socket}
  log_dir: ${repo_root}/${run_dir}/logs
programs:
  hermes:
    enabled: false # the test image has no Hermes gateway
backup:
  dir: ${repo_root}/${run_dir}/backups
  passphrase_file: ${passphrase}
EOF
indent <"${config}"

step "Install the image (cold: fetch, verify, unpack, validate, activate)"
echo "    \$ bin/hbx --config ${run_dir}/hbx.yaml install"
t0=$(now_us)
"${hbx}" --config "${config}" install 2>&1 | indent
cold_us=$(($(now_us) - t0))
echo "    took $(fmt_s "${cold_us}")"
current="$(readlink "${runtime_dir}/current")" || die "no active release after install"
echo "    active release: current -> ${current} ($(du -sh "${runtime_dir}/current/rootfs" | cut -f1) unpacked)"
installed_at="$(grep '"installed_at"' "${runtime_dir}/current/release.json")"

step "Install again (warm: the release is active, so nothing to do)"
echo "    \$ bin/hbx --config ${run_dir}/hbx.yaml install"
t0=$(now_us)
warm_out="$("${hbx}" --config "${config}" install 2>&1)"
warm_us=$(($(now_us) - t0))
indent <<<"${warm_out}"
echo "    took $(fmt_ms "${warm_us}")"
grep -q '^up to date' <<<"${warm_out}" || die "the warm install did not report \"up to date\""
[[ "$(readlink "${runtime_dir}/current")" == "${current}" ]] || die "the warm install switched the active release"
[[ "$(grep '"installed_at"' "${runtime_dir}/current/release.json")" == "${installed_at}" ]] ||
	die "the warm install rewrote release.json"
echo "    current still -> ${current}, release.json untouched: a no-op"

step "Run Executor natively: bin/hbx run executor (log: ${run_dir}/executor.log)"
"${hbx}" --config "${config}" run executor >"${run_dir}/executor.log" 2>&1 &
run_pid=$!
echo "    hbx run executor is pid ${run_pid}; waiting up to 30 s for /api/health"
base="http://127.0.0.1:${port}"
t0=$(now_us)
healthy=""
for ((i = 0; i < 300; i++)); do
	if health="$(curl -sS --max-time 2 -w '\n%{http_code}' "${base}/api/health" 2>/dev/null)" &&
		[[ "${health##*$'\n'}" == 200 ]]; then
		healthy=1
		break
	fi
	kill -0 "${run_pid}" 2>/dev/null || die "hbx run executor exited before Executor was healthy"
	sleep 0.1
done
[[ -n "${healthy}" ]] || die "/api/health did not answer 200 within 30 s"
echo "    healthy after $(fmt_s $(($(now_us) - t0)))"

step "Health: GET ${base}/api/health"
echo "    HTTP 200 ${health%$'\n'*}"
root_status="$(curl -sS --max-time 5 -o /dev/null -w '%{http_code} %{content_type}' "${base}/")"
echo "    (and GET / answers ${root_status}: the web UI)"

step "MCP without a key: POST ${base}/mcp"
mcp_status="$(curl -sS --max-time 5 -o /dev/null -D "${run_dir}/mcp.headers" -w '%{http_code}' \
	-X POST -H 'Content-Type: application/json' \
	--data '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}' "${base}/mcp")"
challenge="$(tr -d '\r' <"${run_dir}/mcp.headers" | sed -n 's/^[Ww][Ww][Ww]-[Aa]uthenticate: //p')"
echo "    HTTP ${mcp_status}"
echo "    WWW-Authenticate: ${challenge}"
[[ "${mcp_status}" == 401 ]] || die "POST /mcp without a key answered ${mcp_status}, want 401"
[[ "${challenge}" == Bearer* ]] || die "POST /mcp without a key carries no Bearer challenge"
echo "    401 with a Bearer challenge: MCP clients must present an API key"

step "Stop Executor: SIGTERM to hbx run (pid ${run_pid})"
run_status=0
stop_pid "${run_pid}" 20 || run_status=$?
run_pid=""
echo "    hbx run executor exited with status ${run_status}"
echo "    last lines of ${run_dir}/executor.log:"
tail -n 5 "${run_dir}/executor.log" | indent
((run_status == 0)) || die "hbx run executor exited with ${run_status} after SIGTERM, want 0"

step "Executor's state in its data directory (persistent, mode 0700)"
stat -c '    %A %n' "${data_dir}"
# shellcheck disable=SC2012 # shown to the reader, not parsed
ls -la "${data_dir}" | tail -n +2 | indent
[[ -s "${data_dir}/state.json" ]] || die "no state.json in ${data_dir}"
echo "    ${data_dir##"${repo_root}"/}/state.json:"
indent <"${data_dir}/state.json"

step "Stop the registry"
stop_pid "${registry_pid}" 20 || die "mktestimage exited with $? when stopped"
registry_pid=""
tail -n 1 "${run_dir}/mktestimage.log" | indent

step "Summary"
cat <<EOF | indent
image        ${ref}
platform     ${platform}, manifest ${manifest}
cold install $(fmt_s "${cold_us}")
warm install $(fmt_ms "${warm_us}") (no-op)
Executor     healthy on 127.0.0.1:${port}; /mcp without a key -> 401 Bearer
hbx run      exited ${run_status} on SIGTERM
state        ${run_dir}/ (config, logs, runtime, data); delete it when done
next         make demo-upgrade (or scripts/demo-upgrade.sh after this demo): hbx upgrade to a second version and hbx rollback on this box
             (docs/upgrade.md#trying-it-on-the-test-image)
EOF
echo
echo "demo: OK"
