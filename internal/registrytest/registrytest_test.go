// SPDX-License-Identifier: Apache-2.0

package registrytest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	digest "github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/hermesbox/hbx/internal/registrytest"
	"github.com/hermesbox/hbx/internal/tartest"
	"github.com/hermesbox/hbx/internal/testenv"
)

const blobPath = "/v2/x/blobs/sha256:aaaa"

// upstream serves 64 KiB at blobPath and "other" at /v2/x/blobs/other.
func upstream(t *testing.T) (*httptest.Server, []byte) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 4<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case blobPath:
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.Write(body)
		case "/v2/x/blobs/other":
			w.Write([]byte("other"))
		case "/v2/":
			w.Write([]byte("{}"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, body
}

// fetch GETs path through p with a 250ms limit and returns what arrived.
func fetch(t *testing.T, p *registrytest.Proxy, path string) (status int, got []byte, contentLength int64, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.Host()+path, nil)
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return 0, nil, 0, err
	}
	defer resp.Body.Close()
	got, err = io.ReadAll(resp.Body)
	return resp.StatusCode, got, resp.ContentLength, err
}

// TestProxyFaults: each fault, seen from an HTTP client.
func TestProxyFaults(t *testing.T) {
	srv, body := upstream(t)
	edited := []byte("lies")
	cases := []struct {
		name      string
		rule      registrytest.Rule
		wantCode  int
		wantBody  []byte // what arrives, in full or before the error
		wantErr   error  // nil: the read completes
		wantCL    int64
		wantAtMin time.Duration
	}{
		{name: "pass through", rule: registrytest.Rule{Kind: registrytest.Ping, Fault: registrytest.Status(500)},
			wantCode: 200, wantBody: body, wantCL: int64(len(body))},
		{name: "status", rule: registrytest.Rule{Kind: registrytest.Blob, Fault: registrytest.Status(503)}, wantCode: 503},
		{name: "hang", rule: registrytest.Rule{Path: blobPath, Fault: registrytest.Hang()}, wantErr: context.DeadlineExceeded},
		{name: "stall", rule: registrytest.Rule{Path: "sha256:aaaa", Fault: registrytest.StallAfter(1000)},
			wantCode: 200, wantBody: body[:1000], wantErr: context.DeadlineExceeded, wantCL: int64(len(body))},
		{name: "reset", rule: registrytest.Rule{Path: blobPath, Fault: registrytest.ResetAfter(1000)},
			wantCode: 200, wantBody: body[:1000], wantErr: syscall.ECONNRESET, wantCL: int64(len(body))},
		{name: "cut", rule: registrytest.Rule{Path: blobPath, Fault: registrytest.CutAfter(1000)},
			wantCode: 200, wantBody: body[:1000], wantErr: io.ErrUnexpectedEOF, wantCL: int64(len(body))},
		{name: "drip", rule: registrytest.Rule{Path: blobPath, Fault: registrytest.Drip(16<<10, 20*time.Millisecond)},
			wantCode: 200, wantBody: body, wantCL: int64(len(body)), wantAtMin: 60 * time.Millisecond},
		{name: "edit", rule: registrytest.Rule{Path: blobPath, Fault: registrytest.Edit(func([]byte) []byte { return edited })},
			wantCode: 200, wantBody: edited, wantCL: int64(len(edited))},
		{name: "serve another path", rule: registrytest.Rule{Path: blobPath, Fault: registrytest.Serve("/v2/x/blobs/other")},
			wantCode: 200, wantBody: []byte("other"), wantCL: 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := registrytest.NewProxy(t, srv.URL)
			p.Add(registrytest.Rule{Path: "/nothing"}, c.rule)
			start := time.Now()
			code, got, cl, err := fetch(t, p, blobPath)
			if !errors.Is(err, c.wantErr) || code != c.wantCode {
				t.Fatalf("GET = %d, %v; want %d, %v", code, err, c.wantCode, c.wantErr)
			}
			if c.wantBody != nil && (!bytes.Equal(got, c.wantBody) || cl != c.wantCL) {
				t.Errorf("GET body = %d bytes (Content-Length %d), want %d (Content-Length %d)", len(got), cl, len(c.wantBody), c.wantCL)
			}
			if took := time.Since(start); took < c.wantAtMin {
				t.Errorf("GET took %v, want at least %v", took, c.wantAtMin)
			}
			if n := p.Count(registrytest.Blob, "sha256:aaaa"); n != 1 {
				t.Errorf("Count(Blob) = %d, want 1", n)
			}
		})
	}
}

// TestProxyTimes: a rule with Times applies that often, then requests pass.
func TestProxyTimes(t *testing.T) {
	srv, _ := upstream(t)
	p := registrytest.NewProxy(t, srv.URL)
	p.Add(registrytest.Rule{Kind: registrytest.Blob, Times: 2, Fault: registrytest.Status(502)})
	var codes []int
	for range 3 {
		code, _, _, err := fetch(t, p, blobPath)
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, code)
	}
	if want := []int{502, 502, 200}; !equalInts(codes, want) {
		t.Errorf("statuses = %v, want %v", codes, want)
	}
	p.Add(registrytest.Rule{Kind: registrytest.Blob, Fault: registrytest.Status(500)})
	p.Clear()
	if code, _, _, _ := fetch(t, p, blobPath); code != 200 {
		t.Errorf("status after Clear = %d, want 200", code)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func getStatus(t *testing.T, method, url string, setAuth func(*http.Request)) (int, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	if setAuth != nil {
		setAuth(req)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// TestTokenIssuer: the real registry with token authentication accepts the
// issuer's tokens for pulls, and refuses pushes with them.
func TestTokenIssuer(t *testing.T) {
	iss := registrytest.NewTokenIssuer(t)
	reg := testenv.StartRegistryWith(t, t.TempDir(), testenv.Options{Token: iss.Auth()})

	code, h := getStatus(t, http.MethodGet, reg.URL()+"/v2/", nil)
	ch := h.Get("WWW-Authenticate")
	if code != http.StatusUnauthorized || !strings.Contains(ch, `realm="`+iss.Auth().Realm+`"`) || !strings.Contains(ch, `service="`+registrytest.TokenService+`"`) {
		t.Fatalf("GET /v2/ = %d %q, want 401 with a Bearer challenge naming the issuer", code, ch)
	}
	resp, err := http.Get(iss.Auth().Realm + "?service=" + registrytest.TokenService + "&scope=repository:hbx/t:pull,push")
	if err != nil {
		t.Fatal(err)
	}
	var tok struct {
		Token string `json:"token"`
	}
	json.NewDecoder(resp.Body).Decode(&tok)
	resp.Body.Close()
	if tok.Token == "" {
		t.Fatalf("token endpoint = %s, no token", resp.Status)
	}
	bearer := func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok.Token) }
	for _, c := range []struct {
		method, path string
		auth         func(*http.Request)
		want         int
	}{
		{http.MethodGet, "/v2/", bearer, http.StatusOK},
		{http.MethodGet, "/v2/hbx/t/tags/list", nil, http.StatusUnauthorized},
		{http.MethodGet, "/v2/hbx/t/tags/list", bearer, http.StatusNotFound}, // allowed; no such repository
		{http.MethodPost, "/v2/hbx/t/blobs/uploads/", bearer, http.StatusUnauthorized},
	} {
		if got, _ := getStatus(t, c.method, reg.URL()+c.path, c.auth); got != c.want {
			t.Errorf("%s %s (token: %v) = %d, want %d", c.method, c.path, c.auth != nil, got, c.want)
		}
	}
	reqs := iss.Requests()
	if len(reqs) != 1 || len(reqs[0].Granted) != 1 || reqs[0].Granted[0] != "repository:hbx/t:pull" {
		t.Errorf("Requests() = %+v, want one granting pull only", reqs)
	}
}

// TestHtpasswd: the real registry with htpasswd authentication accepts the
// line's credentials, and WriteAuthFile writes them where hbx reads them.
func TestHtpasswd(t *testing.T) {
	dir := t.TempDir()
	line, err := registrytest.HtpasswdLine("hermes", "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "htpasswd"), []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := testenv.StartRegistryWith(t, dir, testenv.Options{Htpasswd: filepath.Join(dir, "htpasswd")})
	for _, c := range []struct {
		user, password string
		want           int
	}{{"hermes", "s3cret", 200}, {"hermes", "guess", 401}, {"", "", 401}} {
		got, _ := getStatus(t, http.MethodGet, reg.URL()+"/v2/", func(r *http.Request) {
			if c.user != "" {
				r.SetBasicAuth(c.user, c.password)
			}
		})
		if got != c.want {
			t.Errorf("GET /v2/ as %q/%q = %d, want %d", c.user, c.password, got, c.want)
		}
	}
	path := filepath.Join(dir, "auth.json")
	if err := registrytest.WriteAuthFile(path, reg.Host(), "hermes", "s3cret"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if want := `{"auths":{"` + reg.Host() + `":{"auth":"aGVybWVzOnMzY3JldA=="}}}`; string(b) != want {
		t.Errorf("auth file = %s, want %s", b, want)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("auth file mode = %v, want 0600", st.Mode().Perm())
	}
}

// TestImagePush: the registry serves what Push uploaded, under the same
// digests.
func TestImagePush(t *testing.T) {
	reg := testenv.StartRegistry(t)
	img, err := registrytest.NewImage(registrytest.PlatformImage{
		Platform: v1.Platform{OS: "linux", Architecture: "arm64"},
		Layers:   [][]byte{tartest.New().File("hello", "hi\n", 0o644).Bytes()},
		Config:   v1.ImageConfig{Cmd: []string{"/hello"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := img.Push(context.Background(), reg.URL(), "hbx/push", "v1"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		path string
		want digest.Digest
	}{
		{"/v2/hbx/push/manifests/v1", img.Index},
		{"/v2/hbx/push/manifests/" + img.Manifests["linux/arm64"].String(), img.Manifests["linux/arm64"]},
		{"/v2/hbx/push/blobs/" + img.Configs["linux/arm64"].String(), img.Configs["linux/arm64"]},
		{"/v2/hbx/push/blobs/" + img.Layers["linux/arm64"][0].Digest.String(), img.Layers["linux/arm64"][0].Digest},
	} {
		req, _ := http.NewRequest(http.MethodGet, reg.URL()+p.path, nil)
		req.Header.Set("Accept", v1.MediaTypeImageIndex+", "+v1.MediaTypeImageManifest)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := digest.FromBytes(b); resp.StatusCode != 200 || got != p.want || !bytes.Equal(b, img.Blob(p.want)) {
			t.Errorf("GET %s = %s, %s; want %s", p.path, resp.Status, got, p.want)
		}
	}
}
