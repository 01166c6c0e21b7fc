#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A STAND-IN for hermes-agent's gateway (`hermes gateway run`), for tests.

The real Hermes gateway (NousResearch's hermes-agent, a Python package) cannot
be installed here: PyPI is not reachable from these machines. This program is
NOT Hermes. It follows the gateway's documented contract (README "The Hermes
gateway's contract"; issue 24) so that hbx's supervision of it can be tested
with real processes and signals:

- slow start: STANDIN_START_SECS seconds (default 15) before it is up;
- then HERMES_HOME/gateway.pid (JSON: pid, start_time), an exclusive flock on
  HERMES_HOME/gateway.lock held for its life, and HERMES_HOME/gateway_state.json
  saying "gateway_state": "running", rewritten every STANDIN_REFRESH_SECS (5)
  until HERMES_HOME/standin-wedged exists (a wedged gateway: alive, its
  state file going stale);
- its own log in HERMES_HOME/logs/gateway.log;
- SIGINT: a planned stop, state "stopped", exit 0; a bare SIGTERM: an
  unexpected kill, state left "running", exit 1; SIGUSR1: a graceful
  restart, exit 75; a fatal configuration (HERMES_HOME/config.yaml holding
  "fatal") exits 78 at once;
- a helper in a new session with its descriptors closed (as its tool
  subprocesses and shutdown diagnostic are), which it does not stop:
  HERMES_HOME/helper.pid;
- SIGUSR2 stands for an in-chat /restart: told it is supervised
  (HERMES_GATEWAY_EXTERNAL_SUPERVISOR=1 or --external-supervisor) it exits
  75; otherwise it spawns a detached restart helper in a new session
  (HERMES_HOME/detached-restart.pid) and goes on;
- --replace: an older gateway found through HERMES_HOME/gateway.pid is sent
  SIGTERM and its lock awaited; without it a held lock exits 1;
- `gateway run --help` names --external-supervisor only when
  STANDIN_HAS_EXTERNAL_SUPERVISOR=1 (a newer release); the flag is
  refused otherwise, as an older release's argument parser would.
"""

import fcntl
import json
import os
import signal
import subprocess
import sys
import time

HOME = os.environ.get("HERMES_HOME", "")


def log(msg):
    os.makedirs(os.path.join(HOME, "logs"), exist_ok=True)
    with open(os.path.join(HOME, "logs", "gateway.log"), "a") as f:
        f.write("%s gateway[%d]: %s\n" % (time.strftime("%H:%M:%S"), os.getpid(), msg))


def write_json(name, doc):
    path = os.path.join(HOME, name)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def sleeper(pidfile):
    """A helper: records its pid and sleeps until killed."""
    with open(os.path.join(HOME, pidfile), "w") as f:
        f.write(str(os.getpid()))
    while True:
        time.sleep(3600)


def spawn_detached(pidfile):
    subprocess.Popen([sys.executable, os.path.abspath(__file__), "sleeper", pidfile],
                     start_new_session=True, close_fds=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def replace_old():
    try:
        with open(os.path.join(HOME, "gateway.pid")) as f:
            old = json.load(f)["pid"]
    except (OSError, ValueError, KeyError):
        return
    if old != os.getpid():
        try:
            os.kill(old, signal.SIGTERM)
            log("--replace: sent SIGTERM to the older gateway %d" % old)
        except OSError:
            pass


def main(args):
    has_flag = os.environ.get("STANDIN_HAS_EXTERNAL_SUPERVISOR") == "1"
    if args[:2] != ["gateway", "run"]:
        print("usage: hermes gateway run [--replace]", file=sys.stderr)
        return 2
    if "--help" in args:
        print("usage: hermes gateway run [--replace]%s" % (" [--external-supervisor]" if has_flag else ""))
        print("  --replace              replace a running gateway")
        if has_flag:
            print("  --external-supervisor  a service manager restarts the gateway")
        return 0
    for a in args[2:]:
        if a not in ("--replace",) and not (a == "--external-supervisor" and has_flag):
            print("hermes: error: unrecognized arguments: %s" % a, file=sys.stderr)
            return 2
    if not HOME:
        print("HERMES_HOME is not set", file=sys.stderr)
        return 78
    supervised = os.environ.get("HERMES_GATEWAY_EXTERNAL_SUPERVISOR") == "1" or "--external-supervisor" in args
    print("Hermes gateway (stand-in) starting, supervised=%s, argv=%s" % (supervised, json.dumps(args)), flush=True)
    log("starting; argv %s; supervised %s" % (json.dumps(args), supervised))
    try:
        with open(os.path.join(HOME, "config.yaml")) as f:
            if "fatal" in f.read():
                print("config: gateway.platforms: no platform is configured (fatal)", file=sys.stderr, flush=True)
                log("fatal configuration")
                return 78
    except OSError:
        pass

    signals = []
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(s, lambda n, _f: signals.append(n))

    if "--replace" in args:
        replace_old()
    deadline = time.time() + float(os.environ.get("STANDIN_START_SECS", "15"))
    while time.time() < deadline and not signals:
        time.sleep(0.05)
    lockf = open(os.path.join(HOME, "gateway.lock"), "a")
    lock_deadline = time.time() + 30
    while True:
        try:
            fcntl.flock(lockf, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            if "--replace" not in args or time.time() > lock_deadline:
                print("another gateway holds %s" % lockf.name, file=sys.stderr, flush=True)
                return 1
            time.sleep(0.1)
    write_json("gateway.pid", {"pid": os.getpid(), "start_time": time.time()})
    spawn_detached("helper.pid")
    refresh = float(os.environ.get("STANDIN_REFRESH_SECS", "5"))
    last = 0.0
    log("running")
    while True:
        while signals:
            n = signals.pop(0)
            if n == signal.SIGINT:
                write_json("gateway_state.json", {"gateway_state": "stopped", "updated_at": time.time()})
                log("SIGINT: planned stop, exit 0")
                return 0
            if n == signal.SIGTERM:
                log("SIGTERM: unexpected kill, exit 1 (state left running)")
                return 1
            if n == signal.SIGUSR1:
                log("SIGUSR1: graceful restart, exit 75")
                return 75
            if n == signal.SIGUSR2:
                if supervised:
                    log("/restart: supervised, exit 75")
                    return 75
                log("/restart: not supervised, spawning a detached restart helper")
                spawn_detached("detached-restart.pid")
        wedged = os.path.exists(os.path.join(HOME, "standin-wedged"))
        if time.time() - last >= refresh and not wedged:
            write_json("gateway_state.json", {"gateway_state": "running", "pid": os.getpid(), "updated_at": time.time()})
            last = time.time()
        time.sleep(0.05)


if __name__ == "__main__":
    if sys.argv[1:2] == ["sleeper"]:
        sleeper(sys.argv[2])
    sys.exit(main(sys.argv[1:]))
