// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RegistryBinary is the CNCF distribution registry from the Debian package
// docker-registry.
const RegistryBinary = "/usr/bin/docker-registry"

// Timeouts for the registry to start answering and to stop after SIGTERM.
const (
	registryReadyTimeout = 20 * time.Second
	registryStopTimeout  = 10 * time.Second
)

// Options adds authentication to the registry's minimal configuration.
// The zero value is an open registry. At most one of Htpasswd and Token may
// be set.
type Options struct {
	// Htpasswd is the absolute path of an htpasswd file with bcrypt
	// entries: the registry then requires HTTP basic authentication
	// (distribution's "auth: htpasswd").
	Htpasswd string
	// Token makes the registry require bearer tokens from an issuer
	// (distribution's "auth: token", the scheme of ghcr.io and Docker Hub).
	Token *TokenAuth
	// TLS makes the registry speak HTTPS only (distribution's
	// "http: tls"); nil is plain HTTP.
	TLS *TLS
}

// TLS is the registry's certificate: PEM files, absolute paths.
type TLS struct {
	Cert string // the server certificate (with its chain, if any)
	Key  string // its private key
	CA   string // the CA that signed Cert: the readiness poll trusts it
}

// TokenAuth is distribution's token authentication configuration.
type TokenAuth struct {
	Realm          string // URL of the token endpoint, sent in the WWW-Authenticate challenge
	Service        string // sent in the challenge; tokens must name it as audience
	Issuer         string // tokens must name it as issuer
	RootCertBundle string // absolute path of a PEM bundle; tokens must chain to one of its certificates
}

// Registry is a running registry started by [Start] or [StartRegistry].
type Registry struct {
	host    string // 127.0.0.1:port
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{} // closed once the process has been waited for
	auth    bool          // GET /v2/ answers 401 when ready
	tls     *TLS          // nil: plain HTTP

	stopOnce sync.Once
	stopErr  error
}

// StartRegistry starts a registry for the test, with its storage in a
// t.TempDir(), and stops it in t.Cleanup, logging the registry's output if
// the test failed. A missing RegistryBinary is reported with [Unavailable].
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	return StartRegistryWith(t, t.TempDir(), Options{})
}

// StartRegistryWith is [StartRegistry] with authentication per opts and the
// registry's files in dir, so that a test can stop an open registry it
// pushed to and serve the same storage again with authentication.
func StartRegistryWith(t testing.TB, dir string, opts Options) *Registry {
	t.Helper()
	if _, err := exec.LookPath(RegistryBinary); err != nil {
		Unavailable(t, fmt.Sprintf("registry %s is not installed: %v", RegistryBinary, err))
	}
	r, err := StartWith(dir, opts)
	if err != nil {
		t.Fatalf("StartRegistry: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Stop(); err != nil {
			t.Errorf("stop registry: %v", err)
		}
		if t.Failed() {
			tail, routine := r.logTail()
			t.Logf("registry log (%s; %d HEAD requests of blobs not pushed yet, a push's first step, left out):\n%s", r.logPath, routine, tail)
		}
	})
	return r
}

// Start starts a registry listening on 127.0.0.1 on a free port, keeping its
// configuration (config.yml), storage (storage/) and output (registry.log)
// in dir, which it creates if needed, and returns once GET /v2/ answers 200.
// The caller must call [Registry.Close].
func Start(dir string) (*Registry, error) {
	return StartWith(dir, Options{})
}

// StartWith is [Start] with authentication per opts. With authentication
// the registry is ready when GET /v2/ answers 401.
func StartWith(dir string, opts Options) (*Registry, error) {
	if opts.Htpasswd != "" && opts.Token != nil {
		return nil, errors.New("start registry: both htpasswd and token authentication")
	}
	if err := os.MkdirAll(filepath.Join(dir, "storage"), 0o755); err != nil {
		return nil, fmt.Errorf("start registry: %w", err)
	}
	var err error
	// Another process may take the free port before the registry binds it.
	for range 3 {
		var r *Registry
		r, err = start(dir, opts)
		if err == nil {
			return r, nil
		}
		if !errors.Is(err, errAddrInUse) {
			break
		}
	}
	return nil, fmt.Errorf("start registry: %w", err)
}

var errAddrInUse = errors.New("address already in use")

func start(dir string, opts Options) (*Registry, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	host := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	storage, err := filepath.Abs(filepath.Join(dir, "storage"))
	if err != nil {
		return nil, err
	}
	config := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(config, []byte(registryConfig(host, storage, opts)), 0o644); err != nil {
		return nil, fmt.Errorf("write config: %w", err)
	}
	logPath := filepath.Join(dir, "registry.log")
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create log: %w", err)
	}
	defer logFile.Close() // the child has its own descriptor

	cmd := exec.Command(RegistryBinary, "serve", config)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = registryEnv()
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("run %s: %w", RegistryBinary, err)
	}
	r := &Registry{host: host, logPath: logPath, cmd: cmd, exited: make(chan struct{}),
		auth: opts.Htpasswd != "" || opts.Token != nil, tls: opts.TLS}
	go func() {
		cmd.Wait()
		close(r.exited)
	}()
	if err := r.waitReady(); err != nil {
		r.Stop()
		return nil, err
	}
	return r, nil
}

// registryConfig is a minimal configuration: filesystem storage, deletes
// allowed, plain HTTP (or HTTPS with opts.TLS) on host, quiet logs, and the
// authentication of opts.
func registryConfig(host, storage string, opts Options) string {
	var auth string
	switch {
	case opts.Htpasswd != "":
		auth = `auth:
  htpasswd:
    realm: hbx-test
    path: ` + strconv.Quote(opts.Htpasswd) + `
`
	case opts.Token != nil:
		auth = `auth:
  token:
    realm: ` + strconv.Quote(opts.Token.Realm) + `
    service: ` + strconv.Quote(opts.Token.Service) + `
    issuer: ` + strconv.Quote(opts.Token.Issuer) + `
    rootcertbundle: ` + strconv.Quote(opts.Token.RootCertBundle) + `
`
	}
	var tls string
	if opts.TLS != nil {
		tls = `  tls:
    certificate: ` + strconv.Quote(opts.TLS.Cert) + `
    key: ` + strconv.Quote(opts.TLS.Key) + `
`
	}
	return `version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: ` + strconv.Quote(storage) + `
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: ` + host + `
  secret: hbx-test-registry
` + tls + auth
}

// registryEnv is the environment without REGISTRY_* variables, which would
// override the configuration.
func registryEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REGISTRY_") {
			env = append(env, kv)
		}
	}
	return env
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitReady polls GET /v2/ until it answers 200, the process exits or the
// timeout passes.
func (r *Registry) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), registryReadyTimeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	if r.tls != nil {
		pem, err := os.ReadFile(r.tls.CA)
		if err != nil {
			return fmt.Errorf("read registry CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("registry CA %s holds no PEM certificate", r.tls.CA)
		}
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	}
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.URL()+"/v2/", nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || (r.auth && resp.StatusCode == http.StatusUnauthorized) {
				return nil
			}
			err = fmt.Errorf("GET /v2/: %s", resp.Status)
		}
		last = err
		select {
		case <-r.exited:
			log, _ := r.logTail()
			if strings.Contains(log, "address already in use") {
				return fmt.Errorf("listen on %s: %w", r.host, errAddrInUse)
			}
			return fmt.Errorf("registry exited (%v): %s", r.cmd.ProcessState, lastLine(log))
		case <-ctx.Done():
			return fmt.Errorf("registry on %s not ready after %v: %w", r.host, registryReadyTimeout, last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Host returns the registry's address, "127.0.0.1:PORT", as used in image
// references.
func (r *Registry) Host() string { return r.host }

// URL returns the registry's base URL, "http://127.0.0.1:PORT", or
// "https://127.0.0.1:PORT" with Options.TLS.
func (r *Registry) URL() string {
	if r.tls != nil {
		return "https://" + r.host
	}
	return "http://" + r.host
}

// Stop stops the registry: SIGTERM, then SIGKILL if it is still running
// after a grace period. It waits for the process to exit, returns nil if it
// already had, and may be called any number of times.
func (r *Registry) Stop() error {
	r.stopOnce.Do(func() {
		select {
		case <-r.exited:
			return
		default:
		}
		if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			r.stopErr = fmt.Errorf("stop registry: %w", err)
		}
		select {
		case <-r.exited:
		case <-time.After(registryStopTimeout):
			r.cmd.Process.Kill()
			<-r.exited
			r.stopErr = fmt.Errorf("stop registry: killed after %v without exiting on SIGTERM", registryStopTimeout)
		}
	})
	return r.stopErr
}

// Close is [Registry.Stop], for use as an io.Closer.
func (r *Registry) Close() error { return r.Stop() }

// logTail returns the last few KiB of the registry's output, less the
// lines every push writes, and how many of those it left out
// (routineLeftOut).
func (r *Registry) logTail() (string, int) {
	data, err := os.ReadFile(r.logPath)
	if err != nil {
		return fmt.Sprintf("(read log: %v)", err), 0
	}
	return routineLeftOut(data, 8<<10)
}

// routineLeftOut returns the last max bytes of a registry's log without
// the lines every push writes (a HEAD of each blob not pushed yet,
// answered 404 "blob unknown"), and how many it left out, so that what
// the log adds to a failed test's output is what went wrong there.
func routineLeftOut(data []byte, max int) (string, int) {
	var kept bytes.Buffer
	routine := 0
	for _, l := range bytes.SplitAfter(data, []byte("\n")) {
		if bytes.Contains(l, []byte("http.request.method=HEAD")) && bytes.Contains(l, []byte(`err.code="blob unknown"`)) {
			routine++
			continue
		}
		kept.Write(l)
	}
	out := kept.Bytes()
	if len(out) > max {
		out = out[len(out)-max:]
	}
	return string(out), routine
}

func lastLine(s string) string {
	lines := bytes.Split(bytes.TrimSpace([]byte(s)), []byte("\n"))
	return string(lines[len(lines)-1])
}
