# hbx: build, test and demo targets. Every Go command runs with the
# containers_image_openpgp tag so go.podman.io/image/v5 needs no cgo (gpgme).
SHELL := /bin/bash
export GOFLAGS := -buildvcs=false -tags=containers_image_openpgp
export CGO_ENABLED := 0

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X github.com/hermesbox/hbx/internal/buildinfo.Version=$(VERSION) -X github.com/hermesbox/hbx/internal/buildinfo.Commit=$(COMMIT)

.PHONY: all help build e2e-bin cross dist e2e-arm64 e2e-docker e2e-beside dockerdeps docker-stop docker-demo check fmt-check imports vet test e2e demo demo-upgrade bench testdeps clean

all: build ## the default: build

help: ## this list: each target and what it does
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([^:]+):[^#]*## (.*)/\1\t\2/' | awk -F'\t' '{ printf "  %-13s %s\n", $$1, $$2 }'

build: ## host binary at bin/hbx
	go build -trimpath -ldflags '$(LDFLAGS)' -o bin/hbx ./cmd/hbx

# The e2e suite's binary: the product plus the build tag hbxtest, which
# arms internal/killpoint (HBXTEST_KILL_AT, HBXTEST_HOLD_AT). Product
# binaries (build, cross, demo) never carry it.
TESTTAGS := containers_image_openpgp,hbxtest

e2e-bin: ## host binary with the e2e kill points armed (build tag hbxtest) at bin/hbx-e2e
	go build -trimpath -tags=$(TESTTAGS) -ldflags '$(LDFLAGS)' -o bin/hbx-e2e ./cmd/hbx

cross: ## static binaries for the two box targets under dist/, and dist/SHA256SUMS of both
	GOOS=linux GOARCH=arm64 go build -trimpath -ldflags '$(LDFLAGS)' -o dist/hbx-linux-arm64 ./cmd/hbx
	GOOS=linux GOARCH=amd64 go build -trimpath -ldflags '$(LDFLAGS)' -o dist/hbx-linux-amd64 ./cmd/hbx
	cd dist && sha256sum hbx-linux-amd64 hbx-linux-arm64 > SHA256SUMS.tmp && mv SHA256SUMS.tmp SHA256SUMS

dist: cross ## the same: dist/hbx-linux-{amd64,arm64} and dist/SHA256SUMS

fmt-check: ## gofmt -l over the tree: fails naming the files that need it
	@out=$$(find . \( -path ./.cache -o -path ./.git -o -path ./.run \) -prune -o -name '*.go' -print0 | xargs -0 gofmt -l); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

imports: ## goimports grouping: standard library, others, github.com/hermesbox/hbx, each a group of its own (the goimports of go.mod's tool line)
	@out=$$(find . \( -path ./.cache -o -path ./.git -o -path ./.run \) -prune -o -name '*.go' -print0 | xargs -0 go tool goimports -local github.com/hermesbox/hbx -l) || { echo "goimports failed"; exit 1; }; \
	if [ -n "$$out" ]; then echo "goimports -local github.com/hermesbox/hbx -w needed:"; echo "$$out"; exit 1; fi

vet: ## go vet ./...
	go vet ./...

test: ## unit tests (everything but e2e/), and internal/killpoint again armed; tests needing the registry or Bun run here too when present
	go test -count=1 $$(go list ./... | grep -v /e2e)
	go test -count=1 -tags=$(TESTTAGS) ./internal/killpoint/

testdeps: ## registry binary and Bun tarballs the e2e tests need
	scripts/testdeps.sh

# scripts/e2e.sh runs ./e2e/ as E2E_SHARDS (3) concurrent go test
# processes over disjoint parts of its test list, each -timeout 45m, and
# fails unless every shard passes and every listed test is reported.
e2e: e2e-bin testdeps ## end-to-end tests on the real registry and the real Bun (bin/hbx-e2e), in concurrent shards (scripts/e2e.sh)
	HBXTEST_E2E=1 HBXTEST_BIN=$(CURDIR)/bin/hbx-e2e scripts/e2e.sh

# The lifecycle tests the arm64 suite runs: the same test code as the
# amd64 suite, with the arm64 binary under qemu-user (binfmt_misc)
# installing and running the test image's linux/arm64 child, through
# scripts/e2e.sh (its logs in .run/e2e-arm64/, weights in
# scripts/e2e-arm64-durations.txt). Each must pass: one renamed, skipped
# or not run fails the target. None uses kill points, so the suite runs
# the shipped dist/ binary itself (a test that needs them fails with a
# line saying the binary lacks the tag hbxtest). Only what depends on the
# architecture runs here: steps that prove arch-independent logic by
# restarting Bun (20-60 s a start under qemu-user) are tests of their own
# that the amd64 suite alone runs (docs/development.md "ARM64 under
# emulation" names them).
E2E_ARM64_TESTS := TestInstallAndRun TestSupervise TestHealthE2E TestBackupRestoreE2E TestUpgradeE2E TestKilledSupervisorE2E TestForkWindowE2E TestVersionE2E
E2E_ARM64_RUN = HBXTEST_E2E=1 HBXTEST_PLATFORM=linux/arm64 HBXTEST_BIN=$(CURDIR)/dist/hbx-linux-arm64 \
	E2E_TESTS="$(E2E_ARM64_TESTS)" E2E_LOGS=.run/e2e-arm64 E2E_DURATIONS=scripts/e2e-arm64-durations.txt \
	E2E_SHARDS=$${E2E_ARM64_SHARDS:-2} E2E_TIMEOUT=$${E2E_ARM64_TIMEOUT:-45m} scripts/e2e.sh

e2e-arm64: cross testdeps ## the lifecycle e2e tests as linux/arm64 under qemu-user (see docs/development.md "ARM64 under emulation")
	$(E2E_ARM64_RUN)

# The Docker-host box on a real Docker Engine: scripts/dockerdeps.sh (root)
# installs docker.io and mmdebstrap, builds Compose into .cache/compose,
# starts a dockerd of this repository's own (.run/docker) and imports the
# local base image; the suite reads the environment it prints.
dockerdeps: ## Docker Engine, Compose and the base image the Docker suite runs on
	scripts/dockerdeps.sh

docker-stop: ## stop the dockerd that dockerdeps started
	scripts/dockerdeps.sh stop

# -timeout 40m: alone the suite took 651-908 s at load average 5-10; beside
# the arm64 suite (e2e-beside) on a busy machine it stretches.
E2E_DOCKER_RUN = set -a && eval "$$(scripts/dockerdeps.sh env)" && set +a && \
	HBXTEST_E2E=1 HBXTEST_BIN=$(CURDIR)/bin/hbx go test -count=1 -timeout 40m -v ./e2e/docker/

e2e-docker: build testdeps dockerdeps ## the Docker-host box (deploy/) on the real engine: see docs/docker-host.md
	$(E2E_DOCKER_RUN)

# The Docker suite mostly waits (on the engine, its containers, Bun in
# them): make check runs it beside the arm64 suite, each with its own log
# under .run/beside/, both to their end, their summary lines last
# (scripts/beside.sh).
e2e-beside: cross build testdeps dockerdeps ## make e2e-arm64 and make e2e-docker at once, each with its own log (scripts/beside.sh)
	scripts/beside.sh e2e-arm64 '$(E2E_ARM64_RUN)' e2e-docker '$(E2E_DOCKER_RUN)'

docker-demo: build ## one Docker-host box on the test image, healthy, then the commands to try (scripts/docker-demo.sh; down: scripts/docker-demo.sh down)
	scripts/docker-demo.sh

check: fmt-check imports vet testdeps test e2e e2e-beside ## everything CI runs (testdeps first, so unit tests that use Bun or the registry run too); the arm64 and Docker suites at once (e2e-beside)

demo: build ## pull, install, run and health-check the test image end to end (installs only the registry and Bun: testdeps.sh --demo)
	scripts/testdeps.sh --demo
	scripts/demo.sh

demo-upgrade: demo ## then the README's upgrade try-out: a second test image version, hbx upgrade, hbx rollback
	scripts/demo-upgrade.sh

bench: build testdeps ## figures: install (test image, then the race on the realistic image), the upgrade row, peak memory by entry count, supervisor recovery and stop
	scripts/bench.sh
	scripts/race.sh
	scripts/upgradebench.sh
	scripts/entrybench.sh
	scripts/backupbench.sh
	HBXTEST_BENCH=1 HBXTEST_E2E=1 HBXTEST_BIN=$(CURDIR)/bin/hbx go test -count=1 -run TestBenchSupervise -v ./e2e/ | grep -E 'BENCH|^(ok|FAIL)'


clean: ## remove bin/, dist/ and .run/
	rm -rf bin dist .run
