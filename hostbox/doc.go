// SPDX-License-Identifier: Apache-2.0

// Package hostbox is `hbx box`: Docker-host boxes driven from the host.
// A box is a directory, <root>/<name>, holding
//
//	compose.yaml           deploy/compose.yaml as this hbx shipped it, verbatim
//	compose.override.yaml  optional, the operator's (or new's --override)
//	.env                   the variables of compose.yaml (BOX, HOST_PORT, ...)
//	mcp.key, backup.pass   256 random bits each, hex, mode 0600
//	.lock                  the flock every operation on the box holds
//
// so `docker compose ps|logs|exec|stop` run by hand inside the directory
// act on the same project (hbx-<name>) as hbx box does. The root is
// $HBX_BOX_ROOT, else $XDG_DATA_HOME/hbx/boxes, else
// ~/.local/share/hbx/boxes (DefaultRoot).
//
// It drives the `docker compose` CLI rather than linking Compose's Go
// API: the engine and the Compose version are the operator's (whatever
// `docker compose version` says), linking Compose would pin one into hbx
// and pull its dependency tree into the box's own binary, and every step
// is a command the operator can rerun by hand in the box directory. The
// variables of the box's .env win over the caller's environment: hbx box
// removes them (and COMPOSE_*) from the docker CLI's environment.
//
// Guarantees:
//   - Bad input to New (a name that is not a DNS label, a box or Compose
//     project that exists, a port in use or claimed by another box of the
//     root, a --set of COMPOSE_*, DOCKER_* or a variable new writes, a
//     value .env cannot hold literally) is refused before anything is created.
//   - A New that fails later (up, the doctor, an interrupt) removes what it
//     made: the containers, networks and volumes of the project and the
//     box directory, lock file included.
//   - Operations on one box exclude each other through the box's .lock
//     (internal/lock, a flock: released when the holder dies, never stale).
//   - The host port is chosen once, at New, and kept in .env: recreating
//     the containers keeps it.
//   - Two News (or Loads) in one root claim ports one at a time under the
//     root directory's flock: the second sees the first's .env and chooses
//     another port (a --port the first took is refused).
//   - Remove deletes volumes only when called; the command asks for the
//     name to be typed back first.
//   - Save writes its archive atomically (mode 0600) or not at all, never
//     under the box root (hbx box rm would delete it with the box); the
//     agent is started again whether it worked or not. Load opens and
//     checks the whole archive (passphrase, integrity, entries and hard
//     links' targets only under agent/, no device nodes) before it removes or creates anything.
//
// Not guaranteed:
//   - A port chosen free at New may be taken by another program later;
//     start then fails with Compose's error.
//   - A New or Load killed with SIGKILL cannot clean up: its directory and
//     whatever `up` made stay (.env and compose.yaml are written before any
//     container, so `hbx box rm NAME --yes` removes them).
//   - A RotateToken killed before the recreate leaves the new key in
//     mcp.key and the old one in both containers (the doctor's key gate
//     fails); RotateToken run again recovers.
//   - A Save killed with SIGKILL leaves the agent stopped (hbx box start
//     starts it) and atomicfile's .tmp- file beside the output.
//   - Save leaves the executor's own hbx backup archive in the box's backup
//     volume (hbx backup's retention applies there).
//   - The box's key is the Compose secret file: RotateToken works for a
//     payload that takes a fixed key (executor.token_file); the
//     self-hosted Executor mints its keys in its web UI.
//   - A package never prints: results are returned and the command renders
//     them; Logs and Enter connect the caller's streams to docker.
package hostbox
