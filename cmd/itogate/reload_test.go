//go:build unix

package main

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"maps"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
	"golang.org/x/sys/unix"

	"github.com/itocompute/itogate/gatekeeper/token"
	"github.com/itocompute/itogate/gatekeeper/verify"
	"github.com/itocompute/itogate/internal/patience"
)

// reloadFixture is a production serve laid out as the shipped Kubernetes
// install mounts it: its configuration in a ConfigMap volume
// (config/itogate.yaml → ..data/itogate.yaml → ..<version>/itogate.yaml)
// naming its key files by absolute path, and its caller keys in a Secret
// volume of the same layout (keys/callers.jwks), both of which a test swaps
// as the kubelet does. The webhook serves over TLS with the namespace
// bindings of the configuration.
type reloadFixture struct {
	t          *testing.T
	keys       string // the key volume's directory
	config     string // the configuration volume's directory
	cfg        string // the configuration, but for webhook.namespaces
	url        string
	webhookURL string
	client     *http.Client // trusts the webhook's certificate
	logs       *syncBuffer
	versions   int
}

func newReloadFixture(t *testing.T, callers map[string]crypto.Signer) *reloadFixture {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pair := func(name string) (privPath, pubPath string) {
		priv, err := token.GenerateECDSA()
		if err != nil {
			t.Fatal(err)
		}
		privPath, pubPath, err = token.WriteKeyPair(dir, name, priv)
		if err != nil {
			t.Fatal(err)
		}
		return privPath, pubPath
	}
	pub := func(name string) string { _, p := pair(name); return p }
	depositors, ent, conf, signer := pub("depositors"), pub("entitlement"), pub("confirmation"), pub("signer")
	ticketKey, _ := pair("ticket")
	f := &reloadFixture{t: t, keys: filepath.Join(dir, "keys"), config: filepath.Join(dir, "config")}
	for _, d := range []string{f.keys, f.config} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f.publish(callers)
	certFile, keyFile, pool := servingCert(t, dir)
	f.client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	listen, hook := freeAddr(t), freeAddr(t)
	f.cfg = `listen: ` + listen + `
data_dir: ` + filepath.Join(dir, "data") + `
decision_log: "off"
trust:
  callers:      {issuer: https://idp.example, audience: itogate, jwks_file: ` + filepath.Join(f.keys, "callers.jwks") + `}
  depositors:   {issuer: https://desk.example/dep, audience: itogate-deposit, pem_file: ` + depositors + `, key_id: d1, algorithm: ES256}
  entitlement:  {issuer: https://backend.example, audience: itogate, type: ito-entitlement+jwt, pem_file: ` + ent + `, key_id: e1, algorithm: ES256}
  confirmation: {issuer: https://desk.example, audience: itogate, type: ito-confirmation+jwt, pem_file: ` + conf + `, key_id: f1, algorithm: ES256}
  manifest_signers:
    - {key_id: ci, pem_file: ` + signer + `}
tickets:
  issuer: https://itogate.example
  signing_key: {pem_file: ` + ticketKey + `, key_id: t1, algorithm: ES256}
webhook:
  listen: ` + hook + `
  cert_file: ` + certFile + `
  key_file: ` + keyFile + `
`
	f.bind(map[string]string{"team-a": "acct_team_a"})
	f.logs = &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runServe(ctx, &serveOptions{configFile: filepath.Join(f.config, "itogate.yaml")}, slog.New(slog.NewJSONHandler(f.logs, nil)))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	f.url, f.webhookURL = "http://"+listen, "https://"+hook
	patience.Until(t, "serve listening", func() bool {
		select {
		case err := <-done:
			done <- err // for the clean-up
			t.Fatalf("serve ended at start-up: %v", err)
		default:
		}
		resp, err := http.Get(f.url + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return f
}

// publish writes a new version of the key volume holding callers.jwks with
// the public keys of keys (by kid), and swaps ..data to it.
func (f *reloadFixture) publish(keys map[string]crypto.Signer) { f.publishRaw(jwks(f.t, keys)) }

// publishRaw is publish with the raw bytes of callers.jwks.
func (f *reloadFixture) publishRaw(data []byte) { f.swap(f.keys, "callers.jwks", data) }

// bind writes a new version of the configuration volume whose
// webhook.namespaces are bindings (namespace → account), and swaps ..data
// to it.
func (f *reloadFixture) bind(bindings map[string]string) {
	f.t.Helper()
	cfg := f.cfg + "  namespaces:\n"
	for _, ns := range slices.Sorted(maps.Keys(bindings)) {
		cfg += "    " + ns + ": " + bindings[ns] + "\n"
	}
	f.swap(f.config, "itogate.yaml", []byte(cfg))
}

// swap writes data as name in a new version of the volume at dir and
// renames a new ..data link over the old, as the kubelet updates a
// ConfigMap or Secret volume: name → ..data/name → ..<version>/name.
func (f *reloadFixture) swap(dir, name string, data []byte) {
	t := f.t
	t.Helper()
	f.versions++
	version := fmt.Sprintf("..2026_01_01_00_00_%02d.%d", f.versions, f.versions)
	if err := os.Mkdir(filepath.Join(dir, version), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, version, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, name)); os.IsNotExist(err) {
		if err := os.Symlink("..data/"+name, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// servingCert writes a self-signed serving certificate for 127.0.0.1 and
// its key into dir, and returns their paths and a pool trusting it.
func servingCert(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "itogate-webhook"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for path, block := range map[string]*pem.Block{certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "PRIVATE KEY", Bytes: kder}} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// review posts the webhook the AdmissionReview of a CREATE of a GPU Job
// without a ticket in namespace ns, and returns the stable code leading
// its denial ("" when allowed).
func (f *reloadFixture) review(ns string) string {
	t := f.t
	t.Helper()
	obj, _ := json.Marshal(map[string]any{"apiVersion": "batch/v1", "kind": "Job",
		"metadata": map[string]any{"name": "train", "namespace": ns, "uid": "uid-job"},
		"spec": map[string]any{"parallelism": 1, "template": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "t", "image": "t",
				"resources": map[string]any{"limits": map[string]any{"nvidia.com/gpu": 8}}}}}}}})
	body, _ := json.Marshal(map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
		"request": map[string]any{"uid": "req-1", "operation": "CREATE",
			"kind":      map[string]any{"group": "batch", "version": "v1", "kind": "Job"},
			"resource":  map[string]any{"group": "batch", "version": "v1", "resource": "jobs"},
			"namespace": ns, "name": "train", "userInfo": map[string]any{"username": "alice"},
			"object": json.RawMessage(obj)}})
	resp, err := f.client.Post(f.webhookURL+"/validate", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Response struct {
			Allowed bool
			Status  struct{ Message string }
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("webhook: %d, %v", resp.StatusCode, err)
	}
	if out.Response.Allowed {
		return ""
	}
	code, _, _ := strings.Cut(out.Response.Status.Message, ":")
	return code
}

// jwks is the public JWKS of keys, each ES256 with its kid.
func jwks(t *testing.T, keys map[string]crypto.Signer) []byte {
	t.Helper()
	set := jwk.NewSet()
	for kid, priv := range keys {
		pem, err := token.MarshalPublicKeyPEM(priv.Public())
		if err != nil {
			t.Fatal(err)
		}
		one, err := verify.KeySetFromPEM(kid, "ES256", pem)
		if err != nil {
			t.Fatal(err)
		}
		k, _ := one.Key(0)
		if err := set.AddKey(k); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// caller mints a caller token of account acct_rot signed by priv as kid.
func caller(t *testing.T, priv crypto.Signer, kid string) string {
	t.Helper()
	now := time.Now()
	raw, err := token.Mint(priv, kid, "ES256", "", map[string]any{
		"iss": "https://idp.example", "aud": "itogate", "sub": "acct_rot", "account": "acct_rot",
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(10 * time.Minute).Unix(), "jti": "c-" + kid,
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// lookup asks for an admission that does not exist with bearer tok: 404
// ADMISSION_NOT_FOUND once the caller is authenticated, 401
// CALLER_UNAUTHENTICATED when the token's key is not trusted.
func (f *reloadFixture) lookup(tok string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, f.url+"/v1/admissions/no-such-key", nil)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var env struct {
		Error struct{ Code string } `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		return resp.StatusCode, "", err
	}
	return resp.StatusCode, env.Error.Code, nil
}

func (f *reloadFixture) wantLookup(tok string, status int, code string) {
	f.t.Helper()
	if s, c, err := f.lookup(tok); err != nil || s != status || c != code {
		f.t.Fatalf("lookup = %d %s %v; want %d %s\n%s", s, c, err, status, code, f.logs.String())
	}
}

// hup sends SIGHUP and waits for the n-th reload line (success or failure).
func (f *reloadFixture) hup(n int) {
	f.t.Helper()
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		f.t.Fatal(err)
	}
	patience.Until(f.t, fmt.Sprintf("reload %d logged", n), func() bool { return len(f.reloads()) >= n })
}

// reloads are the reload log lines, in order.
func (f *reloadFixture) reloads() []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(f.logs.String(), "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) == nil && strings.HasPrefix(fmt.Sprint(l["msg"]), "reload") &&
			!strings.HasPrefix(fmt.Sprint(l["msg"]), "reload: ") {
			out = append(out, l)
		}
	}
	return out
}

func (f *reloadFixture) metric(name string) string {
	f.t.Helper()
	_, body := get(f.t, f.url+"/metrics")
	return grepLines(body, name)
}

// TestServeReloadRotatesKeysOnSIGHUP: rotation without downtime. A caller
// token of key A authenticates; B is added to the JWKS (a ConfigMap-style
// swap) and SIGHUP makes B's token authenticate too; A is removed, SIGHUP,
// and A's token is refused 401 CALLER_UNAUTHENTICATED while requests with
// B's run throughout the swap, none failing. The process keeps serving:
// SIGHUP no longer stops it.
func TestServeReloadRotatesKeysOnSIGHUP(t *testing.T) {
	a, err := token.GenerateECDSA()
	if err != nil {
		t.Fatal(err)
	}
	b, err := token.GenerateECDSA()
	if err != nil {
		t.Fatal(err)
	}
	f := newReloadFixture(t, map[string]crypto.Signer{"caller-a": a})
	tokA, tokB := caller(t, a, "caller-a"), caller(t, b, "caller-b")
	f.wantLookup(tokA, http.StatusNotFound, "ADMISSION_NOT_FOUND")
	f.wantLookup(tokB, http.StatusUnauthorized, "CALLER_UNAUTHENTICATED")
	if m := f.metric("itogate_reloads_total"); !strings.Contains(m, `itogate_reloads_total{result="failure"} 0`) ||
		!strings.Contains(m, `itogate_reloads_total{result="success"} 0`) {
		t.Fatalf("reload series not at 0 from the start:\n%s", m)
	}

	f.publish(map[string]crypto.Signer{"caller-a": a, "caller-b": b})
	f.hup(1)
	f.wantLookup(tokA, http.StatusNotFound, "ADMISSION_NOT_FOUND")
	f.wantLookup(tokB, http.StatusNotFound, "ADMISSION_NOT_FOUND")

	// Requests with B's token run across the next swap; every one is
	// answered, authenticated.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var answered int
	var failures []string
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				s, c, err := f.lookup(tokB)
				mu.Lock()
				answered++
				if err != nil || s != http.StatusNotFound || c != "ADMISSION_NOT_FOUND" {
					failures = append(failures, fmt.Sprintf("%d %s %v", s, c, err))
				}
				mu.Unlock()
			}
		}()
	}
	f.publish(map[string]crypto.Signer{"caller-b": b})
	f.hup(2)
	f.wantLookup(tokA, http.StatusUnauthorized, "CALLER_UNAUTHENTICATED")
	close(stop)
	wg.Wait()
	if len(failures) > 0 || answered == 0 {
		t.Fatalf("%d of %d requests failed across the reload: %v", len(failures), answered, failures)
	}
	lines := f.reloads()
	if len(lines) != 2 || lines[1]["level"] != "INFO" || lines[1]["msg"] != "reloaded trust keys and namespace bindings" {
		t.Fatalf("reload lines: %v", lines)
	}
	ids, _ := json.Marshal(lines[1]["key_ids"])
	if !strings.Contains(string(ids), `"callers":["caller-b"]`) || !strings.Contains(string(ids), `"manifest_signers":["ci"]`) {
		t.Fatalf("the success line names key ids %s", ids)
	}
	if m := f.metric("itogate_reload"); !strings.Contains(m, `itogate_reloads_total{result="success"} 2`) ||
		!strings.Contains(m, `itogate_reloads_total{result="failure"} 0`) || !strings.Contains(m, "itogate_reload_last_success_timestamp_seconds ") {
		t.Fatalf("reload metrics:\n%s", m)
	}
}

// TestServeReloadBindsNamespacesOnSIGHUP: the configuration in a
// ConfigMap volume, as the shipped install mounts it (a directory, not a
// subPath), is read again through its ..data link on SIGHUP. A GPU Job in
// team-b, refused WORKLOAD_NAMESPACE_UNBOUND at start-up, reaches the
// ticket check (WORKLOAD_TICKET_MISSING) once the kubelet has swapped in a
// version binding team-b and the reload is done; before the signal the
// swapped file changes nothing.
func TestServeReloadBindsNamespacesOnSIGHUP(t *testing.T) {
	a, err := token.GenerateECDSA()
	if err != nil {
		t.Fatal(err)
	}
	f := newReloadFixture(t, map[string]crypto.Signer{"caller-a": a})
	if got := f.review("team-a"); got != "WORKLOAD_TICKET_MISSING" {
		t.Fatalf("team-a at start-up: %q", got)
	}
	if got := f.review("team-b"); got != "WORKLOAD_NAMESPACE_UNBOUND" {
		t.Fatalf("team-b at start-up: %q", got)
	}
	f.bind(map[string]string{"team-a": "acct_team_a", "team-b": "acct_team_b"})
	if got := f.review("team-b"); got != "WORKLOAD_NAMESPACE_UNBOUND" {
		t.Fatalf("team-b after the swap, before SIGHUP: %q", got)
	}
	f.hup(1)
	if got := f.review("team-b"); got != "WORKLOAD_TICKET_MISSING" {
		t.Fatalf("team-b after SIGHUP: %q\n%s", got, f.logs.String())
	}
	lines := f.reloads()
	if len(lines) != 1 || lines[0]["level"] != "INFO" || lines[0]["msg"] != "reloaded trust keys and namespace bindings" ||
		lines[0]["namespaces"] != float64(2) {
		t.Fatalf("reload lines: %v", lines)
	}
	f.bind(map[string]string{"team-b": "acct_team_b"})
	f.hup(2)
	if got := f.review("team-a"); got != "WORKLOAD_NAMESPACE_UNBOUND" {
		t.Fatalf("team-a after its binding was removed: %q", got)
	}
	if got := f.review("team-b"); got != "WORKLOAD_TICKET_MISSING" {
		t.Fatalf("team-b after the second reload: %q", got)
	}
}

// TestServeReloadKeepsKeysOnBadReload: a corrupt JWKS swapped in makes the
// reload fail as a whole: the old keys stay in force, one error line names
// the file (and holds none of its content), the failure is counted and the
// last-success time does not move.
func TestServeReloadKeepsKeysOnBadReload(t *testing.T) {
	a, err := token.GenerateECDSA()
	if err != nil {
		t.Fatal(err)
	}
	f := newReloadFixture(t, map[string]crypto.Signer{"caller-a": a})
	tokA := caller(t, a, "caller-a")
	before := f.metric("itogate_reload_last_success_timestamp_seconds ")
	f.publishRaw([]byte(`{"keys":[{"kty":"EC","kid":"caller-x","crv":"P-256","x":"SECRET-LOOKING-BYTES"`))
	f.hup(1)
	f.wantLookup(tokA, http.StatusNotFound, "ADMISSION_NOT_FOUND")
	lines := f.reloads()
	if len(lines) != 1 || lines[0]["level"] != "ERROR" ||
		lines[0]["msg"] != "reload failed; the previous trust keys and namespace bindings stay in force" ||
		!strings.HasPrefix(fmt.Sprint(lines[0]["err"]), "trust.callers: ") {
		t.Fatalf("reload lines: %v", lines)
	}
	if strings.Contains(f.logs.String(), "SECRET-LOOKING-BYTES") {
		t.Fatal("the log holds the file's content")
	}
	if m := f.metric("itogate_reloads_total"); !strings.Contains(m, `itogate_reloads_total{result="failure"} 1`) ||
		!strings.Contains(m, `itogate_reloads_total{result="success"} 0`) {
		t.Fatalf("reload counters:\n%s", m)
	}
	if after := f.metric("itogate_reload_last_success_timestamp_seconds "); after != before || after == "" {
		t.Fatalf("last success moved on a failed reload: %q → %q", before, after)
	}
}

// TestServeRefusesHostileKeyFiles: a FIFO and /dev/zero given as a key
// file are refused at start-up with the file named (no hang, no endless
// read); the key files in a ConfigMap-style mount (symlinks inside it) load
// (TestServeReloadRotatesKeysOnSIGHUP).
func TestServeRefusesHostileKeyFiles(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "callers.jwks")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fifo, "/dev/zero"} {
		cfg := filepath.Join(dir, "itogate.yaml")
		if err := os.WriteFile(cfg, []byte(`listen: 127.0.0.1:0
data_dir: `+filepath.Join(dir, "data")+`
trust:
  callers:      {issuer: https://idp.example, audience: itogate, jwks_file: `+path+`}
  depositors:   {issuer: https://desk.example/dep, audience: itogate-deposit, jwks_file: `+path+`}
  entitlement:  {issuer: https://backend.example, audience: itogate, type: ito-entitlement+jwt, jwks_file: `+path+`}
  confirmation: {issuer: https://desk.example, audience: itogate, type: ito-confirmation+jwt, jwks_file: `+path+`}
  manifest_signers:
    - {key_id: ci, pem_file: `+path+`}
`), 0o600); err != nil {
			t.Fatal(err)
		}
		err := runServe(context.Background(), &serveOptions{configFile: cfg}, slog.New(slog.DiscardHandler))
		want := "trust.callers: safefile: MANIFEST_NOT_REGULAR: " + path + ": is a "
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Fatalf("%s as a key file: %v; want %q…", path, err, want)
		}
	}
}
