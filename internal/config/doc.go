// Package config loads, merges and validates hbx's configuration.
//
// A value comes from one of four layers, highest precedence first:
//
//   - a command-line flag the user set (RegisterFlags, FlagName);
//   - an environment variable HBX_<SECTION>_<KEY>, e.g. HBX_EXECUTOR_IMAGE
//     for executor.image (EnvName);
//   - the YAML config file: LoadOptions.Path when the user named it
//     (--config), else the file ConfigEnv (HBX_CONFIG) names, else
//     DefaultPath, which alone may be absent (Sources.File says which);
//   - the built-in default (Defaults), which pins the Executor image.
//
// Load reports where every effective value came from (Sources), so
// `hbx config show` can say so.
//
// A Config hands out what several commands derive from it, each built in
// one place: Release (the configured release.Target: image, index digest,
// platform, the pin under PinKey), EnabledPrograms and AutostartPrograms.
// Image references and platforms are parsed by release.ParseImageRef and
// release.ParsePlatform, program and environment names checked by
// internal/names, the user running hbx named by internal/account.
//
// Supervised programs (programs.<name>.*, see Program) are read from the
// file only, with yaml.v3 so environment names keep their case; the
// built-ins "executor" and "hermes" are always present and a new name
// declares a new program, which needs a command even when disabled (so a
// typo such as "hermse" is an error, not a program). ShownKeys lists them
// after Keys.
//
// # What it guarantees
//
// Load returns either a Config that passed every rule in Validate, or no
// Config and an error that wraps ErrInvalid (or an I/O error reading the
// file). Validation is strict and complete: unknown file keys, unknown HBX_*
// variables, values that do not parse and values that break a rule are all
// reported together, one Problem each, naming the key, the value, the rule
// and the value's source. Problems returns them as a list. A mistyped
// name (file key, program field, program, HBX_* variable) gets a "did you
// mean" when a known one is within a few edits (internal/suggest).
//
// Lists and maps given as strings (environment variables, flags) are
// comma-separated: "a,b" and "linux/arm64=sha256:...,linux/amd64=sha256:...".
// Durations use Go syntax ("30s", "1m30s"); sizes are integers of bytes or
// integers with a binary suffix ("16GiB", "512MiB").
//
// # What it does not guarantee
//
// Load checks values, not the world: it does not check that directories or
// the env file exist, their modes, that the user exists, or that the
// registry is reachable. Those checks belong to the commands that use them;
// Config.CheckSecretFiles (which hbx config show runs) checks the modes of
// the existing files that hold secrets, without reading them.
// File keys are matched case-insensitively (a viper property); environment
// variable names are case-sensitive.
package config
