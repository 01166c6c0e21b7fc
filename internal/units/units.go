// Package units formats quantities for people.
package units

import "fmt"

// Bytes renders n bytes with a binary unit and one decimal: "512 B",
// "1.5 KiB", "2.0 GiB".
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// Count is n and the noun for n: one when n is 1, many otherwise ("1
// blob", "2 blobs", "0 blobs").
func Count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
