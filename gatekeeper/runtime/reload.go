package runtime

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/safefile"
	"github.com/itocompute/itogate/gatekeeper/trust"
)

// readAttempts bounds how often a set of files is read again because a
// Kubernetes volume was swapped while it was read (safefile.Consistent).
const readAttempts = 3

// generation is one load of the reloadable configuration — the trust keys,
// the tickets section and the webhook's namespace bindings — and the
// handlers built over it. A request is answered by the generation current
// when it arrived, start to end.
type generation struct {
	// cfg is the configuration this generation was built from: the one
	// the runtime was opened with, with this load's trust, tickets and
	// webhook.namespaces.
	cfg     config.Config
	trust   *trust.Set
	api     http.Handler
	webhook http.Handler // nil without a webhook section
}

// Reload loads the trust keys (every purpose of the trust section and the
// manifest signers), the ticket keys (the tickets section) and the
// webhook's namespace bindings (webhook.namespaces) again and swaps them in
// whole: requests that arrived before keep the keys and bindings they
// started with, later ones get the new. load returns the configuration to
// take them from, reading every file it reads with the read it is given
// (`itogate serve` reads its --config file again); Reload reads the key
// files named there the same way, all of it again should a Kubernetes
// volume be swapped while it is read.
//
// A reload is all or nothing. Any failure — a file that does not load, a
// malformed key set, a development key, a key shared between purposes, a
// configuration that does not validate, a webhook section removed — keeps
// the current set; Reload then logs one line at error level naming what
// failed (never a key or token), counts itogate_reloads_total{result="failure"}
// and returns the error. A success counts result="success", sets
// itogate_reload_last_success_timestamp_seconds and logs one line with the
// key ids of each purpose and the number of bound namespaces.
//
// Nothing else is reloaded: a change to any other section is logged as a
// warning and takes effect at the next restart, and the webhook's presence
// is fixed at start-up. The policy bundle is never reloaded here: it has its
// own signed, polled activation.
func (rt *Runtime) Reload(load func(read config.ReadFunc) (config.Config, error)) error {
	rt.reloadMu.Lock()
	defer rt.reloadMu.Unlock()
	cur := rt.gen.Load()
	g, ignored, err := rt.loadGeneration(cur, load)
	if err != nil {
		rt.metrics.Reload("failure", time.Now())
		rt.log.Error("reload failed; the previous trust keys and namespace bindings stay in force", "err", err)
		return err
	}
	rt.gen.Store(g)
	rt.metrics.Reload("success", time.Now())
	var namespaces int
	if g.cfg.Webhook != nil {
		namespaces = len(g.cfg.Webhook.Namespaces)
	}
	rt.log.Info("reloaded trust keys and namespace bindings", "key_ids", g.trust.KeyIDs(), "namespaces", namespaces)
	if len(ignored) > 0 {
		rt.log.Warn("reload: these sections changed and take effect only at a restart", "sections", ignored)
	}
	return nil
}

// loadGeneration builds the next generation after cur from what load
// returns, and names the changed sections it does not take.
func (rt *Runtime) loadGeneration(cur *generation, load func(read config.ReadFunc) (config.Config, error)) (*generation, []string, error) {
	var (
		next    config.Config
		ts      *trust.Set
		ignored []string
	)
	err := safefile.Consistent(readAttempts, func(read config.ReadFunc) error {
		loaded, err := load(read)
		if err != nil {
			return err
		}
		if next, ignored, err = reloadable(cur.cfg, loaded); err != nil {
			return err
		}
		ts, err = trust.Load(next, read)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	g := &generation{cfg: next, trust: ts}
	if err := rt.buildHandler(g); err != nil {
		return nil, nil, err
	}
	if next.Webhook != nil {
		if err := rt.buildWebhook(g); err != nil {
			return nil, nil, err
		}
	}
	return g, ignored, nil
}

// reloadable is cur with loaded's trust, tickets and webhook namespaces,
// validated, and the top-level sections in which loaded differs otherwise
// (by their YAML keys). A webhook section removed is an error: the
// listener stays until a restart, and would have no bindings to serve.
func reloadable(cur, loaded config.Config) (config.Config, []string, error) {
	if cur.Dev != loaded.Dev {
		return config.Config{}, nil, errors.New("development mode cannot be switched by a reload")
	}
	next := cur
	next.Trust, next.Tickets = loaded.Trust, loaded.Tickets
	if cur.Webhook != nil {
		if loaded.Webhook == nil {
			return config.Config{}, nil, errors.New("webhook: the section was removed; the webhook runs until a restart, so keep it (with its namespaces) or restart")
		}
		w := *cur.Webhook
		w.Namespaces = maps.Clone(loaded.Webhook.Namespaces)
		next.Webhook = &w
	}
	if err := next.Validate(); err != nil {
		return config.Config{}, nil, fmt.Errorf("config: %w", err)
	}
	// What else changed: compare loaded with next section by section.
	rest := loaded
	rest.Trust, rest.Tickets = next.Trust, next.Tickets
	if rest.Webhook != nil && next.Webhook != nil {
		w := *rest.Webhook
		w.Namespaces = next.Webhook.Namespaces
		rest.Webhook = &w
	}
	var ignored []string
	a, b := reflect.ValueOf(rest), reflect.ValueOf(next)
	for i := range a.NumField() {
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			name, _, _ := strings.Cut(a.Type().Field(i).Tag.Get("yaml"), ",")
			ignored = append(ignored, name)
		}
	}
	slices.Sort(ignored)
	return next, ignored, nil
}
