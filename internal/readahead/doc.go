// Package readahead reads a stream on its own goroutine into a fixed ring
// of buffers, so the producer's work (inflating a layer, decrypting an
// archive) overlaps the consumer's (writing files, decompressing).
//
// A Reader owns its buffers for its whole life: memory does not grow with
// the number or size of the streams it reads. A buffer is handed to the
// consumer only once full (or at the stream's end), so the buffer size
// bounds how long read bytes wait for more before the consumer sees them.
// One stream at a time: Start the next only after the previous one was
// read to its end (Read returned an error).
//
// It is not safe for concurrent use by several consumers.
package readahead
