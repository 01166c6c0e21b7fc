// Command hbx installs the digest-pinned Executor OCI image and runs it
// natively, without a container engine.
//
// This package is the command line only: it parses flags, loads the
// configuration (internal/config), builds the logger and calls the domain
// packages. One file per subcommand holds its options, its flag binding and
// a runX(ctx, opts) function that tests call directly, its printing and
// its help. The rules every command shares (usage errors, argument
// checks, "did you mean", the --log-level logger) are internal/cli's;
// each result is rendered by internal/ui (supervisor.Table inside
// status's), and this package picks text or JSON. docs/architecture.md says where each kind of change goes. What the configuration
// means to each domain package (their options) is internal/verbopts',
// the adapters between them (the supervisor's services, the data lock,
// the restore's runtime and pin) internal/adapters's, hbx supervise's start-up
// internal/supervise's, hbx install under existing data
// internal/guardedinstall's; this package gives the box the one thing
// that needs the terminal, the passphrase prompt (root.go's g.box,
// backup.go's openTTY), and calls it. Loading the
// configuration also refuses, as invalid configuration, the paths it names
// (and hbx's own directory) when a user other than root could replace them
// (trust.go, internal/pathtrust).
//
// Exit codes (exitcode.go is the one table): 0 success; 1 failure; 2 invalid
// configuration or usage; 3 "done, but not running": from hbx status when
// a program it shows is not RUNNING, a release change is half done (with
// or without a supervisor) or hbx supervise holds on its start-up error,
// and from hbx restore when it restored the data but left the programs
// NOT started.
package main
