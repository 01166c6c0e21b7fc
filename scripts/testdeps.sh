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
#   - the real Bun 1.3.14 runtime tarballs for linux/amd64 and linux/arm64,
#     fetched with `npm pack` into the git-ignored cache .cache/npm/.
# It prints one line per thing it does or finds, and works from any directory.
set -euo pipefail

BUN_VERSION=1.3.14
BUN_PACKAGES=(
	"@oven/bun-linux-x64@${BUN_VERSION}"
	"@oven/bun-linux-aarch64@${BUN_VERSION}"
)
REGISTRY_BIN=/usr/bin/docker-registry

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${repo_root}/.cache/npm"

# The registry.
if [[ -x "${REGISTRY_BIN}" ]]; then
	echo "testdeps: ${REGISTRY_BIN} present"
elif [[ "$(id -u)" -eq 0 ]]; then
	echo "testdeps: installing docker-registry with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq docker-registry >/dev/null
	# The package enables a system service on some hosts; the tests start
	# their own instance on a free loopback port, so it is not needed.
	echo "testdeps: installed ${REGISTRY_BIN}"
else
	echo "testdeps: ${REGISTRY_BIN} is missing; as root run: apt-get update && apt-get install -y docker-registry" >&2
	exit 1
fi

# The headless browser.
CHROMIUM_BIN=/usr/bin/chromium
if [[ -x "${CHROMIUM_BIN}" ]]; then
	echo "testdeps: ${CHROMIUM_BIN} present"
elif [[ "$(id -u)" -eq 0 ]]; then
	echo "testdeps: installing chromium with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq chromium >/dev/null
	echo "testdeps: installed ${CHROMIUM_BIN}"
else
	echo "testdeps: ${CHROMIUM_BIN} is missing; as root run: apt-get update && apt-get install -y chromium" >&2
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
