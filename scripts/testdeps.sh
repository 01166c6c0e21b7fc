#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# testdeps.sh installs what the end-to-end tests run on, and does nothing when
# it is already there:
#   - the CNCF distribution registry (Debian package docker-registry) at
#     /usr/bin/docker-registry, installed with apt-get when run as root;
#   - Chromium (Debian package chromium) at /usr/bin/chromium, for the
#     headless browser check of the setup page, installed with apt-get when
#     run as root;
#   - skopeo (Debian package skopeo) at /usr/bin/skopeo, for the offline
#     install tests, installed with apt-get when run as root;
#   - setcap (Debian package libcap2-bin) at /usr/sbin/setcap, for the
#     restore tests that give a file a real capability, installed with
#     apt-get when run as root;
#   - the real Bun 1.3.14 runtime tarballs for linux/amd64 and linux/arm64,
#     fetched with `npm pack` into the git-ignored cache .cache/npm/;
#   - on a host that is not arm64, what the arm64 suite (make e2e-arm64)
#     runs on: qemu-user-static and binfmt-support registering
#     qemu-aarch64 with the kernel's binfmt_misc (mounted when it is not),
#     and libc6:arm64 for the dynamic loader the arm64 Bun needs
#     (/lib/ld-linux-aarch64.so.1), installed with apt-get when run as
#     root; then it runs the arm64 Bun's `bun --version` and fails when
#     that does not print the version.
# It prints one line per thing it does or finds, and works from any directory.
#
# With --demo (what `make demo` runs) it installs only what the demo runs
# on: the registry and the Bun tarballs; no Chromium, skopeo or qemu-user.
set -euo pipefail

demo_only=false
case "${1:-}" in
--demo) demo_only=true ;;
"") ;;
*)
	echo "usage: scripts/testdeps.sh [--demo]" >&2
	exit 2
	;;
esac

BUN_VERSION=1.3.14
BUN_PACKAGES=(
	"@oven/bun-linux-x64@${BUN_VERSION}"
	"@oven/bun-linux-aarch64@${BUN_VERSION}"
)
REGISTRY_BIN=/usr/bin/docker-registry

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/aptget.sh
source "${repo_root}/scripts/aptget.sh"
cache="${repo_root}/.cache/npm"

# The registry.
if [[ -x "${REGISTRY_BIN}" ]]; then
	echo "testdeps: ${REGISTRY_BIN} present"
elif [[ "$(id -u)" -eq 0 ]]; then
	echo "testdeps: installing docker-registry with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	apt_get update -qq
	apt_get install -y -qq docker-registry >/dev/null
	# The package enables a system service on some hosts; the tests start
	# their own instance on a free loopback port, so it is not needed.
	echo "testdeps: installed ${REGISTRY_BIN}"
else
	echo "testdeps: ${REGISTRY_BIN} is missing; as root run: apt-get update && apt-get install -y docker-registry" >&2
	exit 1
fi

# The headless browser.
CHROMIUM_BIN=/usr/bin/chromium
if [[ "${demo_only}" == true ]]; then
	: # the demo opens no browser
elif [[ -x "${CHROMIUM_BIN}" ]]; then
	echo "testdeps: ${CHROMIUM_BIN} present"
elif [[ "$(id -u)" -eq 0 ]]; then
	echo "testdeps: installing chromium with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	apt_get update -qq
	apt_get install -y -qq chromium >/dev/null
	echo "testdeps: installed ${CHROMIUM_BIN}"
else
	echo "testdeps: ${CHROMIUM_BIN} is missing; as root run: apt-get update && apt-get install -y chromium" >&2
	exit 1
fi

# skopeo, which copies an image into an OCI archive or layout for the
# offline install tests (hbx install --from).
SKOPEO_BIN=/usr/bin/skopeo
if [[ "${demo_only}" == true ]]; then
	: # the demo installs from the registry
elif [[ -x "${SKOPEO_BIN}" ]]; then
	echo "testdeps: ${SKOPEO_BIN} present"
elif [[ "$(id -u)" -eq 0 ]]; then
	echo "testdeps: installing skopeo with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	apt_get update -qq
	apt_get install -y -qq skopeo >/dev/null
	echo "testdeps: installed ${SKOPEO_BIN}"
else
	echo "testdeps: ${SKOPEO_BIN} is missing; as root run: apt-get update && apt-get install -y skopeo" >&2
	exit 1
fi

# setcap, which gives a file a real capability for the restore tests
# (a restored archive never keeps one).
SETCAP_BIN=/usr/sbin/setcap
if [[ "${demo_only}" == true ]]; then
	: # the demo restores nothing
elif [[ -x "${SETCAP_BIN}" ]]; then
	echo "testdeps: ${SETCAP_BIN} present"
elif [[ "$(id -u)" -eq 0 ]]; then
	echo "testdeps: installing libcap2-bin with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	apt_get update -qq
	apt_get install -y -qq libcap2-bin >/dev/null
	echo "testdeps: installed ${SETCAP_BIN}"
else
	echo "testdeps: ${SETCAP_BIN} is missing; as root run: apt-get update && apt-get install -y libcap2-bin" >&2
	exit 1
fi

# Debian's python3, which runs the Hermes gateway stand-in
# (e2e/testdata/hermes-gateway-standin.py; the real gateway is on PyPI,
# which is unreachable here).
PYTHON_BIN=/usr/bin/python3
if [[ "${demo_only}" == true ]]; then
	: # the demo runs no Hermes
elif [[ -x "${PYTHON_BIN}" ]]; then
	echo "testdeps: ${PYTHON_BIN} present"
elif [[ "$(id -u)" -eq 0 ]]; then
	echo "testdeps: installing python3 with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	apt_get update -qq
	apt_get install -y -qq python3 >/dev/null
	echo "testdeps: installed ${PYTHON_BIN}"
else
	echo "testdeps: ${PYTHON_BIN} is missing; as root run: apt-get update && apt-get install -y python3" >&2
	exit 1
fi

# The Bun tarballs.
if ! command -v npm >/dev/null 2>&1; then
	echo "testdeps: npm is missing; as root run: apt-get install -y npm" >&2
	exit 1
fi
mkdir -p "${cache}"
for spec in "${BUN_PACKAGES[@]}"; do
	# npm pack names "@oven/bun-linux-x64@1.3.14" oven-bun-linux-x64-1.3.14.tgz.
	name="${spec%@*}"
	file="$(echo "${name#@}" | tr '/' '-')-${BUN_VERSION}.tgz"
	if [[ -s "${cache}/${file}" ]]; then
		echo "testdeps: .cache/npm/${file} present"
		continue
	fi
	tmp="$(mktemp -d "${cache}/.pack.XXXXXX")"
	trap 'rm -rf "${tmp}"' EXIT
	(cd "${tmp}" && npm pack --silent "${spec}" >/dev/null)
	if [[ ! -s "${tmp}/${file}" ]]; then
		echo "testdeps: npm pack ${spec} did not produce ${file}" >&2
		exit 1
	fi
	mv "${tmp}/${file}" "${cache}/${file}"
	rm -rf "${tmp}"
	trap - EXIT
	echo "testdeps: fetched ${spec} into .cache/npm/${file}"
done

# Running linux/arm64 executables here (the arm64 suite).
if [[ "${demo_only}" == true ]]; then
	echo "testdeps: --demo: the registry and Bun are all the demo needs"
	exit 0
fi
if [[ "$(uname -m)" == aarch64 ]]; then
	echo "testdeps: arm64 host, the arm64 suite runs natively"
	exit 0
fi
BINFMT=/proc/sys/fs/binfmt_misc
ARM64_LOADER=/lib/ld-linux-aarch64.so.1
if [[ ! -e "${BINFMT}/register" ]]; then
	if [[ "$(id -u)" -ne 0 ]]; then
		echo "testdeps: binfmt_misc is not mounted; as root run: mount -t binfmt_misc binfmt_misc ${BINFMT}" >&2
		exit 1
	fi
	mount -t binfmt_misc binfmt_misc "${BINFMT}"
	echo "testdeps: mounted binfmt_misc on ${BINFMT}"
fi
if [[ -x /usr/bin/qemu-aarch64-static && -e "${ARM64_LOADER}" ]] && command -v update-binfmts >/dev/null 2>&1; then
	echo "testdeps: qemu-user-static, binfmt-support and ${ARM64_LOADER} present"
elif [[ "$(id -u)" -eq 0 ]]; then
	echo "testdeps: installing qemu-user-static binfmt-support libc6:arm64 with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	dpkg --add-architecture arm64
	apt_get update -qq
	apt_get install -y -qq qemu-user-static binfmt-support libc6:arm64 >/dev/null
	echo "testdeps: installed qemu-user-static binfmt-support libc6:arm64"
else
	echo "testdeps: qemu-user-static, binfmt-support or libc6:arm64 is missing; as root run: dpkg --add-architecture arm64 && apt-get update && apt-get install -y qemu-user-static binfmt-support libc6:arm64" >&2
	exit 1
fi
if [[ ! -e "${BINFMT}/qemu-aarch64" ]]; then
	if [[ "$(id -u)" -ne 0 ]]; then
		echo "testdeps: qemu-aarch64 is not registered with binfmt_misc; as root run: update-binfmts --enable qemu-aarch64" >&2
		exit 1
	fi
	# binfmt-support's own record when it has one, else the systemd-binfmt
	# line the package ships (the kernel reads the same format).
	update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
	if [[ ! -e "${BINFMT}/qemu-aarch64" && -r /usr/lib/binfmt.d/qemu-aarch64.conf ]]; then
		grep -m1 '^:qemu-aarch64:' /usr/lib/binfmt.d/qemu-aarch64.conf >"${BINFMT}/register"
	fi
	if [[ ! -e "${BINFMT}/qemu-aarch64" ]]; then
		echo "testdeps: could not register qemu-aarch64 with binfmt_misc" >&2
		exit 1
	fi
	echo "testdeps: registered qemu-aarch64 with binfmt_misc"
fi
if [[ "$(head -n1 "${BINFMT}/qemu-aarch64")" != enabled ]]; then
	if [[ "$(id -u)" -ne 0 ]]; then
		echo "testdeps: the binfmt_misc entry qemu-aarch64 is disabled; as root run: update-binfmts --enable qemu-aarch64" >&2
		exit 1
	fi
	echo 1 >"${BINFMT}/qemu-aarch64"
	echo "testdeps: enabled the binfmt_misc entry qemu-aarch64"
fi
# Proof: the arm64 Bun, a dynamically linked arm64 ELF, runs like a native one.
tmp="$(mktemp -d)"
trap 'rm -rf "${tmp}"' EXIT
tar -xzf "${cache}/oven-bun-linux-aarch64-${BUN_VERSION}.tgz" -C "${tmp}" package/bin/bun
if ! got="$("${tmp}/package/bin/bun" --version 2>&1)" || [[ "${got}" != "${BUN_VERSION}" ]]; then
	echo "testdeps: the arm64 Bun does not run here (binfmt_misc qemu-aarch64, ${ARM64_LOADER}): ${got}" >&2
	exit 1
fi
rm -rf "${tmp}"
trap - EXIT
echo "testdeps: linux/arm64 executables run here (arm64 bun --version = ${got})"
