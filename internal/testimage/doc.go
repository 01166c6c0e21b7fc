// SPDX-License-Identifier: Apache-2.0

// Package testimage builds hbx's own test image: a small, deterministic
// stand-in for the pinned Executor image (ghcr.io/rhyssullivan/executor-selfhost:v1.5.12)
// that carries the real Bun runtime, and pushes it to a registry.
//
// [BuildLayout] writes an OCI image layout (oci-layout, index.json,
// blobs/sha256/...) holding one OCI image index with one image per platform
// (linux/amd64 and linux/arm64/v8 by default). Each image has the shape of the
// real one:
//
//   - layer 1, tar+gzip: a base standing in for Debian oven/bun:1 (bin/,
//     etc/passwd, etc/group, tmp/ with mode 1777, var/run -> /run as an
//     absolute symlink, home/bun/ owned by 1000:1000, usr/local/bin/bun = the
//     real Bun binary of that architecture taken from its npm tarball,
//     usr/local/bin/bunx -> /usr/local/bin/bun as in oven/bun), plus
//     etc/hbx-test/old.conf and etc/hbx-test/replaced/{a,b}.txt for the next
//     layer to delete;
//   - layer 2, tar+gzip: the application under app/: the workspace
//     package.json files, apps/host-selfhost/src/serve.ts (the embedded
//     stand-in server, see app/serve.ts) and a small node_modules tree with a
//     hard link and a relative symlink that serve.ts depends on at run time;
//   - layer 3, tar+zstd: a whiteout of etc/hbx-test/old.conf, an opaque
//     whiteout of etc/hbx-test/replaced/ with a new c.txt, and
//     app/apps/host-selfhost/VERSION and STATE_FORMAT, without which serve.ts
//     refuses to start;
//   - a config with the real image's WorkingDir, Cmd, Env, Volumes and
//     ExposedPorts, diff_ids and one history entry per layer.
//
// [Options.Shape] picks which of upstream's image shapes it imitates; the
// layers above are the default, [ShapeDebian] (Executor v1.5.12 to
// v1.5.16). [ShapeWrapper] adds usr/local/bin/executor-web, a #!/bin/sh
// script that starts the server whatever its arguments, and makes it the
// whole command (no Entrypoint, Cmd ["executor-web"]), the shape of many
// docker-entrypoint.sh files. [ShapeDistroless] stands in for
// gcr.io/distroless/cc-debian12 (Executor from v1.5.17): layer 1 has no
// shell anywhere (no bin/, no shell script, no docker-entrypoint.sh), no
// Entrypoint, Cmd ["bun", "run", "dist-server/serve.js"], where
// dist-server/serve.js (layer 3) is plain JavaScript that Bun runs
// directly and that loads src/serve.ts (upstream's is a real bundle; this
// one is not, the server's code stays where the other shapes have it).
// [ShapeTree] is today's Executor (v1.5.30 on): the distroless shape whose
// dist-server/serve.js makes the server a process tree (a workerd child
// that ignores SIGTERM on a loopback ephemeral port, a loopback tool
// bridge) with the tools execute, skills and resume.
// The default shape's bytes, and so its digests, do not depend on the
// other shapes.
//
// Determinism: the same [Options] and the same Bun tarballs give the same
// bytes and so the same digests, on any machine, with the pinned
// klauspost/compress version: entries are sorted, every time stamp is [Epoch],
// owners are numeric with no names, gzip headers carry no name and no time,
// and compression levels are fixed (gzip level 1, for build speed; zstd's
// default level, single-threaded). A different klauspost/compress version may
// change compressed digests, never diff_ids.
//
// [Push] copies the whole index with go.podman.io/image/v5, preserving
// digests, without reading any host containers configuration, credentials or
// signature policy. It speaks plain HTTP only to loopback registries.
//
// The package is test tooling: it trusts its inputs (the Bun tarballs from
// scripts/testdeps.sh) and is not hardened against hostile ones. It does not
// garbage-collect blobs of earlier builds left in a reused layout directory.
package testimage
