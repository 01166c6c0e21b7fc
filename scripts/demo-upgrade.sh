#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# demo-upgrade.sh runs docs/upgrade.md's "Trying it on the test image" lines
# (between the demo-upgrade markers) exactly as written, from the
# repository root, after `make demo`: it builds version 2.0.0 of the test
# image, upgrades the demo box to it under `hbx supervise` and rolls back.
# It fails when any line fails, so the guide's commands stay true; the
# processes the lines start in the background are stopped on any exit.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"
# Only the demo's config file counts: drop the caller's HBX_* variables.
while read -r v; do unset "${v}"; done < <(compgen -v HBX_ || true)

[[ -s .run/demo/hbx.yaml && -x .run/demo/bin/mktestimage ]] || {
	echo "demo-upgrade: no .run/demo from make demo: run make demo first" >&2
	exit 1
}
lines="$(sed -n '/^<!-- demo-upgrade: begin -->$/,/^<!-- demo-upgrade: end -->$/p' docs/upgrade.md | sed -e '1,2d' -e '$d' | sed -e '$d')"
[[ -n "${lines}" ]] || {
	echo "demo-upgrade: found no demo-upgrade lines in docs/upgrade.md" >&2
	exit 1
}
# Echo each line (set -x), stop at the first failure and, on any exit,
# stop what the lines left running: TERM to the background jobs, which
# hbx supervise answers by stopping its programs.
exec bash -euo pipefail -c '
trap '\''set +ex; kill $(jobs -p) 2>/dev/null; wait'\'' EXIT
set -x
'"${lines}"'
set +x
echo "demo-upgrade: OK"'
