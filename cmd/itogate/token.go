package main

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/client"
	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/safefile"
	"github.com/itocompute/itogate/gatekeeper/token"
	"github.com/itocompute/itogate/gatekeeper/trust"
	"github.com/itocompute/itogate/gatekeeper/verify"
	"github.com/itocompute/itogate/policies"
)

// tokenOptions are the claims a test token can carry. Without --key the
// published development keys sign them (development mode only); with --key,
// --kid, --issuer and --audience an operator's own key signs them, to try a
// production itogate end to end before real issuers are wired up.
type tokenOptions struct {
	keyFile, keyID, issuer, audience, depositorToken          string
	account, subject, booking, manifestPath, act, cost, runID string
	state, price, fabricType, region, gpu                     string
	nodes, gpusPerNode                                        int
	fabricGbps                                                int
	eligible                                                  bool
	ttl, iatOffset                                            time.Duration
	deposit                                                   bool
	server                                                    string
	// eval authority tokens and restart confirmations
	stage, battery, datasetDigest, outcome string
	results                                map[string]string
	checkpointStep                         int64
}

func newTokenCmd(stdout io.Writer) *cobra.Command {
	o := &tokenOptions{}
	cmd := &cobra.Command{
		Use:   "token (caller|depositor|revoker|entitlement|confirmation|eval-report|ladder-decision)",
		Short: "Mint a test token: development keys, or your own with --key/--kid",
		Long: `Mint a caller, depositor, revoker, entitlement, confirmation, eval-report or
ladder-decision token and print it.

Without --key it is signed with the published development keys of
fixtures/keys (development mode only: a server started with --config refuses
them). With --key PEM --kid ID --issuer ISS --audience AUD it is signed with
your own PKCS#8 private key (as "itogate keygen" writes it; the algorithm
follows the key: ES256 for ECDSA P-256, EdDSA for Ed25519), for the key set
that trust.<purpose> of your configuration verifies.

Topology, region and fabric of an entitlement default to the --manifest's
hardware; a confirmation binds the --manifest's digest. "token confirmation
--deposit" deposits it and prints the confirmation_ref instead of the token
(with --key, give the depositor's bearer token in --depositor-token).

Clock: an entitlement is fresh for 300 s after it is minted (the policy's
data.ito.config.entitlement.max_age_seconds; --ttl does not extend that),
a confirmation lives 10 minutes. Mint them just before the admission; the
command says so on stderr.

An eval-report (the eval authority, trust.evals) binds --run-id, --stage (the
stage it ends), the --manifest's digest and --battery, with --result
metric=value per eval; a ladder-decision binds --dataset-digest and
--outcome. A train.restart confirmation takes --checkpoint-step.`,
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"caller", "depositor", "revoker", "entitlement", "confirmation", "eval-report", "ladder-decision"},
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), stdout, cmd.ErrOrStderr(), args[0])
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.keyFile, "key", "", "your own private key PEM (PKCS#8) instead of the development key; needs --kid, --issuer, --audience")
	f.StringVar(&o.keyID, "kid", "", "key id written into the token header (the key_id of the trust entry)")
	f.StringVar(&o.issuer, "issuer", "", "iss claim (with --key: the trust entry's issuer)")
	f.StringVar(&o.audience, "audience", "", "aud claim (with --key: the trust entry's audience)")
	f.StringVar(&o.depositorToken, "depositor-token", os.Getenv("ITOGATE_DEPOSITOR_TOKEN"), "--deposit with --key: the depositor's bearer token (default $ITOGATE_DEPOSITOR_TOKEN)")
	f.StringVar(&o.account, "account", "acct_dev", "account (sub of entitlement/confirmation, account claim of caller)")
	f.StringVar(&o.subject, "subject", "svc-dev-trainer", "caller/depositor/revoker subject")
	f.StringVar(&o.booking, "booking", "bk_dev_01", "booking id")
	f.StringVar(&o.manifestPath, "manifest", "", "manifest whose hardware (entitlement) or digest (confirmation) to bind")
	f.StringVar(&o.act, "act", "train.create", "confirmation action")
	f.StringVar(&o.cost, "cost", "", "confirmation cost_usd (decimal string; default the manifest's budget ceiling)")
	f.StringVar(&o.runID, "run-id", "", "run_id of a confirmation (every action but train.create) or an eval report")
	f.Int64Var(&o.checkpointStep, "checkpoint-step", -1, "confirmation checkpoint_step (train.restart)")
	f.StringVar(&o.stage, "stage", "", "eval-report: the stage the report ends")
	f.StringVar(&o.battery, "battery", "", "eval-report: battery id (default the bundle's id for --stage)")
	f.StringToStringVar(&o.results, "result", nil, "eval-report: metric=value, repeatable")
	f.StringVar(&o.datasetDigest, "dataset-digest", "", "ladder-decision: sha256 digest of the dataset")
	f.StringVar(&o.outcome, "outcome", "proceed", "ladder-decision: proceed or stop")
	f.StringVar(&o.state, "booking-state", "completed", "entitlement booking_state")
	f.BoolVar(&o.eligible, "training-eligible", true, "entitlement training_eligible")
	f.StringVar(&o.price, "price", "2.49", "entitlement price_per_gpu_hour_usd")
	f.StringVar(&o.gpu, "gpu", "", "entitlement gpu.type (default from --manifest)")
	f.IntVar(&o.nodes, "nodes", 0, "entitlement gpu.nodes (default from --manifest)")
	f.IntVar(&o.gpusPerNode, "gpus-per-node", 0, "entitlement gpu.gpus_per_node (default from --manifest)")
	f.StringVar(&o.region, "region", "", "entitlement region (default from --manifest)")
	f.StringVar(&o.fabricType, "fabric", "", "entitlement fabric.type (default from --manifest)")
	f.IntVar(&o.fabricGbps, "fabric-gbps", 200, "entitlement fabric.gbps_per_gpu")
	f.DurationVar(&o.ttl, "ttl", 0, "lifetime (default: caller 1h, entitlement 5m, confirmation 10m)")
	f.DurationVar(&o.iatOffset, "issued-ago", 0, "back-date iat by this much (to try ENTITLEMENT_STALE)")
	f.BoolVar(&o.deposit, "deposit", false, "confirmation: deposit with --server and print the confirmation_ref")
	f.StringVar(&o.server, "server", envOr("ITOGATE_URL", "http://127.0.0.1:8443"), "itogate base URL for --deposit")
	return cmd
}

// signingKey is the key a token is signed with.
type signingKey struct {
	priv     crypto.Signer
	kid, alg string
}

// ownKey reads --key and checks the flags that must come with it.
func (o *tokenOptions) ownKey() (*signingKey, error) {
	if o.keyFile == "" {
		if o.keyID != "" || o.issuer != "" || o.audience != "" {
			return nil, errors.New("--kid, --issuer and --audience go with --key (without --key the development key and its issuer and audience are used)")
		}
		return nil, nil
	}
	if o.keyID == "" || o.issuer == "" || o.audience == "" {
		return nil, errors.New("--key needs --kid, --issuer and --audience: the key_id, issuer and audience of the trust entry that verifies this token")
	}
	raw, err := os.ReadFile(o.keyFile)
	if err != nil {
		return nil, fmt.Errorf("--key: %w", err)
	}
	priv, err := verify.LoadPrivateKeyPEM(raw)
	if err != nil {
		return nil, fmt.Errorf("--key %s: %w", o.keyFile, err)
	}
	var alg string
	switch k := priv.(type) {
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return nil, fmt.Errorf("--key %s: only ECDSA P-256 (ES256) and Ed25519 (EdDSA) keys are supported", o.keyFile)
		}
		alg = "ES256"
	case ed25519.PrivateKey:
		alg = "EdDSA"
	default:
		return nil, fmt.Errorf("--key %s: only ECDSA P-256 (ES256) and Ed25519 (EdDSA) keys are supported", o.keyFile)
	}
	return &signingKey{priv: priv, kid: o.keyID, alg: alg}, nil
}

func (o *tokenOptions) run(ctx context.Context, w, stderr io.Writer, kind string) error {
	own, err := o.ownKey()
	if err != nil {
		return err
	}
	if own != nil && o.deposit && o.depositorToken == "" {
		return errors.New("--deposit with --key needs the depositor's bearer token: --depositor-token or ITOGATE_DEPOSITOR_TOKEN (mint one with: itogate token depositor --key …)")
	}
	d := keys.Dev()
	now := time.Now().Add(-o.iatOffset).Unix()
	claims := map[string]any{"iat": now, "jti": newJTI()}
	var (
		k   keys.Key
		typ string
		ttl = o.ttl
	)
	var doc map[string]any
	var digest string
	if o.manifestPath != "" {
		raw, dg, err := safefile.ReadManifest(o.manifestPath, manifest.MaxBytes)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			return fmt.Errorf("manifest: %w", err)
		}
		digest = dg
	}
	switch kind {
	case "caller":
		k, ttl = d.Caller, def(ttl, time.Hour)
		claims["iss"], claims["aud"], claims["sub"], claims["account"] = trust.DevCallerIssuer, trust.DevAudience, o.subject, o.account
	case "depositor":
		k, ttl = d.Depositor, def(ttl, time.Hour)
		claims["iss"], claims["aud"], claims["sub"] = trust.DevDepositorIssuer, trust.DevDepositAudience, o.subject
	case "revoker":
		k, ttl = d.Revoker, def(ttl, time.Hour)
		claims["iss"], claims["aud"], claims["sub"] = trust.DevRevokerIssuer, trust.DevRevokeAudience, o.subject
	case "entitlement":
		k, typ, ttl = d.Entitlement, config.TypeEntitlement, def(ttl, 5*time.Minute)
		hw, _ := doc["hardware"].(map[string]any)
		if hw == nil && (o.gpu == "" || o.nodes == 0 || o.gpusPerNode == 0 || o.region == "" || o.fabricType == "") {
			return errors.New("entitlement: give --manifest, or all of --gpu --nodes --gpus-per-node --region --fabric")
		}
		claims["iss"], claims["aud"], claims["sub"] = trust.DevEntitlementIssuer, trust.DevAudience, o.account
		claims["booking_id"], claims["booking_state"], claims["training_eligible"] = o.booking, o.state, o.eligible
		claims["gpu"] = map[string]any{
			"type":          orStr(o.gpu, hw["gpu_type"]),
			"nodes":         orInt(o.nodes, hw["nodes"]),
			"gpus_per_node": orInt(o.gpusPerNode, hw["gpus_per_node"]),
		}
		claims["region"] = orStr(o.region, hw["region"])
		claims["fabric"] = map[string]any{"type": orStr(o.fabricType, hw["fabric"]), "gbps_per_gpu": o.fabricGbps}
		claims["term"] = map[string]any{"start": now - 3600, "end": now + 30*24*3600}
		claims["price_per_gpu_hour_usd"] = o.price
	case "confirmation":
		k, typ, ttl = d.Confirmation, config.TypeConfirmation, def(ttl, 10*time.Minute)
		claims["iss"], claims["aud"], claims["sub"] = trust.DevConfirmationIssuer, trust.DevAudience, o.account
		claims["act"], claims["booking_id"], claims["manifest_digest"] = o.act, o.booking, digest
		cost := o.cost
		if cost == "" {
			b, _ := doc["budget"].(map[string]any)
			cost, _ = b["ceiling_usd"].(string)
		}
		if cost == "" {
			return errors.New("--cost is required without a --manifest")
		}
		claims["cost_usd"] = cost
		if o.runID != "" {
			claims["run_id"] = o.runID
		}
		if o.checkpointStep >= 0 {
			claims["checkpoint_step"] = o.checkpointStep
		}
	case "eval-report":
		k, typ, ttl = d.Evals, config.TypeEvals, def(ttl, 10*time.Minute)
		if o.runID == "" || o.stage == "" || digest == "" {
			return errors.New("eval-report: --run-id, --stage and --manifest are required")
		}
		results := map[string]any{}
		for metric, v := range o.results {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return fmt.Errorf("--result %s: %q is not a number", metric, v)
			}
			results[metric] = n
		}
		battery := o.battery
		if battery == "" {
			battery = "ito-battery-" + strings.ReplaceAll(o.stage, "_", "-") + "-2026.10"
		}
		claims["iss"], claims["aud"], claims["sub"] = trust.DevEvalsIssuer, trust.DevEvalsAudience, "dev-evals"
		claims["kind"], claims["run_id"], claims["stage"] = "eval_report", o.runID, o.stage
		claims["manifest_digest"], claims["battery_id"], claims["results"] = digest, battery, results
	case "ladder-decision":
		k, typ, ttl = d.Evals, config.TypeEvals, def(ttl, 10*time.Minute)
		if o.datasetDigest == "" {
			return errors.New("ladder-decision: --dataset-digest is required")
		}
		claims["iss"], claims["aud"], claims["sub"] = trust.DevEvalsIssuer, trust.DevEvalsAudience, "dev-evals"
		claims["kind"], claims["dataset_digest"], claims["outcome"] = "ladder_decision", o.datasetDigest, o.outcome
	default:
		return fmt.Errorf("unknown token kind %q", kind)
	}
	claims["exp"] = now + int64(ttl/time.Second)
	sk := signingKey{priv: k.Private, kid: k.KeyID, alg: k.Algorithm}
	if own != nil {
		sk = *own
		claims["iss"], claims["aud"] = o.issuer, o.audience
	}
	tok, err := token.Mint(sk.priv, sk.kid, sk.alg, typ, claims)
	if err != nil {
		return err
	}
	switch kind {
	case "entitlement":
		maxAge := entitlementMaxAge()
		fmt.Fprintf(stderr, "itogate token: entitlement issued at %s; the embedded policy calls it stale %d s later "+
			"(data.ito.config.entitlement.max_age_seconds): admit before %s or mint a new one\n",
			time.Unix(now, 0).UTC().Format(time.TimeOnly), maxAge, time.Unix(now+maxAge, 0).UTC().Format(time.TimeOnly+" MST"))
	case "confirmation":
		fmt.Fprintf(stderr, "itogate token: confirmation expires at %s\n", time.Unix(now+int64(ttl/time.Second), 0).UTC().Format(time.TimeOnly+" MST"))
	}
	if !o.deposit {
		fmt.Fprintln(w, string(tok))
		return nil
	}
	if kind != "confirmation" {
		return errors.New("--deposit is only for confirmation tokens")
	}
	bearer := o.depositorToken
	if bearer == "" {
		depTok, err := token.Mint(d.Depositor.Private, d.Depositor.KeyID, d.Depositor.Algorithm, "", map[string]any{
			"iss": trust.DevDepositorIssuer, "aud": trust.DevDepositAudience, "sub": "dev-desk",
			"iat": time.Now().Unix(), "exp": time.Now().Add(time.Minute).Unix(), "jti": newJTI(),
		})
		if err != nil {
			return err
		}
		bearer = string(depTok)
	}
	c, err := client.New(client.Options{BaseURL: o.server, Bearer: bearer, Attempts: 1})
	if err != nil {
		return err
	}
	ref, err := c.DepositRef(ctx, string(tok))
	if err != nil {
		return err
	}
	fmt.Fprintln(w, ref)
	return nil
}

// entitlementMaxAge is the embedded policy's freshness bound for
// entitlements, in seconds (300 if the data cannot be read).
func entitlementMaxAge() int64 {
	raw, err := fs.ReadFile(policies.Bundle(), "ito/config/data.json")
	if err != nil {
		return 300
	}
	var cfg struct {
		Entitlement struct {
			MaxAgeSeconds int64 `json:"max_age_seconds"`
		} `json:"entitlement"`
	}
	if json.Unmarshal(raw, &cfg) != nil || cfg.Entitlement.MaxAgeSeconds <= 0 {
		return 300
	}
	return cfg.Entitlement.MaxAgeSeconds
}

func newJTI() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func def(d, fallback time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return fallback
}

func orStr(flag string, fromManifest any) any {
	if flag != "" {
		return flag
	}
	return fromManifest
}

func orInt(flag int, fromManifest any) any {
	if flag != 0 {
		return flag
	}
	return fromManifest
}
