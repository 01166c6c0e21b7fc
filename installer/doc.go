// Package installer installs the pinned Executor image into the runtime
// directory: resolve the index by digest, pick and check the platform's
// manifest, fetch and verify every blob, apply the layers into a staged
// release, validate it, and activate it atomically. The runtime
// directory's layout, lock, publication (release.Publish), link switch
// (release.SwitchCurrent) and cleanup (release.Cleanup) belong to package
// release; the installer calls them. Guard decides, before an install,
// whether it may change the active release under existing data (keep,
// replace, or only through a recorded change with a pre-change backup).
//
// A cold install reads as its steps (cold.go), each with its crash window:
// resolve (nothing on disk), checkSpace, makeStaging, startFetch and
// applyLayer (staging/ and complete blobs only), writeRecords, validate,
// makeDurable (still nothing visible), then activate (release.Publish:
// releases/<hex> complete, current unchanged; release.SwitchCurrent:
// previous, then current, each one rename) and finish (cleanup).
//
// # What it guarantees
//
//   - current only ever moves to a complete, validated release: the staged
//     tree is made durable (one syncfs), renamed into releases/<hex>, and
//     only then is a fresh symlink renamed over current.
//   - Every blob is checked against its digest, every layer's uncompressed
//     stream against the config's rootfs.diff_ids, the index against the
//     pinned digest and the platform manifest against its pin when one is
//     configured. Digest strings are validated before they name a path.
//   - A warm install (current already matches) makes no network request and
//     hashes nothing: it reads release.json and stats the entry program.
//   - A configured release that previous names passes the same checks
//     (with Verify, every file re-hashed) and is reactivated in place:
//     current and previous swap, nothing is fetched. With StageOnly it is
//     returned as the staged release.
//   - With KeepRelease, an active release that is not the configured one is
//     never replaced (ErrReleaseChange), checked under the lock; callers
//     that decided a change is safe (internal/guardedinstall: nothing runs, no data, or a
//     pre-change backup) leave it off.
//   - A cold install is bounded by Timeout, extended to Timeout + the
//     image's compressed size at MinRate once the manifest is known, from
//     when the lock is held: past it the install stops with ErrTimeout. An
//     install stopped by its caller's context returns ErrInterrupted (and
//     the context's error: context.Canceled for Ctrl-C). Both errors name
//     the layer the install stopped at and say that nothing was activated, which
//     release stays active and how many complete blobs are kept.
//   - A release is the installing user's alone (root in production): the
//     layers' owners are never applied, modes follow extract.RuntimeMode,
//     and the release directory, releases/, staging/ and the runtime
//     directory itself get that owner with no group or other write bit.
//     Verify also checks that (owner, no group/other write, no
//     setuid/setgid) for every entry of the release directory.
//   - A release installed by an earlier hbx (image owners, release.json
//     without "ownership") is fixed once, in place, with no request: by
//     Install for current and previous, by Activate for the release it
//     activates. The walk follows no symlink (*at calls on O_NOFOLLOW
//     handles), fixes every directory before any file, refuses a file
//     with a hard link outside the release (current is then installed
//     again; previous is left, unusable for a rollback until fixed),
//     rewrites files.json's modes, syncs, and marks release.json last. A
//     marked release costs the warm path nothing. Not guaranteed: a
//     process that opened a file for writing before the fix keeps its
//     descriptor; only Verify finds what it wrote.
//   - Concurrent installs are serialised by one flock on the runtime
//     directory's hbx.lock (release.LockRuntime); the loser's error names the holder.
//   - Registry inputs come only from Options: no /etc/containers, no
//     ~/.docker, no credential helpers unless an auth file is given.
//     With Options.From, no registry at all (see Local images).
//   - RegistryOptions.Mirrors (registry.mirrors) give the image's
//     repository other locations, tried in order before its own name
//     (release.Locations, containers' registries.conf order): a location
//     that fails or serves an index other than the pinned digest is logged
//     and the next is tried; the one that answered serves every blob and
//     is Result.Location.
//
// # Validation
//
// A staged release is validated without running it (ErrUnrunnable, naming
// the file and the rule, refuses it): the entry program (Entrypoint + Cmd
// on the image's PATH inside the rootfs, release.Installed.Resolve, as
// package launch resolves it) is followed to what the kernel loads when
// launch execs it natively, at most 8 steps. A #! line leads to its
// interpreter, a host path ("#!/usr/bin/env NAME" to NAME on the payload's
// PATH: the image's PATH in the rootfs, then Options.HostPath; as the
// kernel passes the rest of the line as one argument, "env NAME ARG" is
// refused unless written "env -S NAME ARG"; a NAME the image's PATH
// holds as a symlink that the native run resolves on the host, such as
// "bunx -> /usr/local/bin/bun", is refused: the host's program would run,
// not the image's). An ELF file of the rootfs
// must be an executable (ET_EXEC or ET_DYN) for the platform's
// architecture (machine, class and byte order), and its PT_INTERP loader
// must exist on the host. A host program only has to exist and be
// executable: its architecture is the host's business (qemu-user). Every
// file is a regular file Options.RunAs may execute by its mode bits, in
// directories it may all search; "env" with no program after its options
// and assignments is refused (it would exec the script itself again,
// endlessly). Then Options.Smoke, when set, runs (internal/verbopts:
// install.smoke_command through launch, on a scratch data directory,
// bounded by install.validate_timeout); its error refuses the release as
// worded.
// release.ErrCorrupt ("damaged") is never a validation verdict: it is for
// metadata that does not parse and bytes that differ from files.json.
//
// # Pipeline
//
// Blobs are fetched one after another into the cache while layers are
// applied in order; a layer is applied as its blob arrives (its reader
// follows the cache file being written), so download, inflate (on a
// goroutine per layer in flight), the diff_id hash and file creation
// overlap within a layer and across layers: layer N+1 is read and inflated
// into its own read-ahead while layer N is applied (two read-aheads of 4
// MiB, reused, whatever the number of layers). The diff_id hash runs on the
// extractor's side, inflate being the busier one. Layer N+1's failure (a
// corrupt stream, a wrong diff_id) is reported when it is applied, after
// layer N, naming layer N+1; no layer counts as applied before its diff_id
// was checked, and nothing is published before every layer's was. A layer's stream ends only once its
// blob's size and digest were checked, so a layer is never complete on
// unverified bytes; until then its entries are only in the staging tree,
// and they are bounded: a downloaded blob not yet verified may expand to at most 8 times its
// declared size (at least 8 MiB), after which its layer waits for the
// check. A blob reused from the store is verified as extraction reads it
// (see The blob store), with no read of its own. When
// extraction fails while the blob still downloads, the download is let
// finish (for up to 30s), so bytes that do not match their digest are
// reported as ErrDigestMismatch, whatever the extractor made of them. Install returns
// only once every goroutine it started has ended. Dirty pages are written
// back in the background while layers are applied, so the final syncfs has
// little left. Per file: no fsync, no read-back; its sha256 for files.json
// is taken from the bytes as they are written.
//
// # Network
//
//   - Every registry request (the index, fetched when the source opens; the
//     platform manifest; the config; each layer) runs as attempts, each
//     with its own context. An attempt that receives no byte for
//     RegistryOptions.StallTimeout while hbx waits for one is cancelled
//     (ErrStalled); one that fails transiently (connection refused or
//     reset, 5xx, a body cut short) is retried after a doubling backoff,
//     at most RegistryOptions.Retries times, on a freshly opened source. A
//     slow transfer that keeps moving is never cancelled: progress is seen
//     on body reads and, for what the image library reads itself
//     (manifests, tokens), in the kernel's received-byte count of the
//     connection (Linux).
//   - A blob interrupted mid-body resumes as one stream: the next attempt
//     skips the bytes already stored; the temporary file, size check,
//     digest check and rename are unchanged.
//   - A registry that lies is refused, not retried: bytes that do not
//     hash to their digest, a manifest or index served for another digest,
//     a Content-Length that disagrees with the descriptor's size
//     (ErrDigestMismatch); so are 4xx answers (unknown manifest,
//     authentication required).
//   - The final error names the request, the registry and the last cause:
//     "fetch layer sha256:… from host: after 4 attempts: no bytes for 30s
//     (stalled)".
//   - Bearer-token registries (ghcr.io) are followed to their token realm,
//     anonymously or with the auth file's credentials.
//
// # Local images (Options.From)
//
// A cold install can read the image from an OCI image layout directory or
// an OCI archive (a tar of one) instead of the registry; it makes no
// network request, ignores Registry and writes nothing but the blob store.
// What is read is pinned as from a registry: the top document is the blob
// named by Image's digest (index.json is checked but never trusted), the
// child manifest is picked and checked against PlatformDigest, the config
// and every layer are checked by size, digest and diff_id on their way
// into the blob store, and bytes that differ are ErrDigestMismatch,
// nothing activated. A layout is read in place through an os.Root (no
// path leads outside it). An archive is read in place too, never
// unpacked: one pass over its tar headers (bodies skipped by seeking)
// records where each file of the layout lies, and every blob is then a
// section of the one descriptor opened, so it costs no disk and a file
// swapped at PATH afterwards is not read. Only regular files are read,
// each opened without blocking: a FIFO, device, socket or directory at a
// layout or blob name, a symlink out of a layout, and in an archive a
// symlink, hardlink, device, FIFO or sparse entry at a layout name
// (oci-layout, index.json, blobs/...), a name that leaves the archive
// (absolute, ".."), a name given twice or more than 65536 entries are
// refused (ErrLocalImage) before a byte of them is read; other entries of
// an archive are skipped. A truncated archive, one that is no layout
// (oci-layout imageLayoutVersion 1.0.0) or lacks the index blob is refused
// before any blob is read (the message names what its index.json holds,
// by digest and tag, beside the wanted image: another release, or one
// platform's manifest of a `skopeo copy` without --all). Result.Fetched and
// FetchedBytes count the layers read from the local image. Errors:
// ErrLocalImage (missing, neither directory nor regular file, not a
// layout, truncated, no blob for the index, manifest, config or a
// layer), each naming the path ("OCI archive FILE: ...").
//
// # Crash windows (kill -9, power loss)
//
//   - during fetch: blobs/sha256/.tmp-* files; complete blobs are renamed
//     into place, so a partial one is never taken for complete. The next run
//     reuses complete blobs and removes the temporaries.
//   - during unpack/validate: staging/<hex>-<random>/; current untouched;
//     removed by the next run.
//   - between the release rename and the symlink swap: releases/<hex> exists
//     but current still names the old release; the tree was durable before
//     the rename, so the next run that wants it makes it active in place
//     after the warm checks (as it does the release previous names), and a
//     run that wants another removes it once its own release is active.
//   - StageOnly: the release is published as releases/<hex> and the run
//     ends there; current and previous are untouched. The staged release
//     is not protected: the next install that activates a release (even
//     reactivating one in place) removes it as a release that is neither
//     current nor previous, so a caller that stages and then Activates (hbx
//     upgrade) holds the lock across both. A failed install removes no
//     published release.
//   - Activate: previous is renamed over first, then current; a crash
//     between the two leaves current on a complete release.
//   - after the swap: done; stale releases, staging and the blobs the
//     store's rule removes go, also by the next run if this one died.
//
// # The blob store
//
// blobs/sha256/<hex> holds complete blobs, each renamed into place after
// its bytes hashed to its name: the layers, and the index, manifest and
// config bytes as fetched (resolve checked them). A staging reuses every
// layer blob present, so an upgrade that shares base layers fetches only
// the others; Result counts layer blobs and bytes fetched (downloaded by
// any run of this Install) and reused. A reused blob is read once:
// extraction reads it through a hash, and its layer's stream ends only
// once all of its bytes hashed to its digest (the diff_id is checked as
// always). One that no longer matches (a power loss, a disk error) fails
// its layer: the blob is removed, the staging tree discarded, and the
// install runs again from the start, fetching that blob (each blob at
// most once); so nothing extracted from a byte not yet verified is ever
// published. A reused blob is not held to the expansion bound of a
// download (see Pipeline): it was verified when it was stored, and
// install.max_uncompressed_bytes still bounds it. A blob is opened
// without following a symlink or blocking: a symlink, FIFO, device or
// directory at a blob's name counts as damaged (the name removed, never
// what a link points to). With
// KeepBlobs (install.keep_blobs, on by default) every activation and every
// StageOnly run that published its release (and a warm install that finds
// leftovers) removes the blobs no release under releases/ lists
// (release.json's index, manifest, config and layers); without it the
// store is removed. Options.Verify, once the active release passed its
// own check, re-hashes every stored blob too and removes those that do
// not match; with KeepBlobs it then fetches the active release's blobs
// the store lacks (damaged, or never kept: installed with
// install.keep_blobs off) from the registry (Options.From when set), the
// index and manifest by their pinned digests and every blob checked,
// without staging the release again (Result.Changed false, Fetched
// counting the layers). A run
// that fails for lack of space (ErrNoSpace, ENOSPC) applies the same rule
// at once and says how many blobs it removed; any other failed run keeps
// its complete blobs for the next run, which removes them by this rule
// once it succeeds.
//
// # What it does not guarantee
//
// The payload runs on the host's libc and dynamic loader (see package
// launch); a release that validates here can still fail to run if the
// payload is not relocatable, needs shared libraries the host lacks
// (only the loader is checked), or fails for its own reasons: validation
// does not start it (install.smoke_command can). An interrupted blob is downloaded again from
// its start (the bytes already stored are skipped, not re-requested by
// range; the image library resumes a cut connection once by itself, with a
// Range request, before hbx's own retry). Outside Linux the stall watchdog
// cannot see manifest bodies arrive, so a manifest that trickles in for
// longer than the stall timeout counts as stalled.
package installer
