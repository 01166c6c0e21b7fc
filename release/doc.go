// Package release describes an installed Executor release on disk and finds
// its program, for the installer (which writes releases) and for whoever
// runs them (hbx run, the supervisor, health).
//
// It owns "which release": Target (image, index digest, platform, pinned
// child manifest digest) with its one comparison, Target.Check (and
// Target.On for an archive written on another platform); Meta.Target is
// what a release records, config.Config.Release what is configured;
// Meta.Matches is Check in the installer's words. It also owns the one
// image-reference parser (ParseImageRef: name:tag@sha256:<64 hex>) and the
// one platform parser (ParsePlatform: os/arch[/variant]); the config and
// the installer call them.
//
// Layout of the runtime directory (executor.runtime_dir):
//
//	releases/<manifest-hex>/rootfs/        the applied layers
//	releases/<manifest-hex>/release.json   Meta: digests, platform, image config, ownership mark
//	releases/<manifest-hex>/files.json     Files: every path with type, mode, size, sha256
//	releases/<manifest-hex>/manifest.json  the image manifest, bytes as fetched
//	releases/<manifest-hex>/config.json    the image config, bytes as fetched
//	current  -> releases/<manifest-hex>    the active release (relative symlink)
//	previous -> releases/<manifest-hex>    the release current replaced (rollback)
//	staging/                               trees being applied (the installer's; removed by the next install)
//	blobs/sha256/<hex>                     the blob store: the releases' layers, index, manifest, config (the installer's; re-hashed before reuse)
//	tmp/                                   partial downloads (the installer's), releases being removed (tmp/removing-<hex>)
//	hbx.lock                               the runtime directory's lock, naming its holder
//
// This package owns those names (StagingDir, BlobsDir, ScratchDir,
// LockFile), the lock, publication and cleanup: LockRuntime creates the
// directory and takes hbx.lock, logging the holder while it waits
// (install, backup, restore, upgrade and rollback take it through
// LockRuntime; activate through LockExisting, which creates nothing, so
// activating over a missing runtime directory fails and changes nothing
// on disk); Publish renames a staged tree to releases/<hex>
// (before the rename nothing visible changed; after it the release is
// complete and durable, current unchanged); SwitchCurrent points previous,
// then current, each by renaming a fresh symlink (current always names a
// complete release); Prune (and Cleanup, Prune keeping nothing else)
// removes staging/, tmp/, temporaries, releases neither current nor
// previous nor wanted by the caller, the layer state no release needs
// (PruneLayerStates, under layers/), and blobs by the store's rule (PruneBlobs: those no
// release under releases/ lists). A release goes by a rename into tmp/
// (releases/ synced) and then a delete there: killed at any point, a
// release is whole under releases/ or gone from it, and what is left in
// tmp/ goes with the next run; no symlink is followed (a planted one is
// removed itself; releases/ itself a symlink is refused). Also the
// one tag parser (ParseTagRef: name:tag[@sha256:<64 hex>], hbx resolve).
//
// Every entry of a release with Meta.Ownership == OwnedByHbx belongs to the
// user running hbx, with no group or other write bit (see the installer).
//
// Paths named by the image (Entrypoint, Cmd, WorkingDir, PATH entries) are
// resolved inside rootfs with chroot semantics (pathrs-lite), so an
// absolute symlink in the image never leads to the host's file of that name.
// MapArg holds the rule mapping the command's absolute path arguments to
// the host (data directory, state directory or rootfs), shared by the
// installer's validation (CheckArgs) and the native run (launch).
// Apart from LockRuntime, LockExisting, Publish, SwitchCurrent and the cleanup
// functions the package only reads. Those writers expect the caller to
// hold the runtime directory's lock; nothing else here guards against
// concurrent installs.
package release
