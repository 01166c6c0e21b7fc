// Package box composes the box from its configuration: it maps
// internal/config onto each verb package's options (installer, launch,
// health, supervisor) and holds the small pieces that join one verb to
// another (the executor's probe is health's check, the supervisor's
// program is launch's spec, the release change journal of upgrade and the
// restore journal of backup decide what `hbx status`, `hbx health` and
// `hbx run executor` say).
//
// It is the one package besides cmd/ and e2e/ allowed to import several
// verb packages (internal/boundary's test names it); no verb package
// imports it. It decides only what follows from the configuration and the
// journals on disk; it prints nothing, reads no flags and starts no
// command: cmd/hbx does that and calls it.
//
// Guarantees: the options it returns are the configuration's values (the
// image digest and platform pin of executor.image and
// executor.platform_digests, the enabled programs in config order, the
// environment without HBX_* variables); PendingChange and PrepareLaunch
// read the journals and change nothing on disk.
package box
