package config

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestTicketsAndWebhookValidation: each bad tickets or webhook section is
// refused at load with a message naming the field.
func TestTicketsAndWebhookValidation(t *testing.T) {
	t.Parallel()
	good, err := Load(filepath.Join("testdata", "good.yml"))
	if err != nil {
		t.Fatal(err)
	}
	tickets := func() *Tickets {
		return &Tickets{Issuer: "https://itogate.example", SigningKey: TicketKey{PEMFile: "t.pem", KeyID: "t1", Algorithm: "EdDSA"}}
	}
	webhook := func() *Webhook { return &Webhook{Listen: ":9443", CertFile: "tls.crt", KeyFile: "tls.key"} }
	ok := good
	ok.Tickets, ok.Webhook = tickets(), webhook()
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid tickets and webhook refused: %v", err)
	}
	for name, tc := range map[string]struct {
		mut  func(*Config)
		want string
	}{
		"RS256 ticket key": {func(c *Config) { c.Tickets.SigningKey.Algorithm = "RS256" }, "EdDSA or ES256"},
		"no issuer":        {func(c *Config) { c.Tickets.Issuer = "" }, "tickets: issuer is required"},
		"API audience":     {func(c *Config) { c.Tickets.Audience = c.Trust.Callers.Audience }, "tickets need their own"},
		"callers' audience is the ticket default": {func(c *Config) { c.Trust.Callers.Audience = "itogate-workload" },
			`audience "itogate-workload" is also trust.callers's`},
		"webhook, no tickets":   {func(c *Config) { c.Tickets = nil }, "needs the tickets section"},
		"webhook without TLS":   {func(c *Config) { c.Webhook.KeyFile = "" }, "cert_file and key_file are required"},
		"webhook bad listen":    {func(c *Config) { c.Webhook.Listen = "9443" }, "webhook: listen"},
		"empty namespace bound": {func(c *Config) { c.Webhook.Namespaces = map[string]string{"team-a": ""} }, "empty namespace or account"},
		"API tls without a key": {func(c *Config) { c.TLS = &ListenerTLS{CertFile: "tls.crt"} }, "tls: cert_file and key_file are required"},
	} {
		c := good
		c.Tickets, c.Webhook = tickets(), webhook()
		tc.mut(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}
