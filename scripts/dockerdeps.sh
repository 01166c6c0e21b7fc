#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# dockerdeps.sh sets up the Docker Engine the Docker-host suite (make
# e2e-docker) runs on, and does nothing that is already done (installing
# packages, starting dockerd and mmdebstrap need root; the rest does not):
#   - Debian's docker.io (dockerd 20.10, API 1.41) and mmdebstrap, installed
#     with apt-get when run as root;
#   - Compose v2 (v2.29.7) built from the Go module proxy into the
#     git-ignored .cache/compose/ (about two minutes the first time) and
#     installed as the docker-compose CLI plugin of a DOCKER_CONFIG inside
#     .run/docker/config (never ~/.docker);
#   - a dockerd of its own: --data-root .run/docker/data, and an exec-root,
#     pidfile and unix socket under /run/hbxd-<8 hex of the repository
#     path> (short: a unix socket path has at most 107 bytes), started in
#     the background with its log in .run/docker/dockerd.log; it returns
#     once the daemon answers;
#   - the base image hbx-base:bookworm: `mmdebstrap bookworm` (minbase plus
#     ca-certificates, without documentation, as bookworm-slim) into the tarball .cache/docker/bookworm.tar (built
#     once, about 20 s), then `docker import`. No registry is reachable here,
#     so the executor and agent test images build FROM it.
# The last lines it prints are the environment the suite reads:
#   DOCKER_HOST=unix:///run/hbxd-XXXXXXXX/d.sock
#   DOCKER_CONFIG=/abs/.run/docker/config
#   HBXTEST_DOCKER_BASE=hbx-base:bookworm
# (`dockerdeps.sh env` prints only those, and `dockerdeps.sh stop` stops the
# daemon and everything it runs, leaving the data root for the next start.)
# The docker CLI on PATH talks to the daemon; a newer CLI (28.x) negotiates
# the API down to the daemon's 1.41. Classic builds (DOCKER_BUILDKIT=0):
# there is no buildx plugin here and none is needed.
set -euo pipefail

COMPOSE_VERSION=v2.29.7
BASE_TAG=hbx-base:bookworm

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/aptget.sh
source "${repo_root}/scripts/aptget.sh"
run_dir="${repo_root}/.run/docker"
short="/run/hbxd-$(printf '%s' "${repo_root}" | sha256sum | cut -c1-8)"
sock="${short}/d.sock"
export DOCKER_HOST="unix://${sock}"
export DOCKER_CONFIG="${run_dir}/config"
export DOCKER_BUILDKIT=0

print_env() {
	echo "DOCKER_HOST=${DOCKER_HOST}"
	echo "DOCKER_CONFIG=${DOCKER_CONFIG}"
	echo "HBXTEST_DOCKER_BASE=${BASE_TAG}"
}

daemon_up() { docker version --format '{{.Server.APIVersion}}' >/dev/null 2>&1; }

stop_daemon() {
	local pidfile="${short}/dockerd.pid" pid
	if [[ ! -s "${pidfile}" ]]; then
		echo "dockerdeps: no dockerd of this repository running"
		return 0
	fi
	pid="$(cat "${pidfile}")"
	if daemon_up; then
		# Containers first, so their programs get their stop signal and
		# grace period, not the daemon's shutdown timeout.
		local ids
		ids="$(docker ps -q)"
		if [[ -n "${ids}" ]]; then
			docker stop -t 30 ${ids} >/dev/null || true
		fi
	fi
	if kill -0 "${pid}" 2>/dev/null; then
		kill -TERM "${pid}"
		for _ in $(seq 1 300); do
			kill -0 "${pid}" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "${pid}" 2>/dev/null; then
			echo "dockerdeps: dockerd ${pid} did not stop in 30s; sending SIGKILL" >&2
			kill -KILL "${pid}" || true
		fi
	fi
	rm -f "${pidfile}"
	echo "dockerdeps: stopped dockerd ${pid}"
}

case "${1:-}" in
env)
	print_env
	exit 0
	;;
stop)
	stop_daemon
	exit 0
	;;
"") ;;
*)
	echo "usage: dockerdeps.sh [env|stop]" >&2
	exit 2
	;;
esac

need_root() {
	if [[ "$(id -u)" -ne 0 ]]; then
		echo "dockerdeps: $1 needs root; run scripts/dockerdeps.sh as root" >&2
		exit 1
	fi
}

# Packages.
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
if ((${#need[@]})); then
	need_root "installing ${need[*]}"
	echo "dockerdeps: installing ${need[*]} with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	apt_get update -qq
	apt_get install -y -qq "${need[@]}" >/dev/null
	echo "dockerdeps: installed ${need[*]}"
else
	echo "dockerdeps: dockerd and mmdebstrap present"
fi

# Compose v2 as the CLI plugin of our own DOCKER_CONFIG.
compose_bin="${repo_root}/.cache/compose/${COMPOSE_VERSION}/docker-compose"
if [[ ! -x "${compose_bin}" ]]; then
	echo "dockerdeps: building Compose ${COMPOSE_VERSION} (go install, about two minutes)"
	mkdir -p "$(dirname "${compose_bin}")"
	tmp="$(mktemp -d "$(dirname "${compose_bin}")/.build.XXXXXX")"
	trap 'rm -rf "${tmp}"' EXIT
	GOBIN="${tmp}" GOFLAGS=-buildvcs=false CGO_ENABLED=0 \
		go install "github.com/docker/compose/v2/cmd@${COMPOSE_VERSION}"
	mv "${tmp}/cmd" "${compose_bin}"
	rm -rf "${tmp}"
	trap - EXIT
	echo "dockerdeps: built ${compose_bin#"${repo_root}/"}"
else
	echo "dockerdeps: ${compose_bin#"${repo_root}/"} present"
fi
mkdir -p "${DOCKER_CONFIG}/cli-plugins"
if [[ "$(readlink "${DOCKER_CONFIG}/cli-plugins/docker-compose" || true)" != "${compose_bin}" ]]; then
	ln -sf "${compose_bin}" "${DOCKER_CONFIG}/cli-plugins/docker-compose"
fi

# The daemon.
if daemon_up; then
	echo "dockerdeps: dockerd answering on ${sock}"
else
	need_root "starting dockerd"
	mkdir -p "${run_dir}/data" "${short}"
	chmod 0700 "${short}"
	# --bridge=none: no docker0, so it cannot clash with another daemon's;
	# Compose networks bring their own bridges.
	setsid dockerd \
		--data-root "${run_dir}/data" \
		--exec-root "${short}/x" \
		--pidfile "${short}/dockerd.pid" \
		-H "${DOCKER_HOST}" \
		--bridge=none \
		--log-level=warn \
		</dev/null >>"${run_dir}/dockerd.log" 2>&1 &
	for _ in $(seq 1 600); do
		daemon_up && break
		if ! kill -0 $! 2>/dev/null; then
			echo "dockerdeps: dockerd exited; its log:" >&2
			tail -n 20 "${run_dir}/dockerd.log" >&2
			exit 1
		fi
		sleep 0.1
	done
	if ! daemon_up; then
		echo "dockerdeps: dockerd did not answer on ${sock} within 60s; its log: ${run_dir}/dockerd.log" >&2
		exit 1
	fi
	echo "dockerdeps: started dockerd $(cat "${short}/dockerd.pid") on ${sock} (API $(docker version --format '{{.Server.APIVersion}}'))"
fi
if ! docker compose version >/dev/null 2>&1; then
	echo "dockerdeps: docker compose does not run: $(docker compose version 2>&1 | tail -n1)" >&2
	exit 1
fi

# The base image.
if docker image inspect "${BASE_TAG}" >/dev/null 2>&1; then
	echo "dockerdeps: image ${BASE_TAG} present"
else
	tarball="${repo_root}/.cache/docker/bookworm.tar"
	if [[ ! -s "${tarball}" ]]; then
		need_root "mmdebstrap"
		echo "dockerdeps: building ${tarball#"${repo_root}/"} with mmdebstrap"
		mkdir -p "$(dirname "${tarball}")"
		# mmdebstrap picks its output format from the name's extension.
		# Without documentation, manuals and locales, as
		# debian:bookworm-slim is made.
		mmdebstrap --quiet --variant=minbase --include=ca-certificates \
			--dpkgopt='path-exclude=/usr/share/man/*' \
			--dpkgopt='path-exclude=/usr/share/doc/*' \
			--dpkgopt='path-include=/usr/share/doc/*/copyright' \
			--dpkgopt='path-exclude=/usr/share/locale/*' \
			--dpkgopt='path-exclude=/usr/share/info/*' \
			bookworm "${tarball%.tar}.tmp.tar" >/dev/null
		mv "${tarball%.tar}.tmp.tar" "${tarball}"
	fi
	docker import "${tarball}" "${BASE_TAG}" >/dev/null
	echo "dockerdeps: imported ${BASE_TAG} from ${tarball#"${repo_root}/"}"
fi
print_env
