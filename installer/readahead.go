package installer

import (
	"io"

	"github.com/hermesbox/hbx/internal/readahead"
)

// Read-ahead shape: aheadChunks buffers of aheadChunk bytes (4 MiB),
// allocated once per install and reused from layer to layer, so memory does
// not grow with the number or size of layers. A buffer is handed to the
// extractor only once full (or at the stream's end), so chunks are small:
// while a slow download is followed, what has been inflated waits at most
// one chunk for more input before the extractor sees it.
const (
	aheadChunk  = 64 << 10
	aheadChunks = 64
)

// readAhead reads a layer's decompressor ahead (internal/readahead), so
// inflating overlaps the extractor's file writes.
type readAhead struct{ *readahead.Reader }

func newReadAhead() *readAhead { return &readAhead{readahead.New(aheadChunks, aheadChunk)} }

func (ra *readAhead) start(src io.Reader) { ra.Start(src) }
func (ra *readAhead) wait()               { ra.Wait() }
func (ra *readAhead) abort()              { ra.Abort() }
