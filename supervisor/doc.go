// Package supervisor runs a fixed set of programs under hbx's own process
// supervisor, with supervisord's vocabulary and semantics: programs,
// priorities, autostart, autorestart (true, false, unexpected with
// exitcodes), startsecs, startretries, stopsignal and stopwaitsecs, and the
// states STOPPED, STARTING, RUNNING, BACKOFF, STOPPING, EXITED and FATAL.
// It also serves the control API on a unix socket (Serve, Dial). A client
// believes only a socket served by root, or by its own user when it does
// not run as root (SO_PEERCRED, ErrUntrustedPeer), and a held file of the
// same owners.
//
// # What it guarantees
//
//   - One loop owns every wait. Children are started with syscall.ForkExec
//     (never exec.Cmd) and reaped by a single wait4(-1, WNOHANG) loop driven
//     by SIGCHLD, which dispatches exit statuses by pid and silently reaps
//     unknown pids (orphaned grandchildren). While Run runs, no other code
//     in the process may start and wait for children of its own: the loop
//     would steal their exit statuses. The install hook (and its retries)
//     runs before the loop starts, so it may.
//   - Run makes the process a child subreaper (PR_SET_CHILD_SUBREAPER), also
//     when it is PID 1, so orphaned descendants are reparented to it and
//     reaped: it leaves no zombies. Where the prctl fails (qemu-user does
//     not implement it; some sandboxes refuse it) Run goes on: it logs
//     one warning and Info.NotSubreaper (GET /v1/info, shown by `hbx
//     status`) says why. Orphaned descendants are then reparented to init
//     (or the nearest subreaper), which reaps them; everything else below
//     still holds, because stops, leftovers and the single-writer rule
//     find processes by process group and marker, never by parentage. As
//     PID 1 a failure is ignored: every orphan comes to PID 1 anyway.
//   - Each program runs in its own process group. A stop sends stopsignal to
//     the whole group, waits stopwaitsecs, then sends SIGKILL to the group;
//     it reports STOPPED only once no process of the group is left. A
//     program is never started again while a process of its previous group
//     is alive (the leader's exit alone is not enough), so a restarted
//     Executor never meets its old instance on the data directory. When
//     the leader exits without being asked to (a crash, kill -9), what is
//     left of its group is a leftover: it gets stopsignal at once and
//     SIGKILL after Options.LeftoverGrace (200ms, never more than
//     stopwaitsecs), so the program restarts within a second even when a
//     child ignores SIGTERM (Executor's workerd). A program that exited
//     from RUNNING is EXITED at once (never RUNNING without a process);
//     Status says the old group is draining, for how long, when its
//     SIGKILL is due, and that a restart follows; a stop or start asked
//     meanwhile waits for the group to be gone.
//   - Programs start in ascending priority order; a program with DependsOn
//     is started only when every dependency is RUNNING. A program with a
//     Probe becomes RUNNING only when it has been up for StartSecs and the
//     probe has succeeded, within HealthWait (until then its status
//     detail is the probe's last error, "not ready: ..."); while RUNNING
//     the probe runs every HealthInterval as a liveness check: its last
//     failure is Status.Unhealthy ("not live: ..." in Detail) until one
//     passes, and WedgeFailures failed probes in a row restart it.
//     Programs stop in descending priority order; programs of the same
//     priority stop in parallel.
//   - A failed start (exit before RUNNING, or no healthy answer in time) is
//     retried after an exponential backoff (Options.BackoffBase, doubling,
//     capped at Options.BackoffMax); after StartRetries retries the program
//     is FATAL. A program that cannot be spawned at all (missing command,
//     directory or user, or its Build function fails) is FATAL at once, with
//     the reason (its Brief() when a Build error wraps a Briefer; the
//     log keeps the whole); the other programs keep running. A program waiting for
//     a FATAL dependency says so in its Detail.
//   - An exit the supervisor did not ask for with a code of
//     Program.RestartExitCodes starts the program again at once (no
//     backoff, no failed start counted, whatever Autorestart says); one of
//     FatalExitCodes makes it FATAL at once, the reason naming the code
//     and the program's last stderr line. An exit that follows the
//     supervisor's own stop (a stop, a failed health wait, a wedge) is
//     expected whatever its code.
//   - Every program without Build starts with a clean environment: PATH
//     (DefaultPath), HOME, USER, LOGNAME and SHELL of its user,
//     Options.Env, its Environment, then SUPERVISOR_ENABLED,
//     SUPERVISOR_PROCESS_NAME, SUPERVISOR_GROUP_NAME and, with a socket,
//     SUPERVISOR_SERVER_URL.
//   - Options.Install runs before any program starts, while the socket
//     already answers status: Options.InstallProgram is STARTING with the
//     hook's progress, the others STOPPED "not started: the release is
//     being installed first". A failed install is retried with the
//     backoff of a failed start, InstallProgram's StartRetries times
//     (BACKOFF, with the error); then InstallProgram is FATAL with the
//     install's error and is not started (the others are). Start,
//     Restart, Stop and Hold wait for the install, or until their ctx
//     ends (nothing changed); Start's and Restart's Check runs after it,
//     on what it installed (a shutdown meanwhile answers all four
//     ErrShuttingDown, the Check not run). A Restart that waited is one
//     start after the install: what the supervisor autostarted after the
//     request satisfies it, it is not stopped and started again (one the
//     autostart spawned before the request is restarted). Stops and
//     holds that waited come after the autostart's starts: a program
//     they stopped is not started behind them.
//   - A hold (Supervisor.Hold, POST /v1/hold, Client.Hold) stops programs
//     and starts again those it stopped when the holder releases it or its
//     connection ends, even if the holder dies. Its results say which
//     those are (Result.Restart, Hold.Restarts): callers never guess them
//     from an earlier status.
//   - WaitRunning (POST /v1/wait, Client.WaitRunning) returns once every
//     named program is RUNNING at once (for a program with a Probe, that
//     means its probe passed), and fails at once with ErrFatal when one is
//     FATAL.
//   - A Probe that implements ProcessProbe (ProcessProbeFunc) is told the
//     pid of the process it checks at every call; nothing outside the
//     supervisor needs to learn it.
//   - Before Run, HandleEarlySignals gives the signals of Signals the same
//     meaning (a stop signal ends the start, the others are logged and
//     ignored), so none ends the process while its caller takes locks or
//     recovers an interrupted change.
//   - Run's own start-up errors (its locks, the control socket, the
//     leftovers of a dead supervisor, the log files) are *StartError: no
//     program ran. An Options.Install error marked NoRetry (ErrNoRetry)
//     is not retried: the install program is FATAL at once.
//   - When the start fails instead, HoldSignals.Hold keeps the process up
//     (a container's PID 1: no restart loop), reaping children and
//     ignoring every signal but the stop ones, with the error in
//     HeldPath(socket) for ReadHeld and CheckHeld (hbx health, hbx
//     status); a stop signal returns the error, also one caught since
//     CatchHoldSignals, before the hold began. The held file is live only
//     while its holder keeps its flock (the kernel drops it when the
//     holder dies, kill -9 included): a pid in it is for messages, never
//     trusted for liveness (a container's PID 1 reuses pids).
//   - At shutdown (the context of Run ends, or Supervisor.Shutdown) every
//     program is stopped, then every process still reparented to the
//     supervisor is killed and reaped, the socket is removed, and Run
//     returns. Meanwhile Hold and WaitRunning fail with ErrShuttingDown
//     (over the socket 503 "shutting_down", which the Client turns back
//     into ErrShuttingDown).
//   - When Run fails after serving the socket (a log file it cannot open,
//     once the install on start is over), every call that waited for the
//     install, and every later one, fails with "supervisor did not
//     start: " and Run's error (ErrShuttingDown too); a shutdown that
//     waited is answered as done. No caller waits for a start that will
//     not come.
//   - With Options.StateDir, one supervisor per state directory (its
//     supervisor.lock; ErrAlreadyRunning names the holder; Supervisor.Claim
//     takes it, and the socket's lock, before Run for callers that must not act
//     beside a running supervisor; Run releases them, or Supervisor.Unclaim
//     when such a caller refuses to start), and every
//     process of a program inherits the program's marker file as fd 3
//     (Program.ExtraFiles follow it). Found through /proc/*/fd, the marker
//     makes the program's processes visible wherever they went: a stop
//     sends stopsignal, then SIGKILL, to those that left the process group
//     too (setsid, setpgid), reports STOPPED only once they are gone, and
//     Status names them while it waits; a start waits for them, and a
//     leader's exit takes them along as it takes its group (a program must
//     not daemonize, as under supervisord). A child between its fork and
//     its exec holds every program's marker; no look for a program's
//     processes runs while one exists (spawns and looks exclude each
//     other), so it is never taken for another program's process and
//     stopped (under qemu-user that window lasts milliseconds). Each
//     spawn also records its process group and its leader's start time
//     in <name>.group. Before it
//     starts anything, Run stops (stopsignal, stopwaitsecs, SIGKILL) every
//     process a previous supervisor left (it was killed with SIGKILL): the
//     members of each recorded group (unless the group id was reused:
//     members older than the recorded leader) and every holder of a
//     marker; it logs each one, and fails if one cannot be stopped.
//     None of this depends on being a subreaper.
//   - A program's log files are opened as the supervisor's user (root)
//     only in a directory whose every ancestor is root's alone (the
//     supervisor's own user's when it is not root; pathtrust.Check's
//     rule) and never through a symbolic link as the last component
//     (O_NOFOLLOW) nor onto a FIFO, socket or device (ErrLogNotRegular):
//     otherwise Run fails (a *StartError) naming the path and the rule,
//     and a reopen (SIGHUP) keeps writing the open file.
//   - With Options.HandleSignals, Run never dies of a signal that can be
//     caught (Signals): TERM, INT and QUIT are a Shutdown, HUP and USR1
//     reopen the log files, the others are logged and ignored.
//
// # What it does not guarantee
//
//   - Without Options.StateDir, a descendant that leaves its program's
//     process group (setsid, setpgid) escapes a program stop (it is
//     reparented to the supervisor and killed only at shutdown), and after
//     a SIGKILL of the supervisor the leader gets SIGKILL (parent-death
//     signal) but its other descendants survive unseen.
//   - Without Options.Cgroups, or where no writable cgroup v2 hierarchy
//     is mounted, or the supervisor's own cgroup in it is not writable
//     (program cgroups live below it, never at the root: Info.NoCgroups
//     says which), a descendant that closes its
//     inherited marker descriptor and leaves the process group (Python's
//     subprocess with start_new_session does both) is invisible; with
//     cgroups it is a member of the program's cgroup (cgroup.go) and is
//     stopped, waited for, counted by a ReadyLock check and found after a
//     supervisor's death like any other (the subtree is recorded in the
//     state directory's "cgroups", so a supervisor started in another
//     cgroup finds it too); so are processes of other users when
//     the supervisor is not root (their /proc/PID/fd cannot be read).
//   - Signals 32, 33 and 34 (reserved for the C library) cannot be caught
//     by a Go program and still end it; SIGKILL cannot be caught at all.
//   - Log rotation (natefinch/lumberjack) works in whole MiB; a
//     LogFile.MaxBytes that is not a multiple of 1 MiB is rounded up, and 0
//     means no rotation. Backups 0 keeps every rotated file.
//   - It does not read configuration; internal/verbopts maps the config onto
//     Program values.
//   - It prints nothing: Table and ControlText return the text hbx status
//     and start/stop/restart print, supervisorctl's layout.
package supervisor
