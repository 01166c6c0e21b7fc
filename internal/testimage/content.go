// SPDX-License-Identifier: Apache-2.0

package testimage

import (
	"archive/tar"
	_ "embed"
	"io"
	"strconv"
)

// serveTS is the stand-in Executor server, installed as
// app/apps/host-selfhost/src/serve.ts.
//
//go:embed app/serve.ts
var serveTS string

// entrypointSH stands in for oven/bun's docker-entrypoint.sh.
const entrypointSH = `#!/bin/sh
# Run bun when the command is a flag or not a program, else the command.
set -e
case "$1" in
-*) set -- bun "$@" ;;
*) command -v -- "$1" >/dev/null 2>&1 || set -- bun "$@" ;;
esac
exec "$@"
`

// executorWebSH is the [ShapeWrapper] image's entry program: like many
// docker-entrypoint.sh files, it starts the server whatever its arguments.
const executorWebSH = `#!/bin/sh
# Start the Executor web server; arguments are ignored.
exec bun run src/serve.ts
`

// distServeJS is the [ShapeDistroless] image's dist-server/serve.js: plain
// JavaScript that Bun runs directly and that loads the server.
const distServeJS = `// The bundled server entry of the distroless shape: Bun runs it directly.
await import("../src/serve.ts");
`

// treeServeJS is the [ShapeTree] image's dist-server/serve.js: the
// server as a process tree (HBXTEST_TREE) with the skills tool, as
// Executor from v1.5.30.
const treeServeJS = `// The bundled server entry of today's shape (Executor v1.5.30 on): a
// workerd child and a tool bridge on loopback side ports; execute, skills, resume.
process.env.HBXTEST_TREE = "1";
process.env.HBXTEST_SKILLS = "1";
await import("../src/serve.ts");
`

// AppDir is the image's working directory, where `bun run src/serve.ts` runs.
const AppDir = "/app/apps/host-selfhost"

// baseEntries is layer 1: a stand-in for Debian oven/bun:1 (or, for
// ShapeDistroless, gcr.io/distroless/cc-debian12) whose usr/local/bin/bun
// is supplied by bun, plus files that layer 3 deletes.
func baseEntries(bun func() (io.ReadCloser, int64, error), shape string) []entry {
	switch shape {
	case ShapeDistroless, ShapeTree:
		return distrolessEntries(bun)
	case ShapeWrapper:
		return append(debianEntries(bun), file("usr/local/bin/executor-web", 0o755, executorWebSH))
	}
	return debianEntries(bun)
}

// distrolessEntries has no shell and no shell script anywhere.
func distrolessEntries(bun func() (io.ReadCloser, int64, error)) []entry {
	home := dir("home/nonroot/", 0o700)
	home.uid, home.gid = 65532, 65532
	return []entry{
		dir("etc/", 0o755),
		file("etc/group", 0o644, "root:x:0:\nnonroot:x:65532:\n"),
		file("etc/passwd", 0o644, "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"),
		dir("etc/hbx-test/", 0o755),
		file("etc/hbx-test/old.conf", 0o644, "# deleted by a whiteout in layer 3\n"),
		dir("etc/hbx-test/replaced/", 0o755),
		file("etc/hbx-test/replaced/a.txt", 0o644, "a: hidden by an opaque whiteout in layer 3\n"),
		dir("home/", 0o755),
		home,
		dir("root/", 0o700),
		dir("tmp/", 0o1777),
		dir("usr/", 0o755),
		dir("usr/local/", 0o755),
		dir("usr/local/bin/", 0o755),
		{path: "usr/local/bin/bun", typ: tar.TypeReg, mode: 0o755, big: bun},
		dir("var/", 0o755),
	}
}

// debianEntries is the oven/bun:1 stand-in.
func debianEntries(bun func() (io.ReadCloser, int64, error)) []entry {
	home := dir("home/bun/", 0o755)
	home.uid, home.gid = 1000, 1000
	return []entry{
		dir("bin/", 0o755),
		dir("etc/", 0o755),
		file("etc/group", 0o644, "root:x:0:\nbun:x:1000:\n"),
		file("etc/passwd", 0o644, "root:x:0:0:root:/root:/bin/sh\nbun:x:1000:1000::/home/bun:/bin/sh\n"),
		dir("etc/hbx-test/", 0o755),
		file("etc/hbx-test/old.conf", 0o644, "# deleted by a whiteout in layer 3\n"),
		dir("etc/hbx-test/replaced/", 0o755),
		file("etc/hbx-test/replaced/a.txt", 0o644, "a: hidden by an opaque whiteout in layer 3\n"),
		file("etc/hbx-test/replaced/b.txt", 0o644, "b: hidden by an opaque whiteout in layer 3\n"),
		dir("home/", 0o755),
		home,
		dir("home/bun/app/", 0o755),
		dir("root/", 0o700),
		dir("run/", 0o755),
		dir("tmp/", 0o1777),
		dir("usr/", 0o755),
		dir("usr/local/", 0o755),
		dir("usr/local/bin/", 0o755),
		{path: "usr/local/bin/bun", typ: tar.TypeReg, mode: 0o755, big: bun},
		// oven/bun's image has a shell entrypoint that runs bun when the
		// command is a flag or not a program; the pinned Executor image
		// inherits it, so hbx must run it natively (host /bin/sh).
		file("usr/local/bin/docker-entrypoint.sh", 0o755, entrypointSH),
		// oven/bun links bunx with an absolute target: `ln -s /usr/local/bin/bun /usr/local/bin/bunx`.
		symlink("usr/local/bin/bunx", "/usr/local/bin/bun"),
		dir("var/", 0o755),
		// Debian: /var/run is a symlink to /run.
		symlink("var/run", "/run"),
	}
}

// appEntries is layer 2: the Bun workspace under app/.
func appEntries() []entry {
	return []entry{
		dir("app/", 0o755),
		file("app/package.json", 0o644, `{
  "name": "executor",
  "private": true,
  "workspaces": ["apps/*"]
}
`),
		dir("app/apps/", 0o755),
		dir("app/apps/host-selfhost/", 0o755),
		file("app/apps/host-selfhost/package.json", 0o644, `{
  "name": "@executor/host-selfhost",
  "private": true,
  "type": "module",
  "scripts": { "start": "bun run src/serve.ts" },
  "dependencies": { "@hbx-test/banner": "1.0.0", "hbx-pad": "1.0.0" }
}
`),
		dir("app/apps/host-selfhost/src/", 0o755),
		file("app/apps/host-selfhost/src/serve.ts", 0o644, serveTS),

		dir("app/node_modules/", 0o755),
		dir("app/node_modules/.bin/", 0o755),
		symlink("app/node_modules/.bin/fake", "../fake-pkg/bin.js"),
		dir("app/node_modules/@hbx-test/", 0o755),
		dir("app/node_modules/@hbx-test/banner/", 0o755),
		file("app/node_modules/@hbx-test/banner/package.json", 0o644, `{"name":"@hbx-test/banner","version":"1.0.0","main":"index.js"}
`),
		file("app/node_modules/@hbx-test/banner/index.js", 0o644, `"use strict";
exports.banner = (version) => "executor (hbx test image) " + version;
`),
		dir("app/node_modules/@hbx-test/pad/", 0o755),
		file("app/node_modules/@hbx-test/pad/package.json", 0o644, `{"name":"@hbx-test/pad","version":"1.0.0","main":"index.js"}
`),
		file("app/node_modules/@hbx-test/pad/index.js", 0o644, `"use strict";
exports.padLeft = (s, n, c) => (s.length >= n ? s : c.repeat(n - s.length) + s);
`),
		dir("app/node_modules/fake-pkg/", 0o755),
		file("app/node_modules/fake-pkg/package.json", 0o644, `{"name":"fake-pkg","version":"0.1.0","main":"index.js","bin":{"fake":"bin.js"}}
`),
		file("app/node_modules/fake-pkg/index.js", 0o644, `"use strict";
module.exports = {};
`),
		file("app/node_modules/fake-pkg/bin.js", 0o755, `#!/usr/bin/env bun
console.log("fake");
`),
		// hbx-pad's code is a hard link to @hbx-test/pad's, and serve.ts
		// imports it: a payload whose hard links were not extracted fails.
		dir("app/node_modules/hbx-pad/", 0o755),
		file("app/node_modules/hbx-pad/package.json", 0o644, `{"name":"hbx-pad","version":"1.0.0","main":"index.js"}
`),
		hardlink("app/node_modules/hbx-pad/index.js", "app/node_modules/@hbx-test/pad/index.js"),
	}
}

// deltaEntries is layer 3: whiteouts, and the release files serve.ts needs.
func deltaEntries(version string, stateFormat int, shape string) []entry {
	var dist []entry
	switch shape {
	case ShapeDistroless:
		dist = []entry{
			dir("app/apps/host-selfhost/dist-server/", 0o755),
			file("app/apps/host-selfhost/dist-server/serve.js", 0o644, distServeJS),
		}
	case ShapeTree:
		dist = []entry{
			dir("app/apps/host-selfhost/dist-server/", 0o755),
			file("app/apps/host-selfhost/dist-server/serve.js", 0o644, treeServeJS),
		}
	}
	return append([]entry{
		dir("app/", 0o755),
		dir("app/apps/", 0o755),
		dir("app/apps/host-selfhost/", 0o755),
		file("app/apps/host-selfhost/STATE_FORMAT", 0o644, strconv.Itoa(stateFormat)+"\n"),
		file("app/apps/host-selfhost/VERSION", 0o644, version+"\n"),
		dir("etc/", 0o755),
		dir("etc/hbx-test/", 0o755),
		file("etc/hbx-test/.wh.old.conf", 0o644, ""),
		dir("etc/hbx-test/replaced/", 0o755),
		file("etc/hbx-test/replaced/.wh..wh..opq", 0o644, ""),
		file("etc/hbx-test/replaced/c.txt", 0o644, "c: the only file left after the opaque whiteout\n"),
	}, dist...)
}
