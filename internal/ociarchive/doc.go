// Package ociarchive writes an OCI archive: an OCI image layout
// (image-spec image-layout.md: oci-layout, index.json, blobs/<alg>/<hex>)
// as one tar stream, the format `skopeo copy oci-archive:` reads and the
// one `hbx install --from` reads back.
//
// The archive holds one image: index.json has a single descriptor, the
// image's top document (an OCI index, a Docker manifest list or a single
// manifest, its media type as the document says) with the
// org.opencontainers.image.ref.name annotation set to the image's tag, and
// blobs/ holds the blobs Image lists, copied byte for byte from a Store.
//
// # What it guarantees
//
//   - Every blob is hashed while it is copied and its size checked against
//     the descriptor first: a blob whose bytes do not hash to its digest
//     (ErrDigestMismatch) or that is missing from the store (ErrMissing)
//     ends the write with an error naming it. Write then has written part
//     of the stream; WriteFile leaves nothing at its path.
//   - The tar is deterministic: entries in name order (directories first
//     as their names sort), modification time 0 (1970-01-01), owner and
//     group 0 without names, modes 0755 for directories and 0644 for
//     files, USTAR headers. Two writes of one Image are byte-identical.
//   - WriteFile is durable and atomic: a temporary file in the target's
//     directory (".tmp-<name>-<random>", see internal/atomicfile), fsync,
//     mode 0644, rename over the target, fsync of the directory. An
//     existing regular file at the path is replaced only once the new
//     archive is complete; anything else there (a directory, a symlink, a
//     device) is refused and left alone.
//
// # What it does not guarantee
//
// A process killed during WriteFile leaves its temporary file in the
// target's directory (nothing at the target); the next WriteFile to the
// same path removes it (a writer holds flock on its temporary file, so
// only a dead writer's is removed, and only one owned by the same user). Write to a pipe cannot take
// back the bytes it wrote before an error: the reader gets a short stream
// (a reader that checks digests, as hbx install --from does, refuses it).
// Other platforms' manifests named by the top index are not included: a
// tool that copies every platform of the index will not accept the
// archive.
package ociarchive
