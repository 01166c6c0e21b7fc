package installer

import (
	"net"
	"testing"
	"time"
)

// TestBytesReceived: the kernel's count covers bytes not yet read by the
// process, which is what lets the watchdog see a manifest body the image
// library is still reading.
func TestBytesReceived(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write(make([]byte, 1000))
		time.Sleep(time.Second)
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, ok := bytesReceived(c)
		if !ok {
			t.Fatal("bytesReceived() = not available on a TCP connection")
		}
		if n >= 1000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bytesReceived() = %d, want 1000", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.Close()
	if _, ok := bytesReceived(c); ok {
		t.Error("bytesReceived() on a closed connection = ok, want not available")
	}
}
