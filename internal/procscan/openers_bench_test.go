package procscan

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkOpeners: one scan of /proc for the holders of a file (every
// process's descriptors), as the held-file stop path makes at each poll.
func BenchmarkOpeners(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "marker"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	pin, err := PinFile(f)
	if err != nil {
		b.Fatal(err)
	}
	defer pin.Close()
	for b.Loop() {
		if _, err := Openers(pin); err != nil {
			b.Fatal(err)
		}
	}
}
