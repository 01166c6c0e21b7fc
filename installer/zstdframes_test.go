package installer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/hermesbox/hbx/internal/tartest"
	"github.com/hermesbox/hbx/internal/testenv"
)

// skippableFrame is a zstd skippable frame (RFC 8878 section 3.1.2) with
// magic 0x184D2A50+nibble around data.
func skippableFrame(nibble byte, data []byte) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 0x184D2A50|uint32(nibble&0xf))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(data)))
	return append(b, data...)
}

// pzstd compresses b with the zstd package's pzstd, whose output starts
// with a skippable frame (it records the frame sizes there).
func pzstd(t *testing.T, b []byte) []byte {
	t.Helper()
	if _, err := exec.LookPath("pzstd"); err != nil {
		testenv.Missing(t, "pzstd is missing (Debian package zstd, which .ci/run installs)")
	}
	in := filepath.Join(t.TempDir(), "layer.tar")
	if err := os.WriteFile(in, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("pzstd", "-q", "-c", in).Output()
	if err != nil {
		t.Fatalf("pzstd: %v", err)
	}
	if !bytes.HasPrefix(out, []byte{0x50, 0x2a, 0x4d, 0x18}) {
		t.Fatalf("pzstd output starts % x, want a skippable frame", out[:min(8, len(out))])
	}
	return out
}

// TestZstdLayerStartingWithSkippableFrame: tar+zstd layers whose stream
// starts with a skippable frame (pzstd's output; a hand-made frame of the
// last magic, 0x184D2A5F, before a klauspost frame) install with every
// file as written. Before, the content check knew only the frame magic and
// refused them ("media type says zstd, content is not zstd").
func TestZstdLayerStartingWithSkippableFrame(t *testing.T) {
	pz := tartest.New().Dir("pz", 0o755).File("pz/f", string(noiseBytes(23, 200<<10)), 0o644).Bytes()
	hand := tartest.New().Dir("hand", 0o755).File("hand/f", "after a skippable frame", 0o644).Bytes()
	handBlob := append(skippableFrame(0xf, []byte("seekable index or anything")), compress(t, hand, v1.MediaTypeImageLayerZstd)...)
	empty := append(skippableFrame(0x0, nil), compress(t, tartest.New().File("e", "empty skippable frame first", 0o644).Bytes(), v1.MediaTypeImageLayerZstd)...)
	h := newHostileRegistry(t)
	ref, _, md := h.publishRaw(t, "skippable", []rawLayer{
		gzLayer(t, baseLayer()),
		{pzstd(t, pz), v1.MediaTypeImageLayerZstd, digest.FromBytes(pz)},
		{handBlob, v1.MediaTypeImageLayerZstd, digest.FromBytes(hand)},
		{empty, v1.MediaTypeImageLayerZstd, digest.FromBytes(tartest.New().File("e", "empty skippable frame first", 0o644).Bytes())},
		gzLayer(t, appLayer()),
	})
	o := h.opts(t, ref, md)
	if _, err := Install(context.Background(), o); err != nil {
		t.Fatalf("Install() = %v", err)
	}
	rootfs := filepath.Join(o.RuntimeDir, "current", "rootfs")
	for p, want := range map[string][]byte{
		"pz/f": noiseBytes(23, 200<<10), "hand/f": []byte("after a skippable frame"), "e": []byte("empty skippable frame first"),
	} {
		if b, err := os.ReadFile(filepath.Join(rootfs, p)); err != nil || !bytes.Equal(b, want) {
			t.Errorf("ReadFile(%s) = %d bytes, %v; want the %d written", p, len(b), err, len(want))
		}
	}
}

// TestZstdContentCheck: which stream starts the content check lets
// through to the zstd decoder, and what the decoder then says.
func TestZstdContentCheck(t *testing.T) {
	frame := compress(t, []byte("x"), v1.MediaTypeImageLayerZstd)
	cases := []struct {
		name string
		blob []byte
		want string // "" for a stream that decodes to "x"
	}{
		{"a zstd frame", frame, ""},
		{"skippable frame 0x184D2A50 first", append(skippableFrame(0, []byte("meta")), frame...), ""},
		{"skippable frame 0x184D2A5F first", append(skippableFrame(0xf, nil), frame...), ""},
		{"two skippable frames first", append(append(skippableFrame(3, []byte("a")), skippableFrame(4, []byte("b"))...), frame...), ""},
		{"magic 0x184D2A60 is no skippable frame", append(binary.LittleEndian.AppendUint32(nil, 0x184D2A60), 0, 0, 0, 0), "media type says zstd, content is not zstd"},
		{"magic 0x184D2A4F is no skippable frame", append(binary.LittleEndian.AppendUint32(nil, 0x184D2A4F), 0, 0, 0, 0), "media type says zstd, content is not zstd"},
		{"gzip said to be zstd", compress(t, []byte("x"), v1.MediaTypeImageLayerGzip), "media type says zstd, content is not zstd"},
		{"three bytes", []byte{0x50, 0x2a, 0x4d}, "media type says zstd, content is not zstd"},
		{"empty", nil, "media type says zstd, content is not zstd"},
		{"skippable frame cut short", skippableFrame(0, []byte("meta"))[:6], "unexpected EOF"},
		{"skippable frame then garbage", append(skippableFrame(0, nil), "garbage!"...), "magic number mismatch"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u := newUnpacker()
			defer u.close()
			r, release, err := u.slots[0].decompress(bufio.NewReader(bytes.NewReader(c.blob)), zstded)
			var got []byte
			if err == nil {
				got, err = readAll(r)
				release()
			}
			switch {
			case c.want == "" && (err != nil || string(got) != "x"):
				t.Errorf("decompress() = %q, %v; want \"x\"", got, err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("decompress() = %q, %v; want an error containing %q", got, err, c.want)
			}
		})
	}
}

func readAll(r interface{ Read([]byte) (int, error) }) ([]byte, error) {
	var buf bytes.Buffer
	_, err := buf.ReadFrom(r)
	return buf.Bytes(), err
}
