// SPDX-License-Identifier: Apache-2.0

package registrytest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// TLSFiles are the PEM files WriteTLS makes, absolute paths.
type TLSFiles struct {
	CA   string // the private CA's certificate (what a client must trust)
	Cert string // the server certificate, signed by the CA
	Key  string // the server's private key, mode 0600
}

// WriteTLS makes a private CA and a server certificate it signs for hosts
// (IP literals become IP SANs, anything else DNS SANs), valid for a day,
// ECDSA P-256, and writes them into dir as ca.crt, server.crt and
// server.key. The keys are made at run time and never leave dir.
func WriteTLS(dir string, hosts ...string) (TLSFiles, error) {
	now := time.Now()
	caCert, caDER, caKey, err := newCA(now)
	if err != nil {
		return TLSFiles{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return TLSFiles{}, fmt.Errorf("generate server key: %w", err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			leaf.IPAddresses = append(leaf.IPAddresses, ip)
		} else {
			leaf.DNSNames = append(leaf.DNSNames, h)
		}
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		return TLSFiles{}, fmt.Errorf("create server certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return TLSFiles{}, fmt.Errorf("encode server key: %w", err)
	}
	f := TLSFiles{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, "server.crt"), Key: filepath.Join(dir, "server.key")}
	if err := writePEM(f.CA, "CERTIFICATE", caDER, 0o644); err != nil {
		return TLSFiles{}, err
	}
	if err := writePEM(f.Cert, "CERTIFICATE", leafDER, 0o644); err != nil {
		return TLSFiles{}, err
	}
	if err := writePEM(f.Key, "EC PRIVATE KEY", keyDER, 0o600); err != nil {
		return TLSFiles{}, err
	}
	return f, nil
}

// writePEM writes der as one PEM block of type typ to path at mode.
func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// newCA makes a self-signed ECDSA P-256 CA valid for a day from now.
func newCA(now time.Time) (*x509.Certificate, []byte, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("generate CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "hbx test registry CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	return cert, der, key, nil
}
