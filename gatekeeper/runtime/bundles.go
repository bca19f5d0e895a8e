package runtime

import (
	"context"
	"fmt"

	"github.com/itocompute/itogate/gatekeeper/bundle"
	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/policies"
)

// startBundles loads the policy bundle and keeps polling its source until
// bg ends. The embedded bundle must load; a file or bundle server that
// fails at start leaves the service not ready (503 POLICY_NOT_READY,
// /readyz fails) while polling continues.
func (rt *Runtime) startBundles(ctx, bg context.Context) error {
	cfg, log := rt.cfg, rt.log
	opts, err := bundle.FromConfig(cfg.Policy, policies.Bundle(), cfg.Dev)
	if err != nil {
		return err
	}
	opts.Logger, opts.Observer, opts.Now = log, rt.metrics, rt.opts.BundleClock
	if rt.bundles, err = bundle.NewManager(opts); err != nil {
		return err
	}
	switch {
	case cfg.Policy.Bundle == nil && !cfg.Dev:
		log.Warn("policy: no policy.bundle configured: enforcing the UNSIGNED bundle embedded in this binary " +
			"(revision from its digest, no max age). Configure a signed bundle; see bundles/README.md.")
	case cfg.Policy.Bundle != nil && cfg.Dev && len(cfg.Policy.Bundle.VerificationKeys) == 0:
		log.Warn("policy: verifying bundles with the PUBLISHED development bundle key (fixtures/keys); production refuses it")
	}
	if cfg.Policy.Bundle != nil && cfg.Policy.Bundle.MaxAge == 0 && !cfg.Dev {
		log.Warn("policy: policy.bundle.max_age is not set: a bundle is enforced however old it is")
	}
	if err := rt.bundles.Load(ctx); err != nil {
		if cfg.Policy.Bundle == nil {
			return err
		}
		log.Error("policy: no bundle active yet: not ready, every admission is denied (POLICY_NOT_READY) until one verifies",
			"source", opts.Source.String(), "err", err.Error())
	}
	if cfg.Policy.Bundle != nil {
		rt.wg.Go(func() { rt.bundles.Run(bg) })
	}
	return nil
}

// startShadow loads policy.shadow, the candidate bundle evaluated beside the
// enforced one, with the same verification as the enforced bundle, and
// keeps polling it until bg ends. Without one rt.shadow stays nil; a
// candidate that fails to load only means no comparisons until one
// verifies.
func (rt *Runtime) startShadow(ctx, bg context.Context) error {
	cfg, log := rt.cfg, rt.log
	if cfg.Policy.Shadow == nil {
		return nil
	}
	opts, err := bundle.FromConfig(config.Policy{Bundle: cfg.Policy.Shadow, Deadline: cfg.Policy.Deadline},
		policies.Bundle(), cfg.Dev)
	if err != nil {
		return fmt.Errorf("policy.shadow: %w", err)
	}
	opts.Logger = log
	mgr, err := bundle.NewManager(opts)
	if err != nil {
		return fmt.Errorf("policy.shadow: %w", err)
	}
	if err := mgr.Load(ctx); err != nil {
		log.Warn("policy.shadow: no candidate bundle active yet", "err", err.Error())
	}
	rt.wg.Go(func() { mgr.Run(bg) })
	log.Info("policy.shadow: evaluating a candidate bundle beside the enforced one (never enforced)")
	rt.shadow = mgr.Active
	return nil
}
