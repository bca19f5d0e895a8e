package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/safefile"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/policies"
)

type evalOptions struct {
	manifestPath     string
	entitlementFile  string
	confirmationFile string
	bundleDir        string
	now              int64
	jsonOut          bool
}

func newEvalCmd(stdout io.Writer) *cobra.Command {
	o := &evalOptions{}
	cmd := &cobra.Command{
		Use:   "eval --manifest FILE",
		Short: "Print the policy decision for a manifest, offline, with estimates and fixes",
		Long: `Evaluate the policy for a manifest without a server, a ledger or signatures:
the manifest is schema-checked, signatures are ASSUMED verified, and the
entitlement (unless --entitlement gives claims as JSON) is a completed booking
matching the manifest's hardware at 2.49 USD per GPU-hour; the confirmation
(unless --confirmation) binds the manifest digest with cost = budget ceiling.
For reviewers and manifest authors: what would the gate say, and why.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context(), stdout) },
	}
	f := cmd.Flags()
	f.StringVar(&o.manifestPath, "manifest", "", "training manifest (JSON)")
	f.StringVar(&o.entitlementFile, "entitlement", "", "entitlement claims as a JSON object (replaces the default)")
	f.StringVar(&o.confirmationFile, "confirmation", "", "confirmation claims as a JSON object (replaces the default)")
	f.StringVar(&o.bundleDir, "bundle-dir", "", "evaluate this bundle directory instead of the embedded one")
	f.Int64Var(&o.now, "now", 0, "evaluation time, unix seconds (default: now)")
	f.BoolVar(&o.jsonOut, "json", false, "print the decision as JSON")
	_ = cmd.MarkFlagRequired("manifest")
	return cmd
}

func (o *evalOptions) run(ctx context.Context, w io.Writer) error {
	raw, digest, err := safefile.ReadManifest(o.manifestPath, manifest.MaxBytes)
	if err != nil {
		return err
	}
	doc, err := manifest.Parse(raw)
	if err != nil {
		return err
	}
	now := time.Now()
	if o.now != 0 {
		now = time.Unix(o.now, 0)
	}
	ent := scenario.EntitlementClaims(doc, now)
	if o.entitlementFile != "" {
		if ent, err = readClaims(o.entitlementFile); err != nil {
			return err
		}
	}
	budget, _ := doc["budget"].(map[string]any)
	conf := map[string]any{
		"ref": "cfr_" + fmt.Sprintf("%032x", 0), "iss": "offline", "aud": "itogate", "sub": ent["sub"],
		"iat": now.Unix(), "exp": now.Unix() + 600, "jti": "offline", "act": "train.create",
		"booking_id": ent["booking_id"], "manifest_digest": digest, "cost_usd": budget["ceiling_usd"], "run_id": "",
	}
	if o.confirmationFile != "" {
		if conf, err = readClaims(o.confirmationFile); err != nil {
			return err
		}
	}
	verified := map[string]any{"verified": true, "key_id": "offline"}
	input := map[string]any{
		"now": now.Unix(),
		"request": map[string]any{"action": "train.create", "booking_id": ent["booking_id"], "idempotency_key": "offline",
			"request_digest": digest, "run_id": "", "releases_booking": false},
		"caller":          map[string]any{"sub": "offline", "account": ent["sub"], "key_id": "offline"},
		"manifest_digest": digest,
		"manifest":        doc,
		"verification": map[string]any{"caller": verified, "manifest_signature": verified,
			"entitlement": verified, "confirmation": verified},
		"entitlement":  ent,
		"confirmation": conf,
		"ledger":       map[string]any{"confirmation_consumed": false, "idempotency": map[string]any{"seen": false, "same_request": false}},
	}
	bundle := policies.Bundle()
	if o.bundleDir != "" {
		bundle = os.DirFS(o.bundleDir)
	}
	engine, err := policy.New(ctx, policy.Options{Bundle: bundle})
	if err != nil {
		return err
	}
	d, err := engine.Decide(ctx, input)
	if err != nil {
		return err
	}
	if o.jsonOut {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"manifest_digest": digest, "bundle_revision": engine.Revision(), "decision": d})
	}
	verdict := "ALLOW"
	if !d.Allow {
		verdict = "DENY"
	}
	fmt.Fprintf(w, "%s  %s  %s (bundle %s; offline: signatures assumed verified)\n\n", verdict, o.manifestPath, digest, engine.Revision())
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, group := range []struct {
		title string
		fs    []policy.Finding
	}{{"VIOLATION", d.Violations}, {"WARNING", d.Warnings}} {
		for _, f := range group.fs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", group.title, f.Code, f.Gate, f.Message)
			if f.Fix != "" {
				fmt.Fprintf(tw, "\t\tfix\t%s\n", f.Fix)
			}
		}
	}
	tw.Flush()
	if len(d.Estimates) > 0 {
		fmt.Fprintln(w, "\nESTIMATES")
		tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		printEstimates(tw, "", d.Estimates)
		tw.Flush()
	}
	if !d.Allow {
		return exitError{exitDenied}
	}
	return nil
}

func printEstimates(w io.Writer, prefix string, m map[string]any) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if sub, ok := m[k].(map[string]any); ok {
			printEstimates(w, prefix+k+".", sub)
			continue
		}
		fmt.Fprintf(w, "  %s%s\t%v\n", prefix, k, m[k])
	}
}

func readClaims(path string) (map[string]any, error) {
	raw, err := readSmall(path, 64<<10)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}
