package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
)

// validateGateway checks the endpoint picker's listener and TLS files.
func (c *Config) validateGateway() []error {
	var errs []error
	if c.EPPAddr == "" {
		return nil
	}
	if !strings.HasSuffix(c.EPPAddr, ":0") {
		for name, addr := range map[string]string{"http-addr": c.HTTPAddr, "admin-addr": c.AdminAddr, "grpc-addr": c.GRPCAddr} {
			if addr == c.EPPAddr {
				errs = append(errs, fmt.Errorf("epp-addr must differ from %s (%s)", name, addr))
			}
		}
	}
	if c.EPPMaxConns < 0 {
		errs = append(errs, fmt.Errorf("epp-max-conns must be >= 0, got %d", c.EPPMaxConns))
	}
	if c.EPPFallbackEndpoints < 0 || c.EPPFallbackEndpoints > 16 {
		errs = append(errs, fmt.Errorf("epp-fallback-endpoints must be in 0..16, got %d", c.EPPFallbackEndpoints))
	}
	if (c.EPPTLSCert == "") != (c.EPPTLSKey == "") {
		errs = append(errs, errors.New("epp-tls-cert and epp-tls-key go together"))
	}
	if c.EPPTLSClientCA != "" && c.EPPTLSCert == "" {
		errs = append(errs, errors.New("epp-tls-client-ca needs epp-tls-cert and epp-tls-key (mutual TLS is TLS first)"))
	}
	return errs
}

// EPPTLS is the endpoint picker's TLS configuration (nil: plaintext):
// the server certificate, and with --epp-tls-client-ca, client
// certificates required and verified against that bundle.
func (c *Config) EPPTLS() (*tls.Config, error) {
	if c.EPPTLSCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.EPPTLSCert, c.EPPTLSKey)
	if err != nil {
		return nil, fmt.Errorf("epp-tls-cert/epp-tls-key: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if c.EPPTLSClientCA != "" {
		pem, err := os.ReadFile(c.EPPTLSClientCA)
		if err != nil {
			return nil, fmt.Errorf("epp-tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("epp-tls-client-ca %s holds no PEM certificate", c.EPPTLSClientCA)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}
