// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// TLSRegistryContext writes into dir the Docker build context of a
// registry container: FROM base, RegistryBinary serving /var/lib/registry
// over TLS on port 5000, with a server certificate for host signed by a CA
// made for this call (valid one day). The Docker suite and make
// docker-demo build it; the caller hands the returned CA (PEM, also
// written to dir/ca.crt) to hbx through registry.certs_dir. The server's
// private key is inside the context and the image: test use only.
func TLSRegistryContext(dir, host, base string) (caPEM []byte, err error) {
	caPEM, certPEM, keyPEM, err := makeCerts(host)
	if err != nil {
		return nil, err
	}
	bin, err := os.ReadFile(RegistryBinary)
	if err != nil {
		return nil, fmt.Errorf("read the registry binary (scripts/testdeps.sh installs it): %w", err)
	}
	files := []struct {
		name    string
		content []byte
		mode    os.FileMode
	}{
		{"registry", bin, 0o755},
		{"ca.crt", caPEM, 0o644},
		{"cert.pem", certPEM, 0o644},
		{"key.pem", keyPEM, 0o644},
		{"config.yml", []byte(`version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: /var/lib/registry}
http:
  addr: 0.0.0.0:5000
  tls: {certificate: /etc/registry/cert.pem, key: /etc/registry/key.pem}
`), 0o644},
		{"Dockerfile", fmt.Appendf(nil, `FROM %s
COPY registry /usr/local/bin/registry
COPY config.yml cert.pem key.pem /etc/registry/
ENTRYPOINT ["/usr/local/bin/registry", "serve", "/etc/registry/config.yml"]
`, base), 0o644},
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.name), f.content, f.mode); err != nil {
			return nil, err
		}
	}
	return caPEM, nil
}

// makeCerts returns a fresh CA and a server certificate for host signed by
// it, PEM-encoded.
func makeCerts(host string) (caPEM, certPEM, keyPEM []byte, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hbx test registry CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}
