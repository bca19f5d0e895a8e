package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/client"
	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/safefile"
	"github.com/itocompute/itogate/gatekeeper/token"
	"github.com/itocompute/itogate/gatekeeper/trust"
)

// tokenOptions are the claims a development token can carry. Only the
// published development keys sign them: these tokens are for development
// mode and tests, never for a production itogate.
type tokenOptions struct {
	account, subject, booking, manifestPath, act, cost, runID string
	state, price, fabricType, region, gpu                     string
	nodes, gpusPerNode                                        int
	fabricGbps                                                int
	eligible                                                  bool
	ttl, iatOffset                                            time.Duration
	deposit                                                   bool
	server                                                    string
}

func newTokenCmd(stdout io.Writer) *cobra.Command {
	o := &tokenOptions{}
	cmd := &cobra.Command{
		Use:   "token (caller|depositor|entitlement|confirmation)",
		Short: "Mint a DEVELOPMENT token signed with the published keys in fixtures/keys",
		Long: `Mint a development token signed with the published development keys; a server
started with --config refuses them. Topology, region and fabric of an
entitlement default to the --manifest's hardware; a confirmation binds the
--manifest's digest. "token confirmation --deposit" deposits it with the
development server and prints the confirmation_ref instead of the token.`,
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"caller", "depositor", "entitlement", "confirmation"},
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), stdout, args[0])
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.account, "account", "acct_dev", "account (sub of entitlement/confirmation, account claim of caller)")
	f.StringVar(&o.subject, "subject", "svc-dev-trainer", "caller/depositor subject")
	f.StringVar(&o.booking, "booking", "bk_dev_01", "booking id")
	f.StringVar(&o.manifestPath, "manifest", "", "manifest whose hardware (entitlement) or digest (confirmation) to bind")
	f.StringVar(&o.act, "act", "train.create", "confirmation action")
	f.StringVar(&o.cost, "cost", "", "confirmation cost_usd (decimal string; default the manifest's budget ceiling)")
	f.StringVar(&o.runID, "run-id", "", "confirmation run_id (train.cancel, train.cleanup)")
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

func (o *tokenOptions) run(ctx context.Context, w io.Writer, kind string) error {
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
	default:
		return fmt.Errorf("unknown token kind %q", kind)
	}
	claims["exp"] = now + int64(ttl/time.Second)
	tok, err := token.Mint(k.Private, k.KeyID, k.Algorithm, typ, claims)
	if err != nil {
		return err
	}
	if !o.deposit {
		fmt.Fprintln(w, string(tok))
		return nil
	}
	if kind != "confirmation" {
		return errors.New("--deposit is only for confirmation tokens")
	}
	depTok, err := token.Mint(d.Depositor.Private, d.Depositor.KeyID, d.Depositor.Algorithm, "", map[string]any{
		"iss": trust.DevDepositorIssuer, "aud": trust.DevDepositAudience, "sub": "dev-desk",
		"iat": time.Now().Unix(), "exp": time.Now().Add(time.Minute).Unix(), "jti": newJTI(),
	})
	if err != nil {
		return err
	}
	c, err := client.New(client.Options{BaseURL: o.server, Bearer: string(depTok), Attempts: 1})
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
