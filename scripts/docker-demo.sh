#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# docker-demo.sh is `make docker-demo`: one Docker-host box (deploy/) on
# the project's test image, healthy, then the commands to try next.
#   - the engine: scripts/dockerdeps.sh (Debian's docker.io, Compose, a
#     dockerd of the repository's own, the local base image), unless
#     DOCKER_HOST already names an engine that answers (the Docker suite's);
#   - the test image (mktestimage, linux/amd64) pushed into a registry
#     storage directory, then served over TLS by a registry container
#     (testenv.TLSRegistryContext, as the Docker suite does) on a network
#     of the demo's own that only the box's executor joins;
#   - a box directory .run/docker-demo/boxes/NAME laid out as hbx box
#     lays one out (compose.yaml, compose.override.yaml, .env, mcp.key,
#     backup.pass), so plain `docker compose` works inside it, with the
#     executor's config as a bind-mounted directory (etc/, edit in place)
#     holding the pin and the registry's CA, and a placeholder agent
#     (`sleep infinity`; compose.yaml's init: true stops it on SIGTERM);
#   - `docker compose up -d --wait`.
# An earlier demo of the same name is removed first; `docker-demo.sh down`
# removes it (containers, volumes, the registry, .run/docker-demo/).
# DEMO_NAME (default demo) names the box and every Docker object
# (hbx-NAME-...). Run it as root from the repository; it needs only the
# package registries (apt, the Go module proxy, npm) the first time.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}"
export GOFLAGS='-buildvcs=false -tags=containers_image_openpgp' CGO_ENABLED=0 DOCKER_BUILDKIT=0
# The box's .env must win: drop the caller's variables of compose.yaml.
unset BOX HOST_PORT AGENT_IMAGE EXECUTOR_IMAGE MCP_KEY_FILE BACKUP_PASSPHRASE_FILE BIND_ADDRESS COMPOSE_FILE COMPOSE_PROJECT_NAME
while read -r v; do unset "${v}"; done < <(compgen -v HBX_ || true)

name="${DEMO_NAME:-demo}"
[[ "${name}" =~ ^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$ ]] || {
	echo "docker-demo: DEMO_NAME ${name}: want a DNS label of a-z, 0-9 and '-'" >&2
	exit 2
}
run_dir=.run/docker-demo
box="${repo_root}/${run_dir}/boxes/${name}"
regnet="hbx-${name}-registry" # network and container of the registry
reghost=registry.hbx.test

step() { printf '\n==> %s\n' "$*"; }
now_ms() { echo $((${EPOCHREALTIME/[.,]/} / 1000)); }
secs() { printf '%d.%01d s' $(($1 / 1000)) $(($1 % 1000 / 100)); }

# down removes the demo's box and the NAME-copy that "Try next" loads
# (containers and volumes), the registry and the files.
down() {
	local b
	for b in "${box}-copy" "${box}"; do
		if [[ -f "${b}/.env" ]]; then
			(cd "${b}" && docker compose down -v --timeout 45 >/dev/null 2>&1) || true
		fi
	done
	docker rm -f -v "${regnet}" >/dev/null 2>&1 || true
	docker network rm "${regnet}" >/dev/null 2>&1 || true
	rm -rf "${box}-copy" "${box}" "${run_dir}/${name}" "${run_dir}/${name}.box.tar.gz.gpg"
}

# engine_line is the "Try next" line that points docker at the engine used:
# the caller's own when DOCKER_HOST answered (dockerdeps.sh env of this
# checkout names another socket), else this checkout's.
# shellcheck disable=SC2016 # expanded by the operator's shell
engine_line='set -a; eval "$(scripts/dockerdeps.sh env)"; set +a'
engine() {
	if [[ -n "${DOCKER_HOST:-}" ]] && docker version >/dev/null 2>&1; then
		echo "    using the engine at ${DOCKER_HOST}"
		engine_line="export DOCKER_HOST=${DOCKER_HOST}${DOCKER_CONFIG:+ DOCKER_CONFIG=${DOCKER_CONFIG}}"
		return
	fi
	scripts/dockerdeps.sh | sed 's/^/    /'
	set -a
	eval "$(scripts/dockerdeps.sh env)"
	set +a
}

case "${1:-}" in
down)
	[[ -n "${DOCKER_HOST:-}" ]] || { set -a && eval "$(scripts/dockerdeps.sh env)" && set +a; }
	down
	echo "docker-demo: removed ${name}"
	exit 0
	;;
"") ;;
*)
	echo "usage: docker-demo.sh [down]" >&2
	exit 2
	;;
esac

t0=$(now_ms)
step "The engine"
engine
base="${HBXTEST_DOCKER_BASE:-hbx-base:bookworm}"
step "The registry binary, Bun and bin/hbx"
scripts/testdeps.sh --demo | sed 's/^/    /'
[[ -x bin/hbx ]] || make --no-print-directory build | sed 's/^/    /'
down
work="${run_dir}/${name}"
mkdir -p "${work}" "${box}/etc/certs.d/${reghost}:5000"

step "The test image, in a registry served over TLS on network ${regnet}"
go build -o "${work}/mktestimage" ./internal/testimage/cmd/mktestimage
"${work}/mktestimage" -out "${work}/image" -platforms linux/amd64 -registry "${work}/registry" -serve=false \
	-tls-context "${work}/regctx" -tls-host "${reghost}" -base "${base}" >"${work}/mktestimage.out" 2>"${work}/mktestimage.log"
value() { sed -n "s|^$1=||p" "${work}/mktestimage.out"; }
ref="${reghost}:5000/$(value ref | cut -d/ -f2-)"
pin="$(value linux/amd64)"
docker build -q --network none -t "hbx-${name}-registry" "${work}/regctx" >/dev/null
docker network create "${regnet}" >/dev/null
docker run -d --name "${regnet}" --network "${regnet}" --network-alias "${reghost}" \
	-v "${repo_root}/${work}/registry/storage:/var/lib/registry" "hbx-${name}-registry" >/dev/null
cp "${work}/regctx/ca.crt" "${box}/etc/certs.d/${reghost}:5000/ca.crt"
echo "    ${ref}"

step "The executor image (deploy/Dockerfile) and a placeholder agent"
docker build -q --network none --build-arg "BASE=${base}" -f deploy/Dockerfile -t "hbx-${name}-executor" . >/dev/null
mkdir -p "${work}/agent"
printf 'FROM %s\nCMD ["sleep", "infinity"]\n' "${base}" >"${work}/agent/Dockerfile"
docker build -q --network none -t "hbx-${name}-agent" "${work}/agent" >/dev/null
echo "    hbx-${name}-executor, hbx-${name}-agent"

step "The box directory ${box#"${repo_root}/"}"
port=4788
while (exec 3<>"/dev/tcp/127.0.0.1/${port}") 2>/dev/null; do port=$((port + 1)); done
cp deploy/compose.yaml "${box}/compose.yaml"
cat >"${box}/compose.override.yaml" <<EOF
# The demo's: the executor's config is this directory's etc/ (edit it,
# then docker compose restart executor), and the executor alone joins the
# registry's network.
services:
  executor:
    volumes:
      - ./etc:/etc/hbx
    networks: [box, registry]
networks:
  registry:
    name: ${regnet}
    external: true
EOF
sed -e "s|^  install_on_start: true$|&\n  image: \"${ref}\"\n  platform_digests:\n    linux/amd64: \"${pin}\"|" \
	-e 's|^  token_file: ""$|  token_file: /run/secrets/mcp_key|' \
	-e 's|^  token_env: ""$|  token_env: EXECUTOR_AUTH_TOKEN # the test image takes a fixed key|' \
	deploy/hbx.yaml >"${box}/etc/hbx.yaml"
grep -q "${pin}" "${box}/etc/hbx.yaml" || {
	echo "docker-demo: deploy/hbx.yaml has no install_on_start line to pin after" >&2
	exit 1
}
for f in mcp.key backup.pass; do
	(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"${box}/${f}" && echo >>"${box}/${f}")
done
(umask 077 && cat >"${box}/.env" <<EOF
BOX=${name}
HOST_PORT=${port}
BIND_ADDRESS=127.0.0.1
EXECUTOR_IMAGE=hbx-${name}-executor
AGENT_IMAGE=hbx-${name}-agent
MCP_KEY_FILE=${box}/mcp.key
BACKUP_PASSPHRASE_FILE=${box}/backup.pass
EOF
)
ls -A "${box}" | sed 's/^/    /'

step "docker compose up -d --wait"
t1=$(now_ms)
(cd "${box}" && docker compose up -d --wait --wait-timeout 300 2>&1 | sed 's/^/    /')
up=$(($(now_ms) - t1))
echo "    healthy in $(secs "${up}") (make docker-demo: $(secs $(($(now_ms) - t0))))"

step "Try next"
rel="${box#"${repo_root}/"}"
saved="${run_dir}/${name}.box.tar.gz.gpg"
again=""
[[ "${name}" == demo ]] || again="DEMO_NAME=${name} "
cat <<EOF
    ${engine_line}    # the engine, for docker
    cd ${rel}                      # plain docker compose works here
    docker compose ps
    docker compose exec executor hbx health
    curl -s http://127.0.0.1:${port}/api/health
    \$EDITOR etc/hbx.yaml && docker compose restart executor   # the box's config
    cd ${repo_root}
    export HBX_BOX_ROOT=\$PWD/${run_dir}/boxes
    bin/hbx box ls
    bin/hbx box doctor ${name}
    bin/hbx box stop ${name} && bin/hbx box start ${name}
    bin/hbx box save ${name} -o ${saved}
    bin/hbx box load ${name}-copy ${saved} --passphrase-file ${rel}/backup.pass \\
      --executor-image hbx-${name}-executor --agent-image hbx-${name}-agent \\
      --config-dir ${rel}/etc --override ${rel}/compose.override.yaml
    bin/hbx box rm ${name}-copy --yes
    ${again}scripts/docker-demo.sh down                    # remove it all
EOF
echo
echo "docker-demo: OK"
