package installer

import "testing"

// TestPlatformSame: os, architecture and variant must agree, arm64's
// default variant v8 counting as none.
func TestPlatformSame(t *testing.T) {
	for _, tc := range []struct {
		p, q string
		want bool
	}{
		{"linux/amd64", "linux/amd64", true},
		{"linux/arm64", "linux/arm64/v8", true},
		{"linux/arm64", "linux/amd64", false},
		{"linux/arm/v7", "linux/arm/v6", false},
		{"linux/arm/v7", "linux/arm", false},
	} {
		p, err := ParsePlatform(tc.p)
		if err != nil {
			t.Fatal(err)
		}
		q, err := ParsePlatform(tc.q)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Same(q); got != tc.want {
			t.Errorf("Platform(%s).Same(%s) = %v, want %v", tc.p, tc.q, got, tc.want)
		}
	}
}
