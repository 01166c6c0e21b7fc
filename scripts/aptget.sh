# SPDX-License-Identifier: Apache-2.0
#
# aptget.sh is sourced by the scripts that install Debian packages. apt_get
# runs apt-get with its arguments, waiting up to 600 s for a lock another
# apt holds (a fresh cloud VM's unattended upgrades) instead of failing at
# once: dpkg's lock through DPkg::Lock::Timeout, and the package lists'
# lock (apt-get update, which that option does not cover) by trying again
# every 5 s while apt says "Could not get lock". Any other failure is
# returned at once, with apt-get's messages.

apt_get() {
	local deadline=$((SECONDS + 600)) err rc said=false
	err="$(mktemp)"
	while :; do
		rc=0
		DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 "$@" 2>"${err}" || rc=$?
		if ((rc == 0)) || ! grep -q 'Could not get lock' "${err}" || ((SECONDS >= deadline)); then
			cat "${err}" >&2
			rm -f "${err}"
			return "${rc}"
		fi
		if ! "${said}"; then
			echo "apt-get $*: another apt holds its lock; waiting up to 600 s" >&2
			said=true
		fi
		sleep 5
	done
}
