// Package installer installs the pinned Executor image into the runtime
// directory: resolve the index by digest, pick and check the platform's
// manifest, fetch and verify every blob, apply the layers into a staged
// release, validate it, and activate it atomically.
//
// # Guarantees
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
//   - Concurrent installs are serialised by one flock on the runtime
//     directory's hbx.lock; the loser's error names the holder.
//   - Registry inputs come only from Options: no /etc/containers, no
//     ~/.docker, no credential helpers unless an auth file is given.
//
// # Crash windows (kill -9, power loss)
//
//   - during fetch: blobs/sha256/.tmp-* files; complete blobs are renamed
//     into place, so a partial one is never taken for complete. The next run
//     reuses complete blobs and removes the temporaries.
//   - during unpack/validate: staging/<hex>-<random>/; current untouched;
//     removed by the next run.
//   - between the release rename and the symlink swap: releases/<hex> exists
//     but current still names the old release; the next run finds the
//     release complete on disk but not active, and re-stages it (it cannot
//     tell a finished tree from a half-renamed one without hashing).
//   - after the swap: done; stale releases, staging and (unless KeepBlobs)
//     the blob cache are removed, also by the next run if this one died.
//
// # Not guaranteed
//
// The payload runs on the host's libc and dynamic loader (see package
// launch); a release that validates here can still fail to run if the
// payload is not relocatable. Retries, stall detection and free-space checks
// are basic (see the hardening issue).
package installer
