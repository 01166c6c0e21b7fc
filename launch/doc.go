// Package launch runs the active release's payload natively: no chroot, no
// namespaces, no container engine.
//
// The program and its arguments come from the image config (Entrypoint +
// Cmd). The program name is looked up through the image's PATH entries
// mapped into the rootfs; the child's PATH lists those rootfs directories
// first, then release.DefaultHostPath (never the caller's PATH). The working
// directory is WorkingDir inside the rootfs.
//
// Arguments that are absolute image paths, "/p" or "--flag=/p" alike, are
// mapped by release.MapArg (its comment has the rule; docs/payload.md,
// "How `hbx run executor` runs the payload", says it for operators);
// anything it cannot map is release.ErrArg, which release.CheckArgs
// reports at install validation.
//
// The data and state directories, and the state directory's HOME, TMPDIR
// and XDG directories (home, tmp, cache, config, data, state), are made
// 0700 and the payload user's at each Prepare, and TMPDIR is emptied
// (fsat.EmptyDir: nothing inside is followed, a mount point inside is
// refused and stays with what is in it), each directory itself only (never recursively: a chown
// through the directory would follow links planted there); what changed
// is in Spec.Tightened for the caller to log. A symlink in their place is
// refused.
//
// The host's libc and dynamic loader serve the payload (an ELF program's
// PT_INTERP and shared libraries are the host's), so the payload must be
// relocatable; docs/payload.md says what that asks of an image.
//
// PrepareCommand and Smoke run another argv (install.smoke_command) inside
// a release, active or staged, exactly as the payload would run: same
// lookup, user, environment, working directory and argument mapping, in
// its own process group, killed whole when its bound passes.
// SmokeScratch is how an install runs it: never on the live data or state
// directory nor the configured port (the payload may be running there),
// but on a scratch data and state directory beside the staged release,
// removed after, and a free loopback port.
//
// Prepare reads as its steps: the env file, programOf (the release and
// its program), prepareDirs, mapArgs, payloadEnv; Run as start,
// forwardUntilExit, kill what is left, exitStatus.
//
// When the payload or the smoke command is done, its process group is
// killed, and so is every process that left the group (setsid, a daemon)
// but still holds the marker, a pipe each of its processes inherits after
// Spec.ExtraFiles. Not guaranteed: one that left the group and closed
// every inherited descriptor is not found (the supervisor, a child
// subreaper, finds those).
//
// The environment is exactly the image's Env with hbx's overrides (listen address,
// port, data directory, base URL, local-network policy, IPv6 switch, the
// TelemetryOff switches, HOME, TMPDIR and XDG directories under the state
// directory), then the
// variables of the env file, then Options.TokenEnv set to the key of
// Options.TokenFile (the box's MCP key, executor.token_file); nothing of
// the caller's environment. Values from the env file and the key are
// never logged. Prepare reads the env file and the token file before
// anything else, so a bad one (ErrEnvFile: missing, readable by others,
// setting EXECUTOR_HOST to anything but a loopback IP literal unless
// Options.Network,
// malformed; ErrTokenFile: missing, readable by others, not one key on its
// first line, names.BearerKey) changes nothing on disk.
package launch
