// SPDX-License-Identifier: Apache-2.0

package registrytest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hermesbox/hbx/internal/testenv"
)

// Token claims the issuer writes: what the registry's token auth checks.
const (
	TokenService    = "hbx-test-registry"
	TokenIssuerName = "hbx-test-issuer"
	tokenLifetime   = 5 * time.Minute
)

// TokenIssuer is a token endpoint for distribution's token authentication
// that grants anonymous pull access to every repository and nothing else,
// as ghcr.io does for public images. See [NewTokenIssuer].
type TokenIssuer struct {
	realm    string
	certFile string
	key      *ecdsa.PrivateKey
	certDER  []byte
	srv      *http.Server

	mu       sync.Mutex
	requests []TokenRequest
}

// TokenRequest is one request the issuer answered.
type TokenRequest struct {
	Account string   // the account parameter, "" when anonymous
	Basic   bool     // the request carried HTTP basic credentials
	Service string   // the service parameter
	Scopes  []string // the scope parameters, "repository:<name>:<actions>"
	Granted []string // the access granted, "repository:<name>:pull"
}

// NewTokenIssuer starts an issuer on 127.0.0.1, stopped in t.Cleanup. It
// makes an ECDSA P-256 key and a self-signed certificate for it, valid for
// an hour, and writes the certificate as a PEM bundle into a t.TempDir()
// for the registry's rootcertbundle.
func NewTokenIssuer(t testing.TB) *TokenIssuer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("NewTokenIssuer: %v", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: TokenIssuerName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("NewTokenIssuer: create certificate: %v", err)
	}
	certFile := filepath.Join(t.TempDir(), "token-root.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatalf("NewTokenIssuer: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("NewTokenIssuer: %v", err)
	}
	ti := &TokenIssuer{realm: "http://" + l.Addr().String() + "/token", certFile: certFile, key: key, certDER: der}
	ti.srv = &http.Server{Handler: http.HandlerFunc(ti.serve), ReadHeaderTimeout: 10 * time.Second}
	go ti.srv.Serve(l)
	t.Cleanup(func() { ti.srv.Close() })
	return ti
}

// Auth returns the registry configuration that trusts this issuer.
func (ti *TokenIssuer) Auth() *testenv.TokenAuth {
	return &testenv.TokenAuth{Realm: ti.realm, Service: TokenService, Issuer: TokenIssuerName, RootCertBundle: ti.certFile}
}

// Requests returns the token requests answered so far, in order.
func (ti *TokenIssuer) Requests() []TokenRequest {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	return slices.Clone(ti.requests)
}

// serve answers GET /token?service=…&scope=repository:<name>:<actions>…
// with a token granting pull on each named repository.
func (ti *TokenIssuer) serve(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/token" || req.Method != http.MethodGet {
		http.NotFound(w, req)
		return
	}
	q := req.URL.Query()
	_, _, basic := req.BasicAuth()
	tr := TokenRequest{Account: q.Get("account"), Basic: basic, Service: q.Get("service"), Scopes: q["scope"]}
	type access struct {
		Type    string   `json:"type"`
		Name    string   `json:"name"`
		Actions []string `json:"actions"`
	}
	grants := []access{}
	for _, s := range tr.Scopes {
		typ, rest, ok1 := strings.Cut(s, ":")
		name, actions, ok2 := strings.Cut(rest, ":")
		if !ok1 || !ok2 || typ != "repository" || !slices.Contains(strings.Split(actions, ","), "pull") {
			continue
		}
		grants = append(grants, access{Type: "repository", Name: name, Actions: []string{"pull"}})
		tr.Granted = append(tr.Granted, "repository:"+name+":pull")
	}
	ti.mu.Lock()
	ti.requests = append(ti.requests, tr)
	ti.mu.Unlock()
	if tr.Service != TokenService {
		http.Error(w, `{"errors":[{"code":"DENIED","message":"unknown service"}]}`, http.StatusBadRequest)
		return
	}
	now := time.Now()
	var jti [8]byte
	rand.Read(jti[:])
	tok, err := ti.sign(map[string]any{
		"iss": TokenIssuerName, "sub": tr.Account, "aud": TokenService,
		"exp": now.Add(tokenLifetime).Unix(), "nbf": now.Add(-time.Minute).Unix(), "iat": now.Unix(),
		"jti": hex.EncodeToString(jti[:]), "access": grants,
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"token": tok, "access_token": tok, "expires_in": int(tokenLifetime.Seconds()), "issued_at": now.UTC().Format(time.RFC3339),
	})
}

// sign returns the compact JWS of claims: ES256, with the certificate in
// the x5c header, which the registry verifies against its rootcertbundle.
func (ti *TokenIssuer) sign(claims map[string]any) (string, error) {
	header, err := json.Marshal(map[string]any{
		"typ": "JWT", "alg": "ES256", "x5c": []string{base64.StdEncoding.EncodeToString(ti.certDER)},
	})
	if err != nil {
		return "", err
	}
	body, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	enc := base64.RawURLEncoding
	input := enc.EncodeToString(header) + "." + enc.EncodeToString(body)
	sum := sha256.Sum256([]byte(input))
	r, s, err := ecdsa.Sign(rand.Reader, ti.key, sum[:])
	if err != nil {
		return "", fmt.Errorf("sign token: %w", err)
	}
	// JWS ES256: r and s as fixed 32-byte big-endian integers (RFC 7518 3.4).
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return input + "." + enc.EncodeToString(sig), nil
}
