package installer

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	digest "github.com/opencontainers/go-digest"
	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/pkg/blobinfocache/none"
	"go.podman.io/image/v5/types"

	"github.com/hermesbox/hbx/internal/certsdir"
	"github.com/hermesbox/hbx/release"
)

// RegistryOptions is how hbx talks to registries.
type RegistryOptions struct {
	// InsecureHosts lists host[:port] reached over plain HTTP. Config
	// validation keeps it to loopback hosts.
	InsecureHosts []string
	// AuthFile is a containers auth.json or docker config.json; "" means
	// anonymous pulls. Bearer-token registries (ghcr.io) work either way:
	// the image library follows the WWW-Authenticate challenge to the
	// token realm, with these credentials or none.
	AuthFile string
	// CertsDir holds extra CA certificates per registry in the containers
	// certs.d layout: <CertsDir>/<host[:port]>/*.crt are trusted for that
	// registry beside the system's roots (*.cert with *.key are a client
	// certificate). "" means the system's roots only.
	CertsDir string
	// StallTimeout abandons an attempt at a request (index, manifest,
	// config or layer) that receives no byte for this long while hbx waits
	// for one; the attempt counts as failed and is retried. A slow transfer
	// that keeps moving is never abandoned. 0 disables the watchdog.
	StallTimeout time.Duration
	// Retries is how many times a request that failed transiently
	// (connection refused or reset, 5xx, truncated body, stall) is tried
	// again; 0 means one attempt. Bytes that do not match their digest or
	// size, and 4xx answers, are never retried.
	Retries int
	// Backoff is the wait before the first retry, doubled for each next
	// one up to maxBackoff; 0 means defaultBackoff.
	Backoff time.Duration
	// Mirrors are other locations of the image's repository
	// (registry.mirrors): openRegistry tries release.Locations in order,
	// the image's own name last.
	Mirrors []release.Mirror
}

// Retry waits: RegistryOptions.Backoff's default and cap.
const (
	defaultBackoff = 250 * time.Millisecond
	maxBackoff     = 8 * time.Second
)

// systemContext builds the only inputs the image library gets: nothing from
// /etc/containers, /etc/docker or the user's home unless configured.
func systemContext(ref reference.Named, opts RegistryOptions, scratch string) (*types.SystemContext, error) {
	nowhere := filepath.Join(scratch, "none") // never created
	// The library insists on reading a registries.conf when one is named:
	// give it an empty one of our own.
	conf := filepath.Join(scratch, "registries.conf")
	if err := os.WriteFile(conf, nil, 0o600); err != nil {
		return nil, fmt.Errorf("write empty registries.conf: %w", err)
	}
	sys := &types.SystemContext{
		SystemRegistriesConfPath:    conf,
		SystemRegistriesConfDirPath: nowhere,
		RegistriesDirPath:           nowhere,
		UserShortNameAliasConfPath:  nowhere,
		SignaturePolicyPath:         nowhere,
		DockerPerHostCertDirPath:    nowhere,
		DockerCertPath:              nowhere,
		BigFilesTemporaryDir:        scratch,
		DockerRegistryUserAgent:     "hbx",
		DockerDisableV1Ping:         true,
	}
	if opts.AuthFile != "" {
		sys.AuthFilePath = opts.AuthFile
		sys.LegacyFormatAuthFilePath = nowhere
	} else {
		// Anonymous: no credentials, but a bearer challenge is still
		// followed to the realm for an anonymous pull token.
		sys.DockerAuthConfig = &types.DockerAuthConfig{}
	}
	if opts.CertsDir != "" {
		// DockerCertPath, when set, is used for every host instead.
		sys.DockerPerHostCertDirPath, sys.DockerCertPath = opts.CertsDir, ""
	}
	if isInsecure(reference.Domain(ref), opts.InsecureHosts) {
		sys.DockerInsecureSkipTLSVerify = types.OptionalBoolTrue
	}
	return sys, nil
}

func isInsecure(domain string, hosts []string) bool {
	if slices.Contains(hosts, domain) {
		return true
	}
	// "127.0.0.1" also covers "127.0.0.1:5000".
	if h, _, err := net.SplitHostPort(domain); err == nil {
		return slices.Contains(hosts, h)
	}
	return false
}

// openSource opens the image by digest only (the image library refuses
// name:tag@digest, and the tag adds nothing once the digest is pinned). The
// library fetches the index while opening, so this is the index fetch, with
// the retries and stall watchdog of every other request. log receives one
// warning per retry.
func openSource(ctx context.Context, ref reference.Canonical, opts RegistryOptions, scratch string, log *slog.Logger) (*remote, error) {
	byDigest, err := reference.WithDigest(reference.TrimNamed(ref), ref.Digest())
	if err != nil {
		return nil, fmt.Errorf("build reference: %w", err)
	}
	iref, err := docker.NewReference(byDigest)
	if err != nil {
		return nil, fmt.Errorf("build reference: %w", err)
	}
	return openRef(ctx, ref, iref, "index "+ref.Digest().String(), opts, scratch, log)
}

// openTagged opens ref's repository at its tag: the image library
// fetches what the tag names now (an index or a single manifest) while
// opening, with the retries and stall watchdog of every other request.
// Nothing pins it: the caller hashes what came.
func openTagged(ctx context.Context, ref reference.NamedTagged, opts RegistryOptions, scratch string, log *slog.Logger) (*remote, error) {
	iref, err := docker.NewReference(ref)
	if err != nil {
		return nil, fmt.Errorf("build reference: %w", err)
	}
	return openRef(ctx, ref, iref, "tag "+ref.Tag(), opts, scratch, log)
}

// openRef is openSource and openTagged from the image library's
// reference iref on: the auth file and certificates checked, the system
// context built in scratch, the top document (what names) fetched.
func openRef(ctx context.Context, ref reference.Named, iref types.ImageReference, what string, opts RegistryOptions, scratch string, log *slog.Logger) (*remote, error) {
	if opts.AuthFile != "" {
		// The library treats a missing auth file as no credentials.
		if _, err := os.Stat(opts.AuthFile); err != nil {
			return nil, fmt.Errorf("registry auth file: %w", err)
		}
	}
	if err := checkCertsDir(opts.CertsDir, reference.Domain(ref)); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return nil, fmt.Errorf("create scratch directory: %w", err)
	}
	sys, err := systemContext(ref, opts, scratch)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &remote{
		ref:  iref,
		host: reference.Domain(ref),
		opts: opts,
		log:  log,
		open: func(ctx context.Context) (types.ImageSource, error) { return iref.NewImageSource(ctx, sys) },
	}
	err = r.call(ctx, what, func(ctx context.Context, src types.ImageSource) error {
		b, mt, err := src.GetManifest(ctx, nil) // loaded by NewImageSource: no request
		r.index, r.indexType = b, mt
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("fetch %s from %s: %w", what, r.host, err)
	}
	return r, nil
}

// registryHost names the registry (or local image) src reads from, for
// error messages.
func registryHost(src types.ImageSource) string {
	if r, ok := src.(*remote); ok {
		return r.host
	}
	if l, ok := src.(*localSource); ok {
		return "the " + l.kind // the error names it once, at its start
	}
	if ref := src.Reference().DockerReference(); ref != nil {
		return reference.Domain(ref)
	}
	return "registry"
}

// remote is the registry as Install sees it: a types.ImageSource whose
// manifest and blob fetches each run as attempts with their own context
// and stall watchdog, retried with backoff when they fail transiently.
//
// A failed attempt discards the library's image source it used: the library
// remembers a failed /v2/ ping forever and keeps pooled connections that
// may be dead, so the next attempt opens a fresh one (a new ping, token and
// index request). Sources are shared between concurrent fetches and closed
// when the last user is done. Safe for concurrent use.
type remote struct {
	ref       types.ImageReference
	host      string // registry host[:port], for messages
	opts      RegistryOptions
	log       *slog.Logger
	open      func(context.Context) (types.ImageSource, error)
	index     []byte // the top-level manifest, fetched when opening
	indexType string
	location  string // the repository name it reads from

	mu     sync.Mutex
	cur    *handle // nil: the next attempt opens a source
	closed bool
}

// handle is one library image source and its users.
type handle struct {
	src   types.ImageSource
	refs  int
	stale bool // close when refs drops to 0
}

var _ types.ImageSource = (*remote)(nil)

// acquire returns the current source, opening one (a network round trip
// watched by a) when there is none.
func (r *remote) acquire(a *attempt) (*handle, error) {
	r.mu.Lock()
	if h := r.cur; h != nil {
		h.refs++
		r.mu.Unlock()
		return h, nil
	}
	r.mu.Unlock()
	src, err := r.open(a.ctx)
	if err != nil {
		return nil, err
	}
	h := &handle{src: src, refs: 1}
	r.mu.Lock()
	if r.cur == nil && !r.closed {
		r.cur = h
	} else {
		h.stale = true // another attempt opened one meanwhile; use ours once
	}
	r.mu.Unlock()
	return h, nil
}

// release ends a use of h; failed says the attempt failed transiently, so
// h is not handed out again.
func (r *remote) release(h *handle, failed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if failed {
		h.stale = true
		if r.cur == h {
			r.cur = nil
		}
	}
	h.refs--
	if h.stale && h.refs == 0 {
		h.src.Close()
	}
}

// call runs fn in attempts until it succeeds, fails for good, or the
// retries are spent. what names the request in logs ("manifest sha256:…").
func (r *remote) call(ctx context.Context, what string, fn func(context.Context, types.ImageSource) error) error {
	t := retrier{r: r, what: what}
	for {
		a, err := t.start(ctx)
		if err != nil {
			return err
		}
		a.begin()
		h, err := r.acquire(a)
		if err == nil {
			err = fn(a.ctx, h.src)
		}
		a.end(err == nil)
		err = a.finish(err)
		if h != nil {
			r.release(h, err != nil && transient(err))
		}
		if err == nil {
			return nil
		}
		if err := t.fail(ctx, err); err != nil {
			return err
		}
	}
}

// Reference returns the image reference by digest.
func (r *remote) Reference() types.ImageReference { return r.ref }

// Close closes the current source; sources still in use by open blob
// readers close when those readers are closed.
func (r *remote) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if h := r.cur; h != nil {
		r.cur = nil
		h.stale = true
		if h.refs == 0 {
			return h.src.Close()
		}
	}
	return nil
}

// GetManifest returns the index fetched when opening (instanceDigest nil),
// or fetches the manifest instanceDigest names, with retries. It does not
// check the bytes against the digest; resolve does.
func (r *remote) GetManifest(ctx context.Context, instanceDigest *digest.Digest) ([]byte, string, error) {
	if instanceDigest == nil {
		return r.index, r.indexType, nil
	}
	var b []byte
	var mt string
	err := r.call(ctx, "manifest "+instanceDigest.String(), func(ctx context.Context, src types.ImageSource) (err error) {
		b, mt, err = src.GetManifest(ctx, instanceDigest)
		return err
	})
	return b, mt, err
}

// GetBlob returns the blob's bytes as one stream across attempts: when an
// attempt fails transiently mid-body, the next Read waits the backoff,
// requests the blob again and skips what was already delivered (the library
// gives no ranged GetBlob), so the consumer sees one continuous stream or
// the final error. A Content-Length that differs from info.Size is refused
// with ErrDigestMismatch. The size returned is info.Size.
func (r *remote) GetBlob(ctx context.Context, info types.BlobInfo, _ types.BlobInfoCache) (io.ReadCloser, int64, error) {
	b := &blobReader{r: r, ctx: ctx, info: info, t: retrier{r: r, what: "blob " + info.Digest.String()}}
	if err := b.connect(); err != nil {
		return nil, 0, err
	}
	return b, info.Size, nil
}

// HasThreadSafeGetBlob reports that GetBlob may be called concurrently.
func (r *remote) HasThreadSafeGetBlob() bool { return true }

// GetSignatures returns no signatures: hbx pins digests instead.
func (r *remote) GetSignatures(context.Context, *digest.Digest) ([][]byte, error) { return nil, nil }

// LayerInfosForCopy returns nil: the manifest's layers are the ones to use.
func (r *remote) LayerInfosForCopy(context.Context, *digest.Digest) ([]types.BlobInfo, error) {
	return nil, nil
}

// retrier counts the attempts at one request and waits between them.
type retrier struct {
	r    *remote
	what string
	n    int   // attempts started
	last error // why the last attempt failed
}

// start waits the backoff owed by earlier failures, then starts the next
// attempt. It fails when ctx is done.
func (t *retrier) start(ctx context.Context) (*attempt, error) {
	if t.n > 0 {
		wait := t.r.opts.Backoff
		if wait <= 0 {
			wait = defaultBackoff
		}
		wait = min(wait<<min(t.n-1, 10), maxBackoff)
		t.r.log.Warn("retrying registry request", "what", t.what, "registry", t.r.host,
			"attempt", t.n+1, "of", t.r.opts.Retries+1, "after", wait, "cause", t.last)
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (retrying after: %w)", context.Cause(ctx), t.last)
		case <-timer.C:
		}
	}
	t.n++
	return startAttempt(ctx, t.r.opts.StallTimeout), nil
}

// fail records that the current attempt failed with err. It returns the
// error to give up with, or nil when another attempt is due.
func (t *retrier) fail(ctx context.Context, err error) error {
	err = hinted(plain(err))
	if ctx.Err() != nil || !transient(err) {
		return err
	}
	t.last = err
	if t.n > t.r.opts.Retries {
		if t.n == 1 {
			return err
		}
		return fmt.Errorf("after %d attempts: %w", t.n, err)
	}
	return nil
}

// transient reports whether err may go away on its own: a stall, a
// connection refused, reset or cut short, a timeout, a 5xx, 408 or 429.
// Wrong bytes and other 4xx answers are permanent.
func transient(err error) bool {
	if errors.Is(err, ErrDigestMismatch) {
		return false
	}
	if errors.Is(err, ErrStalled) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, docker.ErrTooManyRequests) {
		return true
	}
	for _, errno := range []syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED,
		syscall.EPIPE, syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ENETDOWN} {
		if errors.Is(err, errno) {
			return true
		}
	}
	if dns, ok := errors.AsType[*net.DNSError](err); ok {
		return dns.IsTemporary || dns.IsTimeout
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return true
	}
	if he, ok := errors.AsType[docker.UnexpectedHTTPStatusError](err); ok {
		return he.StatusCode >= 500 || he.StatusCode == http.StatusRequestTimeout || he.StatusCode == http.StatusTooManyRequests
	}
	return false
}

// restatingPrefixes start the image library's wrappers that repeat what
// hbx's own messages name already (the digest, repository and registry), or
// carry its debugging data.
var restatingPrefixes = []string{"reading manifest ", "fetching manifest ", "fetching blob", "pinging container registry ",
	"(heuristic tuning data: "}

// plain drops from err's message the image library's wrappers that restate
// the request ("reading manifest sha256:… in host/repo: ", "Get \"url\": "),
// so that "fetch index sha256:… from host: authentication required" names
// each thing once. errors.Is and errors.As see the whole chain still.
func plain(err error) error {
	inner := err
	for {
		u := errors.Unwrap(inner)
		if u == nil {
			break
		}
		_, isURL := inner.(*url.Error)
		prefix, ok := strings.CutSuffix(inner.Error(), ": "+u.Error())
		if !isURL && (!ok || !slices.ContainsFunc(restatingPrefixes, func(p string) bool { return strings.HasPrefix(prefix, p) })) {
			break
		}
		inner = u
	}
	if inner == err {
		return err
	}
	return &restated{msg: inner.Error(), err: err}
}

// hinted adds what to do to an error whose fix is in the configuration: a
// plain-HTTP registry answering the HTTPS that hbx speaks by default, or a
// registry whose certificate no trusted CA signed.
func hinted(err error) error {
	if strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		return &restated{msg: err.Error() + " (a plain-HTTP registry on loopback must be listed in registry.insecure_hosts)", err: err}
	}
	var ua x509.UnknownAuthorityError
	if errors.As(err, &ua) {
		return &restated{msg: err.Error() + " (a registry with its own CA needs it in registry.certs_dir, as <certs_dir>/<host[:port]>/ca.crt)", err: err}
	}
	return err
}

// restated is an error shown with a shorter message.
type restated struct {
	msg string
	err error
}

func (e *restated) Error() string { return e.msg }
func (e *restated) Unwrap() error { return e.err }

// blobReader is a blob's body across attempts; see remote.GetBlob.
type blobReader struct {
	r    *remote
	ctx  context.Context
	info types.BlobInfo
	t    retrier
	off  int64 // bytes delivered to the consumer

	a    *attempt // the current attempt, while body is open
	h    *handle
	body io.ReadCloser
	err  error // final; every later Read returns it
}

// connect starts attempts until one has the body open at off.
func (b *blobReader) connect() error {
	for {
		a, err := b.t.start(b.ctx)
		if err != nil {
			return err
		}
		a.begin()
		h, err := b.r.acquire(a)
		var body io.ReadCloser
		var size int64
		if err == nil {
			body, size, err = h.src.GetBlob(a.ctx, b.info, none.NoCache)
		}
		a.end(err == nil)
		if err == nil && size >= 0 && b.info.Size >= 0 && size != b.info.Size {
			body.Close()
			err = fmt.Errorf("%w: registry sends %d bytes (Content-Length), descriptor says %d", ErrDigestMismatch, size, b.info.Size)
		}
		if err == nil && b.off > 0 {
			err = skip(a, body, b.off)
			if err != nil {
				body.Close()
			}
		}
		if err == nil {
			b.a, b.h, b.body = a, h, body
			return nil
		}
		err = a.finish(err)
		if h != nil {
			b.r.release(h, transient(err))
		}
		if err := b.t.fail(b.ctx, err); err != nil {
			return err
		}
	}
}

// skip reads and drops the first n bytes of body, which an earlier attempt
// already delivered.
func skip(a *attempt, body io.Reader, n int64) error {
	buf := make([]byte, 32<<10)
	for n > 0 {
		a.begin()
		k, err := body.Read(buf[:min(int64(len(buf)), n)])
		a.end(k > 0)
		n -= int64(k)
		if err == io.EOF && n > 0 {
			return fmt.Errorf("body ended %d bytes before where the last attempt stopped: %w", n, io.ErrUnexpectedEOF)
		}
		if err != nil && err != io.EOF {
			return err
		}
	}
	return nil
}

// Read reads from the current attempt, moving to the next one when it
// fails transiently.
func (b *blobReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	for {
		if b.body == nil {
			if err := b.connect(); err != nil {
				b.err = err
				return 0, err
			}
		}
		b.a.begin()
		n, err := b.body.Read(p)
		b.a.end(n > 0)
		b.off += int64(n)
		if err == io.EOF && b.off < b.info.Size {
			err = fmt.Errorf("body ended after %d of %d bytes: %w", b.off, b.info.Size, io.ErrUnexpectedEOF)
		}
		if err == nil || err == io.EOF {
			return n, err
		}
		err = b.drop(err)
		if err := b.t.fail(b.ctx, err); err != nil {
			b.err = err
			return n, err
		}
		if n > 0 {
			return n, nil
		}
	}
}

// drop closes the current attempt after it failed with err and returns
// the cause.
func (b *blobReader) drop(err error) error {
	b.body.Close()
	err = b.a.finish(err)
	b.r.release(b.h, transient(err))
	b.a, b.h, b.body = nil, nil, nil
	return err
}

// Close ends the current attempt, if any.
func (b *blobReader) Close() error {
	if b.body == nil {
		return nil
	}
	err := b.body.Close()
	b.a.finish(nil)
	b.r.release(b.h, false)
	b.a, b.h, b.body = nil, nil, nil
	return err
}

// checkCertsDir checks registry.certs_dir dir ("" means none) before a
// pull from host: certsdir.Check, the check the configuration's load
// makes too (the directory may have changed since).
func checkCertsDir(dir, host string) error { return certsdir.Check(dir, host) }
