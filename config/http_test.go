package config

import (
	"strings"
	"testing"
	"time"
)

func TestHTTPSecurityFlags(t *testing.T) {
	env := map[string]string{
		"KVROUTER_ADMIN_TOKEN_FILE":  "/etc/kvrouter/admin/token",
		"KVROUTER_WORKER_URL_ALLOW":  "10.0.0.0/8,*.svc.cluster.local",
		"KVROUTER_HTTP_IDLE_TIMEOUT": "45s",
	}
	cfg, err := Load([]string{"--admin-addr", "127.0.0.1:9090", "--api-token-file", "/run/api", "--http-max-conns", "100",
		"--http-write-timeout", "5s"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AdminAddr != "127.0.0.1:9090" || cfg.AdminTokenFile != "/etc/kvrouter/admin/token" || cfg.APITokenFile != "/run/api" ||
		strings.Join(cfg.WorkerURLAllow, " ") != "10.0.0.0/8 *.svc.cluster.local" || cfg.HTTPIdleTimeout != 45*time.Second ||
		cfg.HTTPMaxConns != 100 || cfg.HTTPWriteTimeout != 5*time.Second {
		t.Fatalf("flags/env not applied: %+v", cfg)
	}
	d := Default()
	if strings.Join(d.WorkerURLAllow, ",") != "private" || d.HTTPReadHeaderTimeout != 10*time.Second || d.HTTPReadTimeout != time.Minute ||
		d.HTTPWriteTimeout != 30*time.Second || d.HTTPIdleTimeout != 2*time.Minute || d.HTTPMaxConns != 8192 || d.AdminAddr != "" {
		t.Fatalf("defaults: %+v", d)
	}
}

func TestHTTPSecurityValidation(t *testing.T) {
	none := func(string) string { return "" }
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--http-addr", "127.0.0.1:8080", "--admin-addr", "127.0.0.1:8080"}, "admin-addr must differ"},
		{[]string{"--worker-url-allow", "10.0.0.0/40"}, "worker-url-allow"},
		{[]string{"--worker-url-allow", "bad host"}, "worker-url-allow"},
		{[]string{"--http-read-timeout", "-1s"}, "http-read-timeout"},
		{[]string{"--http-read-header-timeout", "0"}, "http-read-header-timeout must be > 0"},
		{[]string{"--http-idle-timeout", "0"}, "http-idle-timeout must be > 0"},
		{[]string{"--http-max-conns", "-1"}, "http-max-conns"},
	} {
		_, err := Load(tt.args, none)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want an error about %q", tt.args, err, tt.want)
		}
	}
	// 0 disables the read and write timeouts and the cap.
	if _, err := Load([]string{"--http-read-timeout", "0", "--http-write-timeout", "0", "--http-max-conns", "0"}, none); err != nil {
		t.Fatal(err)
	}
}
