package backup

// Which release a restore may bring back, and what an archive that is not
// authenticated may change at all (PlanRestore): one decision, made
// before anything changes, shared by Restore and `hbx backup verify`.

import (
	"fmt"
	"strings"

	digest "github.com/opencontainers/go-digest"

	"github.com/hermesbox/hbx/release"
)

// RestorePlan is what restoring an archive would change beside the data
// directory, as PlanRestore decides it.
type RestorePlan struct {
	// Authenticated: the archive was decrypted with the box's passphrase
	// (RestoreOptions.Passphrase). A plain .tar.gz, or a manifest-less tar,
	// is not: anyone could have written it.
	Authenticated bool `json:"authenticated"`
	// Image is the release the archive names, name:tag@sha256:...; ""
	// when it names none (the configured release is restored).
	Image string `json:"image,omitempty"`
	// Configured is the release the configuration names now.
	Configured string `json:"configured,omitempty"`
	// ChangesRuntime: the restore would install Image and pin it in the
	// config file in place of Configured.
	ChangesRuntime bool `json:"changes_runtime"`
	// Paths are the directories the restore would replace: the data
	// directory, then the archive's extra paths.
	Paths []string `json:"paths,omitempty"`
	// Owners says who the restored entries belong to.
	Owners string `json:"owners,omitempty"`
	// Refused is why the restore would be refused with nothing changed;
	// "" when it would go ahead.
	Refused string `json:"refused,omitempty"`

	err error
	// release is the release the restore acts on: the archive's when
	// Authenticated or accepted (RestoreOptions.AcceptImage), else the
	// configured one (nil when the archive names none).
	release *release.Target
}

// Err is the refusal as an error (nil when the restore would go ahead):
// ErrImageRefused for a release the box may not run or an
// unauthenticated archive's release change, ErrInvalid for the rest.
func (p *RestorePlan) Err() error { return p.err }

// PlanRestore decides, before anything changes, what restoring an archive
// with manifest m (nil: none) would do under opts, authenticated telling
// whether it was decrypted with the box's passphrase. The rules:
//
//   - A restore brings back only a release this box may run: one of
//     opts.AllowedRepository (executor.image's repository and its
//     mirrors; nil: opts.Image's repository alone), or exactly the
//     configured release. Never another, authenticated or not, and never
//     from another repository, even with the configured digests. The
//     configured release (same index digest) is always acted on under the
//     configured name: install, pin, awaited runtime and hints.
//   - An archive that is not authenticated cannot change the runtime: its
//     release must be the configured one (its manifest digest is then not
//     used, the configured pin is), unless opts.AcceptImage names exactly
//     its image. Its extra paths are not restored (refused unless
//     DataOnly), every entry of the data directory gets opts.Owner,
//     whatever owner the archive gave it, and a symlink leading out of
//     it is refused while staging (not known here: PlanVerified adds it
//     for hbx backup verify). It keeps user.* xattrs only (keepXattr).
//   - opts.AcceptImage that is not the archive's image is refused.
//
// Without opts.Runtime no runtime changes and the release rules do not
// apply.
func PlanRestore(opts RestoreOptions, m *Manifest, authenticated bool) *RestorePlan {
	p := &RestorePlan{Authenticated: authenticated, Paths: []string{opts.DataDir}}
	configured, cerr := configuredTarget(opts)
	p.Configured = configured.Image
	p.Owners = fmt.Sprintf("uid %d gid %d (executor.user) for the data directory and every entry the archive gives the data directory's owner; other entries keep the archive's owners", opts.Owner.UID, opts.Owner.GID)
	if !authenticated {
		p.Owners = fmt.Sprintf("every entry of the data directory: uid %d gid %d (executor.user); the archive is not authenticated", opts.Owner.UID, opts.Owner.GID)
	}
	if m != nil && !opts.DataOnly {
		p.Paths = append(p.Paths, m.Paths...)
	}
	switch {
	case cerr != nil:
		p.refuse(cerr)
	case !authenticated && m != nil && len(m.Paths) > 0 && !opts.DataOnly:
		p.refuse(fmt.Errorf("%w: the archive is not encrypted with the box's passphrase and would replace %s beside the data directory: an unauthenticated archive restores the data directory only (--data-only)", ErrImageRefused, strings.Join(m.Paths, ", ")))
	default:
		p.planRelease(opts, m, configured)
	}
	return p
}

// refuse records err as the plan's refusal.
func (p *RestorePlan) refuse(err error) {
	p.err, p.Refused = err, err.Error()
}

// planRelease decides the release side of p: the archive's release, the
// configured one, or a refusal.
func (p *RestorePlan) planRelease(opts RestoreOptions, m *Manifest, configured release.Target) {
	if m == nil || m.Image == "" {
		if opts.AcceptImage != "" {
			p.refuse(fmt.Errorf("%w: --accept-image %s, but the archive names no image (it is restored for the configured release): drop --accept-image", ErrImageRefused, opts.AcceptImage))
		}
		return
	}
	p.Image = m.Image
	have := m.Target()
	if opts.AcceptImage != "" {
		if _, err := release.ParseImageRef(opts.AcceptImage); err != nil {
			p.refuse(fmt.Errorf("%w: --accept-image: %w", ErrInvalid, err))
			return
		}
		if !sameImage(opts.AcceptImage, m.Image) {
			p.refuse(fmt.Errorf("%w: --accept-image %s is not the archive's image %s", ErrImageRefused, opts.AcceptImage, m.Image))
			return
		}
	}
	if opts.Runtime == nil {
		p.release = &have
		return
	}
	if !p.Authenticated {
		// Its child manifest digest is the archive's word only: the
		// configured pin, or the index's child, decides (nothing to wait
		// for that the configuration does not name).
		have.ManifestDigest = ""
	}
	p.ChangesRuntime = configured.IndexDigest == "" || configured.On(m.Platform).Check(have) != nil
	if err := opts.allowed(m.Image, configured.Image); err != nil {
		// Even with the configured digests: the name is where the
		// installer connects to, as root.
		p.refuse(err)
		return
	}
	if !p.ChangesRuntime {
		// The configured release: acted on under the configured name
		// (the archive may spell it through a mirror, or through any
		// host it likes).
		have.Image = configured.Image
		if !p.Authenticated {
			have = release.Target{Image: configured.Image, IndexDigest: configured.IndexDigest, Platform: m.Platform, ManifestDigest: configured.On(m.Platform).ManifestDigest}
		}
		p.release = &have
		return
	}
	if !p.Authenticated && opts.AcceptImage == "" {
		p.refuse(fmt.Errorf("%w: the archive is not encrypted with the box's passphrase and names runtime %s, the configuration %s: an unauthenticated archive changes the runtime only when the operator names its image: %s", ErrImageRefused, m.Image, orNone(configured.Image), opts.rerun("--accept-image", m.Image)))
		return
	}
	if !p.Authenticated {
		// Accepted by name: the image, not the archive's manifest digest
		// (the installer takes the index's child for this platform).
		have = release.Target{Image: m.Image, IndexDigest: m.IndexDigest, Platform: opts.Platform}
	}
	p.release = &have
}

// allowed returns nil when the box may run image: it is Image or the
// configured one, or its repository is AllowedRepository's (nil: theirs).
func (opts RestoreOptions) allowed(image, configured string) error {
	ref, err := release.ParseImageRef(image)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrImageRefused, err)
	}
	if sameImage(image, opts.Image) || sameImage(image, configured) {
		return nil
	}
	if opts.AllowedRepository != nil && opts.AllowedRepository(ref.Name) {
		return nil
	}
	for _, c := range []string{opts.Image, configured} {
		if conf, err := release.ParseImageRef(c); err == nil && conf.Name == ref.Name && opts.AllowedRepository == nil {
			return nil
		}
	}
	return fmt.Errorf("%w: the archive names runtime %s, of repository %s, which this box does not run (only executor.image's repository and its registry mirrors): to restore it anyway, first configure that release (hbx upgrade --image %s), then restore", ErrImageRefused, image, ref.Name, image)
}

// configuredTarget is the release the configuration names: the config
// file's pin (opts.Config), else opts.Image with opts.Platform.
func configuredTarget(opts RestoreOptions) (release.Target, error) {
	img, man := opts.Image, digest.Digest("")
	if opts.Config != nil && opts.Runtime != nil {
		var err error
		if img, man, err = opts.Config.Pinned(); err != nil {
			return release.Target{}, fmt.Errorf("read the configured release: %w", err)
		}
	}
	t := release.Target{Image: img, Platform: opts.Platform, ManifestDigest: man}
	if _, d, ok := strings.Cut(img, "@"); ok {
		t.IndexDigest = digest.Digest(d)
	}
	return t, nil
}

// sameImage reports whether a and b are one image reference (parsed:
// "x:t@d" and "docker.io/library/x:t@d" are one).
func sameImage(a, b string) bool {
	ra, err1 := release.ParseImageRef(a)
	rb, err2 := release.ParseImageRef(b)
	if err1 != nil || err2 != nil {
		return a == b && a != ""
	}
	return ra == rb
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// manifest returns m with the release fields the restore acts on
// (p.release): a copy when they differ, m itself otherwise.
func (p *RestorePlan) manifest(m *Manifest) *Manifest {
	if m == nil || p.release == nil || *p.release == m.Target() {
		return m
	}
	c := *m
	c.Image, c.IndexDigest, c.Platform, c.ManifestDigest = p.release.Image, p.release.IndexDigest, p.release.Platform, p.release.ManifestDigest
	return &c
}
