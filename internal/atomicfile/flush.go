package atomicfile

// Flusher runs syncfs on one filesystem in the background, at most one at a
// time, so disk writeback overlaps with writing a large tree instead of all
// happening in the final SyncFS. It is an optimisation only: durability
// comes from the caller's final, blocking SyncFS.
type Flusher struct {
	path string
	busy chan struct{} // holds a token while a syncfs runs
}

// NewFlusher returns a Flusher for the filesystem holding path.
func NewFlusher(path string) *Flusher {
	return &Flusher{path: path, busy: make(chan struct{}, 1)}
}

// Kick starts a background syncfs unless one is running. It never blocks,
// so it can be called from a hot loop.
func (f *Flusher) Kick() {
	select {
	case f.busy <- struct{}{}:
		go func() {
			_ = SyncFS(f.path)
			<-f.busy
		}()
	default:
	}
}

// Wait returns once no background syncfs runs.
func (f *Flusher) Wait() {
	f.busy <- struct{}{}
	<-f.busy
}
