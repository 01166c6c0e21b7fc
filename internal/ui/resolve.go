package ui

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/hermesbox/hbx/installer"
	"github.com/hermesbox/hbx/internal/units"
)

// ResolveJSON writes hbx resolve --json's result: one JSON object with
// the pinned reference ("image"), the digests, each layer and the plan's
// sums ("fetch", "reuse", "fetch_bytes", "reuse_bytes").
func ResolveJSON(w io.Writer, r *installer.Resolution) error {
	fetch, reuse, fetchBytes, reuseBytes := r.Plan()
	return json.NewEncoder(w).Encode(map[string]any{
		"image": r.Pinned(), "name": r.Ref.Name, "tag": r.Ref.Tag, "given_digest": r.Ref.Digest,
		"index_digest": r.Index, "single_manifest": r.Single, "platform": r.Platform,
		"manifest_digest": r.Manifest, "config_digest": r.Config, "layers": r.Layers,
		"fetch": fetch, "reuse": reuse, "fetch_bytes": fetchBytes, "reuse_bytes": reuseBytes,
	})
}

// ResolveText is hbx resolve's report: the two pins hbx upgrade takes,
// what an upgrade would fetch and reuse, one line per layer, and the
// upgrade command line. box is "" when r.Platform is this box's
// configured platform, else that platform: the command line then says it
// is for a box of r.Platform (hbx upgrade --platform-digest pins the
// configured platform's manifest). config is the config file the operator
// named with --config ("" when none): the command line carries it, quoted
// for a POSIX shell (ShellQuote). When the digest given with the tag is
// not the tag's now (MISMATCH), the command line says it pins what the
// tag names now. It ends in "\n".
func ResolveText(r *installer.Resolution, box, config string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "image     %s\n", r.Pinned())
	if r.Single {
		fmt.Fprintf(&b, "manifest  %s (%s): the tag names a single manifest, not an index; it is also the platform digest\n", r.Manifest, r.Platform)
	} else {
		fmt.Fprintf(&b, "manifest  %s (%s, from the index)\n", r.Manifest, r.Platform)
	}
	mismatch := r.Ref.Digest != "" && r.Ref.Digest != r.Index
	if mismatch {
		fmt.Fprintf(&b, "MISMATCH  the given digest %s is not what the tag names now\n", r.Ref.Digest)
	}
	fetch, reuse, fetchBytes, reuseBytes := r.Plan()
	fmt.Fprintf(&b, "upgrade   would fetch %s (%s) and reuse %s (%s) from the blob store\n",
		units.Count(fetch, "layer", "layers"), units.Bytes(fetchBytes), units.Count(reuse, "layer", "layers"), units.Bytes(reuseBytes))
	for _, l := range r.Layers {
		what := "fetch"
		if l.Reusable {
			what = "reuse"
		}
		fmt.Fprintf(&b, "  %s  %s  %10s\n", what, l.Digest, units.Bytes(l.Size))
	}
	where := ""
	if mismatch {
		// The tag moved: the line pins what it names now, not the digest
		// given, which is for the operator to check first.
		where = "only if you want what the tag names now, not the digest you gave: "
	}
	if box != "" {
		where += fmt.Sprintf("on a %s box (this one is %s): ", r.Platform, box)
	}
	if config != "" {
		config = " --config " + ShellQuote(config)
	}
	fmt.Fprintf(&b, "run       %shbx upgrade%s --image %s --platform-digest %s\n", where, config, r.Pinned(), r.Manifest)
	return b.String()
}

// ShellQuote is s as one word of a POSIX shell command line: unchanged
// when it holds only letters, digits and -_./:@%+=, (none a shell
// reads specially), else in single quotes (a single quote inside ends
// the quoting, is escaped with a backslash, and the quoting starts again).
func ShellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:@%+=,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
