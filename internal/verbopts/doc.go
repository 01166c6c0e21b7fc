// Package verbopts maps internal/config onto each verb's options, one
// function per verb, built once here and completed by the caller with
// what is not configuration (a passphrase, services, a logger, progress):
// Installer (installer.Options, with the smoke command run as the payload
// would), Launch (launch.Options), Health (health.Options, with the
// running supervisor's programs through internal/supervisorclient),
// Supervisor (supervisor.Options: the enabled programs in config order,
// the executor built from the active release at each start through
// internal/executorrun and gated by its health probe, the install on
// start), Backup, Restore and Recover (package backup's), Export and
// KeptDirs (internal/export's). It checks what the configuration alone
// cannot: program users that exist (CheckProgramUsers) and check names
// near a real one (CheckHealthNames).
//
// A verb gets an option, never a configuration key: a new key is mapped
// here. It is a composer (internal/boundary's list), below internal/adapters,
// whose adapters take these options; it prints nothing.
//
// Guarantees: the options it returns are the configuration's values (the
// image digest and platform pin of executor.image and
// executor.platform_digests, the enabled programs in config order, the
// environment without HBX_* variables).
package verbopts
