package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority for tests: it issues certificates valid
// for an hour, for both server and client authentication.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// Pool holds the CA's certificate: the roots (and client CAs) of a
	// TLS config that trusts what it issues.
	Pool *x509.CertPool
}

// NewCA returns a fresh certificate authority.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{cert: cert, key: key, Pool: pool}
}

var serial atomic.Int64

// Issue returns a certificate for name (an IP address becomes an IP SAN).
func (ca *CA) Issue(t testing.TB, name string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(10 + serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if ip := net.ParseIP(name); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// MutualTLS returns a config that serves and dials with a certificate for
// 127.0.0.1 and requires the same of its peers: one config for every
// process of a test cluster.
func (ca *CA) MutualTLS(t testing.TB) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{ca.Issue(t, "127.0.0.1")},
		RootCAs:      ca.Pool, ClientCAs: ca.Pool, ClientAuth: tls.RequireAndVerifyClientCert,
	}
}

// WriteFiles writes, as PEM files in dir, the CA's certificate and a
// certificate it issues for name with its key: the files of the stepwell
// command's --tls flags.
func (ca *CA) WriteFiles(t testing.TB, dir, name string) (caFile, certFile, keyFile string) {
	t.Helper()
	cert := ca.Issue(t, name)
	keyDER, err := x509.MarshalECPrivateKey(cert.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	write := func(file, kind string, der []byte) string {
		path := filepath.Join(dir, file)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	return write("ca.pem", "CERTIFICATE", ca.cert.Raw), write(name+".pem", "CERTIFICATE", cert.Certificate[0]),
		write(name+"-key.pem", "EC PRIVATE KEY", keyDER)
}
