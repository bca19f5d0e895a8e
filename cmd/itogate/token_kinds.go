package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/client"
	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/inert"
	"github.com/itocompute/itogate/gatekeeper/token"
	"github.com/itocompute/itogate/gatekeeper/trust"
	"github.com/itocompute/itogate/policies"
)

// newKindCmd is the command of one kind: no arguments, the flags every kind
// takes; the caller adds the kind's own.
func newKindCmd(o tokenRunner, common *tokenOptions, short, long string) *cobra.Command {
	cmd := &cobra.Command{Use: common.kind.name, Short: short, Long: long, Args: cobra.NoArgs, RunE: runToken(o)}
	common.addFlags(cmd.Flags())
	return cmd
}

// identityOptions mint a bearer identity: a caller (with the account it
// acts for), a depositor or a revoker.
type identityOptions struct {
	tokenOptions
	subject     string
	account     string
	withAccount bool
}

func newIdentityCmd(d tokenDeps, k tokenKind, withAccount bool, short, long string) *cobra.Command {
	o := &identityOptions{tokenOptions: newTokenOptions(d, k), withAccount: withAccount}
	cmd := newKindCmd(o, &o.tokenOptions, short, long)
	cmd.Flags().StringVar(&o.subject, "subject", "svc-dev-trainer", "sub claim: the identity")
	if withAccount {
		cmd.Flags().StringVar(&o.account, "account", "acct_dev", "account claim: the account the caller acts for")
	}
	return cmd
}

func newTokenCallerCmd(d tokenDeps) *cobra.Command {
	k := tokenKind{name: "caller", devKey: func(k keys.DevKeys) keys.Key { return k.Caller },
		iss: trust.DevCallerIssuer, aud: trust.DevAudience, ttl: time.Hour}
	return newIdentityCmd(d, k, true, "Mint a caller token: the workload creator's bearer token (ITOGATE_TOKEN)",
		`Mint a caller token: the bearer token of train and status, whose account
claim names the account the caller acts for (trust.callers verifies it).`)
}

func newTokenDepositorCmd(d tokenDeps) *cobra.Command {
	k := tokenKind{name: "depositor", devKey: func(k keys.DevKeys) keys.Key { return k.Depositor },
		iss: trust.DevDepositorIssuer, aud: trust.DevDepositAudience, ttl: time.Hour}
	return newIdentityCmd(d, k, false, "Mint a depositor token: the confirmation authority's bearer token (ITOGATE_DEPOSITOR_TOKEN)",
		`Mint a depositor token: the confirmation authority's own identity, the
bearer token of POST /v1/confirmations (trust.depositors verifies it).`)
}

func newTokenRevokerCmd(d tokenDeps) *cobra.Command {
	k := tokenKind{name: "revoker", devKey: func(k keys.DevKeys) keys.Key { return k.Revoker },
		iss: trust.DevRevokerIssuer, aud: trust.DevRevokeAudience, ttl: time.Hour}
	return newIdentityCmd(d, k, false, "Mint a revoker token: the entitlement issuer's bearer token for revocations",
		`Mint a revoker token: the entitlement issuer's identity, the bearer token
of revocations (trust.revokers verifies it).`)
}

func (o *identityOptions) Run(context.Context) error {
	claims := map[string]any{"sub": o.subject}
	if o.withAccount {
		claims["account"] = o.account
	}
	tok, err := o.mint(o.deps.now().Unix(), claims)
	if err != nil {
		return err
	}
	return o.write(tok)
}

// entitlementOptions mint the booking backend's entitlement.
type entitlementOptions struct {
	tokenOptions
	manifest                       manifestRef
	account, booking, state, price string
	eligible                       bool
	gpu, region, fabric            string
	nodes, gpusPerNode, fabricGbps int
	issuedAgo                      time.Duration
}

func newTokenEntitlementCmd(d tokenDeps) *cobra.Command {
	o := &entitlementOptions{tokenOptions: newTokenOptions(d, tokenKind{name: "entitlement",
		devKey: func(k keys.DevKeys) keys.Key { return k.Entitlement }, typ: config.TypeEntitlement,
		iss: trust.DevEntitlementIssuer, aud: trust.DevAudience, ttl: 5 * time.Minute})}
	cmd := newKindCmd(o, &o.tokenOptions, "Mint an entitlement: the booking backend's statement of a booking (ITOGATE_ENTITLEMENT)",
		`Mint an entitlement. Its topology, region and fabric default to the
--manifest's hardware; without --manifest give all of --gpu, --nodes,
--gpus-per-node, --region and --fabric.

Clock: an entitlement is fresh for 300 s after it is minted (the policy's
data.ito.config.entitlement.max_age_seconds; --ttl does not extend that).
Mint it just before the admission; the command says so on stderr.
--issued-ago back-dates iat, to try ENTITLEMENT_STALE.`)
	f := cmd.Flags()
	o.manifest.addFlag(f, "manifest whose hardware to bind")
	f.StringVar(&o.account, "account", "acct_dev", "sub claim: the booking's account")
	f.StringVar(&o.booking, "booking", "bk_dev_01", "booking_id claim")
	f.StringVar(&o.state, "booking-state", "completed", "booking_state claim")
	f.BoolVar(&o.eligible, "training-eligible", true, "training_eligible claim")
	f.StringVar(&o.price, "price", "2.49", "price_per_gpu_hour_usd claim")
	f.StringVar(&o.gpu, "gpu", "", "gpu.type (default from --manifest)")
	f.IntVar(&o.nodes, "nodes", 0, "gpu.nodes (default from --manifest)")
	f.IntVar(&o.gpusPerNode, "gpus-per-node", 0, "gpu.gpus_per_node (default from --manifest)")
	f.StringVar(&o.region, "region", "", "region (default from --manifest)")
	f.StringVar(&o.fabric, "fabric", "", "fabric.type (default from --manifest)")
	f.IntVar(&o.fabricGbps, "fabric-gbps", 200, "fabric.gbps_per_gpu")
	f.DurationVar(&o.issuedAgo, "issued-ago", 0, "back-date iat by this much (to try ENTITLEMENT_STALE)")
	return cmd
}

func (o *entitlementOptions) Complete() error {
	if err := o.tokenOptions.Complete(); err != nil {
		return err
	}
	return o.manifest.load()
}

func (o *entitlementOptions) Validate() error {
	if err := o.tokenOptions.Validate(); err != nil {
		return err
	}
	if o.manifest.section("hardware") == nil &&
		(o.gpu == "" || o.nodes == 0 || o.gpusPerNode == 0 || o.region == "" || o.fabric == "") {
		return errors.New("entitlement: give --manifest, or all of --gpu --nodes --gpus-per-node --region --fabric")
	}
	return nil
}

func (o *entitlementOptions) Run(context.Context) error {
	iat := o.deps.now().Add(-o.issuedAgo).Unix()
	hw := o.manifest.section("hardware")
	tok, err := o.mint(iat, map[string]any{
		"sub": o.account, "booking_id": o.booking, "booking_state": o.state, "training_eligible": o.eligible,
		"gpu": map[string]any{
			"type":          orStr(o.gpu, hw["gpu_type"]),
			"nodes":         orInt(o.nodes, hw["nodes"]),
			"gpus_per_node": orInt(o.gpusPerNode, hw["gpus_per_node"]),
		},
		"region":                 orStr(o.region, hw["region"]),
		"fabric":                 map[string]any{"type": orStr(o.fabric, hw["fabric"]), "gbps_per_gpu": o.fabricGbps},
		"term":                   map[string]any{"start": iat - 3600, "end": iat + 30*24*3600},
		"price_per_gpu_hour_usd": o.price,
	})
	if err != nil {
		return err
	}
	maxAge := entitlementMaxAge()
	fmt.Fprintf(o.deps.stderr, "itogate token: entitlement issued at %s; the embedded policy calls it stale %d s later "+
		"(data.ito.config.entitlement.max_age_seconds): admit before %s or mint a new one\n",
		clock(iat, time.TimeOnly), maxAge, clock(iat+maxAge, time.TimeOnly+" MST"))
	return o.write(tok)
}

// confirmationOptions mint the confirmation authority's confirmation, and
// with --deposit deposit it.
type confirmationOptions struct {
	tokenOptions
	manifest                           manifestRef
	account, booking, act, cost, runID string
	checkpointStep                     int64
	deposit                            bool
	server, depositorTokenFile         string
	depositorToken                     string // read by Complete
}

func newTokenConfirmationCmd(d tokenDeps) *cobra.Command {
	o := &confirmationOptions{tokenOptions: newTokenOptions(d, tokenKind{name: "confirmation",
		devKey: func(k keys.DevKeys) keys.Key { return k.Confirmation }, typ: config.TypeConfirmation,
		iss: trust.DevConfirmationIssuer, aud: trust.DevAudience, ttl: 10 * time.Minute})}
	cmd := newKindCmd(o, &o.tokenOptions, "Mint a confirmation: the desk's consent to one action (--deposit: deposit it, print its cfr_ reference)",
		`Mint a confirmation. It binds the --manifest's digest, and its cost_usd
defaults to the manifest's budget ceiling. A train.restart confirmation takes
--act train.restart --run-id R --checkpoint-step N; a train.cancel one
--act train.cancel --run-id R, without a manifest: its cost_usd then
defaults to `+noNewCost+` (the policy checks the cost against the estimate for
train.create only; every other action spends nothing new).

--deposit deposits it with --server and prints the confirmation_ref instead
of the token. Without --key the development depositor identity deposits it;
with --key, give the depositor's bearer token in a file
(--depositor-token-file FILE), on standard input (--depositor-token-file -)
or in $ITOGATE_DEPOSITOR_TOKEN — never as an argument, which ps shows (mint
one with "itogate token depositor --key ...").

Clock: a confirmation lives 10 minutes (--ttl); the command says when it
expires on stderr.`)
	f := cmd.Flags()
	o.manifest.addFlag(f, "manifest whose digest to bind (and budget ceiling, for the default --cost)")
	f.StringVar(&o.account, "account", "acct_dev", "sub claim: the booking's account")
	f.StringVar(&o.booking, "booking", "bk_dev_01", "booking_id claim")
	f.StringVar(&o.act, "act", "train.create", "act claim: the confirmed action")
	f.StringVar(&o.cost, "cost", "", "cost_usd claim (decimal string; default the --manifest's budget ceiling, else "+noNewCost+" for any --act but train.create, which spends nothing new)")
	f.StringVar(&o.runID, "run-id", "", "run_id claim (every action but train.create)")
	f.Int64Var(&o.checkpointStep, "checkpoint-step", -1, "checkpoint_step claim (train.restart)")
	f.BoolVar(&o.deposit, "deposit", false, "deposit with --server and print the confirmation_ref")
	f.StringVar(&o.server, "server", "", "itogate base URL for --deposit (default $ITOGATE_URL, else "+defaultServer+")")
	f.StringVar(&o.depositorTokenFile, "depositor-token-file", "",
		"--deposit with --key: file holding the depositor's bearer token, - for standard input (default $ITOGATE_DEPOSITOR_TOKEN)")
	readsFile(f, "depositor-token-file")
	return cmd
}

func (o *confirmationOptions) Complete() error {
	if err := o.tokenOptions.Complete(); err != nil {
		return err
	}
	if err := o.manifest.load(); err != nil {
		return err
	}
	if o.deposit && o.keyFile != "" {
		tok, err := o.secrets.read("depositor-token-file", o.depositorTokenFile, "ITOGATE_DEPOSITOR_TOKEN", "depositor token")
		if err != nil {
			return fmt.Errorf("--deposit with --key needs the depositor's bearer token: %w (mint one with: itogate token depositor --key …)", err)
		}
		o.depositorToken = tok
	}
	switch {
	case o.cost != "":
	case o.manifest.path != "":
		o.cost, _ = o.manifest.section("budget")["ceiling_usd"].(string)
	case o.act != string(api.TrainCreate):
		// The policy compares cost_usd with an estimate for train.create
		// only; any other action spends nothing new (a cancel ends a run).
		o.cost = noNewCost
	}
	return nil
}

// noNewCost is the default cost_usd of a confirmation of any action but
// train.create minted without a --manifest: the policy requires the claim
// (a plain decimal) and compares it with the estimate for train.create
// only.
const noNewCost = "0.00"

func (o *confirmationOptions) Validate() error {
	if err := o.tokenOptions.Validate(); err != nil {
		return err
	}
	if o.depositorTokenFile != "" && (o.keyFile == "" || !o.deposit) {
		return errors.New("--depositor-token-file goes with --deposit and --key (without --key the development depositor deposits)")
	}
	if o.cost == "" && o.manifest.path == "" {
		return errors.New("--cost is required for a train.create confirmation without a --manifest")
	}
	if o.cost == "" {
		return fmt.Errorf("--cost is required: %s has no budget.ceiling_usd", o.manifest.path)
	}
	return nil
}

func (o *confirmationOptions) Run(ctx context.Context) error {
	iat := o.deps.now().Unix()
	claims := map[string]any{"sub": o.account, "act": o.act, "booking_id": o.booking,
		"manifest_digest": o.manifest.digest, "cost_usd": o.cost}
	if o.runID != "" {
		claims["run_id"] = o.runID
	}
	if o.checkpointStep >= 0 {
		claims["checkpoint_step"] = o.checkpointStep
	}
	tok, err := o.mint(iat, claims)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.deps.stderr, "itogate token: confirmation expires at %s\n", clock(o.expiry(iat), time.TimeOnly+" MST"))
	if !o.deposit {
		return o.write(tok)
	}
	ref, err := o.depositRef(ctx, tok)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(o.deps.stdout, inert.Text(ref)) // the server's string
	return err
}

// depositRef deposits the confirmation as the depositor: --depositor-token,
// else (development keys) a one-minute development depositor token.
func (o *confirmationOptions) depositRef(ctx context.Context, confirmation []byte) (string, error) {
	bearer := o.depositorToken
	if bearer == "" {
		d := keys.Dev().Depositor
		now := o.deps.now()
		tok, err := token.Mint(d.Private, d.KeyID, d.Algorithm, "", map[string]any{
			"iss": trust.DevDepositorIssuer, "aud": trust.DevDepositAudience, "sub": "dev-desk",
			"iat": now.Unix(), "exp": now.Add(time.Minute).Unix(), "jti": newJTI(),
		})
		if err != nil {
			return "", err
		}
		bearer = string(tok)
	}
	server, err := serverURL(o.server, o.deps.getenv)
	if err != nil {
		return "", err
	}
	c, err := client.New(client.Options{BaseURL: server, Bearer: bearer, Attempts: 1})
	if err != nil {
		return "", err
	}
	return c.DepositRef(ctx, string(confirmation))
}

// evalReportOptions mint the eval authority's report of one stage's evals.
type evalReportOptions struct {
	tokenOptions
	manifest              manifestRef
	runID, stage, battery string
	results               map[string]string
	scores                map[string]any // results, parsed by Complete
}

func newTokenEvalReportCmd(d tokenDeps) *cobra.Command {
	o := &evalReportOptions{tokenOptions: newTokenOptions(d, evalsKind("eval-report"))}
	cmd := newKindCmd(o, &o.tokenOptions, "Mint an eval report: the eval authority's results for the stage a run ends",
		`Mint an eval report of the eval authority (trust.evals). It binds --run-id,
--stage (the stage it ends), the --manifest's digest and --battery, with
--result metric=value per eval.`)
	f := cmd.Flags()
	o.manifest.addFlag(f, "manifest whose digest to bind")
	f.StringVar(&o.runID, "run-id", "", "run_id claim")
	f.StringVar(&o.stage, "stage", "", "stage claim: the stage the report ends")
	f.StringVar(&o.battery, "battery", "", "battery_id claim (default the bundle's battery for --stage)")
	f.StringToStringVar(&o.results, "result", nil, "metric=value, repeatable")
	for _, name := range []string{"run-id", "stage", "manifest"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

func (o *evalReportOptions) Complete() error {
	if err := o.tokenOptions.Complete(); err != nil {
		return err
	}
	if o.battery == "" {
		o.battery = "ito-battery-" + strings.ReplaceAll(o.stage, "_", "-") + "-2026.10"
	}
	o.scores = map[string]any{}
	for metric, v := range o.results {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("--result %s: %q is not a number", metric, v)
		}
		o.scores[metric] = n
	}
	return o.manifest.load()
}

func (o *evalReportOptions) Run(context.Context) error {
	tok, err := o.mint(o.deps.now().Unix(), map[string]any{
		"sub": "dev-evals", "kind": "eval_report", "run_id": o.runID, "stage": o.stage,
		"manifest_digest": o.manifest.digest, "battery_id": o.battery, "results": o.scores,
	})
	if err != nil {
		return err
	}
	return o.write(tok)
}

// ladderDecisionOptions mint the eval authority's decision on a dataset.
type ladderDecisionOptions struct {
	tokenOptions
	datasetDigest, outcome string
}

func newTokenLadderDecisionCmd(d tokenDeps) *cobra.Command {
	o := &ladderDecisionOptions{tokenOptions: newTokenOptions(d, evalsKind("ladder-decision"))}
	cmd := newKindCmd(o, &o.tokenOptions, "Mint a ladder decision: the eval authority's proceed or stop on a dataset",
		`Mint a ladder decision of the eval authority (trust.evals): it binds
--dataset-digest and --outcome.`)
	cmd.Flags().StringVar(&o.datasetDigest, "dataset-digest", "", "dataset_digest claim: sha256 digest of the dataset")
	cmd.Flags().StringVar(&o.outcome, "outcome", "proceed", "outcome claim: proceed or stop")
	_ = cmd.MarkFlagRequired("dataset-digest")
	return cmd
}

func (o *ladderDecisionOptions) Run(context.Context) error {
	tok, err := o.mint(o.deps.now().Unix(), map[string]any{
		"sub": "dev-evals", "kind": "ladder_decision", "dataset_digest": o.datasetDigest, "outcome": o.outcome,
	})
	if err != nil {
		return err
	}
	return o.write(tok)
}

// evalsKind is a kind of the eval authority's tokens: one key, typ, issuer
// and audience for eval reports and ladder decisions.
func evalsKind(name string) tokenKind {
	return tokenKind{name: name, devKey: func(k keys.DevKeys) keys.Key { return k.Evals }, typ: config.TypeEvals,
		iss: trust.DevEvalsIssuer, aud: trust.DevEvalsAudience, ttl: 10 * time.Minute}
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

// clock formats Unix seconds as a UTC time of day.
func clock(unix int64, layout string) string { return time.Unix(unix, 0).UTC().Format(layout) }

func getenvOr(getenv func(string) string, k, def string) string {
	if v := getenv(k); v != "" {
		return v
	}
	return def
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
