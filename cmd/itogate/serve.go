package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/bundle"
	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/ledger/postgres"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/runtime"
	"github.com/itocompute/itogate/gatekeeper/safefile"
	"github.com/itocompute/itogate/gatekeeper/server"
)

type serveOptions struct {
	configFile string
	// sets are the --set assignments, "key=value" (config.Config.Set),
	// applied in order after the file or the development flags.
	sets []string
	// The development flags: each is an alias of its --set key(s)
	// (devFlags), kept for `make run`, the scripts and the tests.
	listen, dataDir                                         string
	ledgerDSN, ledgerSchema                                 string
	ledgerTimeout, policyDeadline, requestTimeout           time.Duration
	maxEvaluations                                          int
	maxQueueWait                                            time.Duration
	bundleFile, bundleURL, shadowFile                       string
	bundlePoll, bundleMaxAge                                time.Duration
	webhookListen, webhookCert, webhookKey, webhookClientCA string
	webhookNamespaces                                       []string
	// bundleClock replaces time.Now for the bundle's age and staleness
	// (tests only, not a flag: a test ages a bundle without waiting).
	bundleClock func() time.Time
}

func newServeCmd(logger func() *slog.Logger) *cobra.Command {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the admission service (development mode without --config)",
		Long: `Run the admission service.

Without --config it runs in DEVELOPMENT MODE: the policy bundle embedded in the
binary, a bbolt ledger and the decision log in ./data, the published development
keys from fixtures/keys, loopback only. With --config it reads a YAML
configuration and refuses the development keys.

--set key=value sets one configuration key, dotted as in the file, in either
mode (--set limits.request_timeout=10s --set policy.bundle.file=bin/bundle.tar.gz);
it is decoded as strictly as the file, so a misspelt key is an error. The other
flags are development-mode aliases of --set keys, named in their help.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runServe(ctx, o, logger())
		},
	}
	cmd.Flags().StringVar(&o.configFile, "config", "", "YAML configuration file (production mode)")
	cmd.Flags().StringArrayVar(&o.sets, "set", nil,
		"set a configuration key: KEY=VALUE, KEY dotted as in the file, VALUE in YAML (repeatable; after the development flags)")
	for _, f := range o.devFlags() {
		f.register(cmd.Flags())
	}
	return cmd
}

// runServe is `itogate serve`: flags → configuration (validated) → the
// runtime, served until ctx ends. SIGHUP reloads the trust keys and the
// webhook's namespace bindings from the same flags and --config file
// (runtime.Runtime.Reload); SIGUSR1 backs the bbolt ledger up.
func runServe(ctx context.Context, o *serveOptions, log *slog.Logger) error {
	// Caught before anything opens: SIGHUP's default action ends the
	// process, and a reload asked for during start-up is done once
	// serving.
	hup := notifyReload()
	defer hup.stop()
	cfg, err := o.config()
	if err != nil {
		return err
	}
	rt, err := runtime.Open(ctx, cfg, runtime.Options{Logger: log, BundleClock: o.bundleClock})
	if err != nil {
		return err
	}
	defer rt.Close()
	tuneGC(os.Getenv)
	stop := backupOnSignal(ctx, rt)
	defer stop()
	stopReload := hup.serve(ctx, func() { _ = rt.Reload(o.configWith) }) // logged and counted
	defer stopReload()
	return rt.Run(ctx)
}

// config builds the configuration: the --config file, or config.Dev() with
// the development flags given; then --set, in order; validated.
func (o *serveOptions) config() (config.Config, error) {
	return o.configWith(safefile.ReadMounted)
}

// configWith is config reading the --config file with read.
func (o *serveOptions) configWith(read config.ReadFunc) (config.Config, error) {
	devSets, err := o.devAssignments()
	if err != nil {
		return config.Config{}, err
	}
	if err := o.noPasswordInArgs(); err != nil {
		return config.Config{}, err
	}
	if o.configFile != "" {
		if len(devSets) > 0 {
			return config.Config{}, devFlagsRefused(devSets)
		}
		return config.LoadWith(read, o.configFile, o.sets...)
	}
	cfg := config.Dev()
	for _, a := range devSets {
		if err := cfg.Set(a.key, a.value); err != nil {
			return config.Config{}, fmt.Errorf("--%s: %s: %w", a.flag, a.key, err)
		}
	}
	if err := cfg.SetAll(o.sets...); err != nil {
		return config.Config{}, err
	}
	return cfg, cfg.Validate()
}

// devFlag is a development-mode flag: an alias of the --set keys it names.
type devFlag struct {
	name, usage string
	// keys are the configuration keys the flag's value is assigned to; a
	// key written "key=value" is assigned that value instead.
	keys []string
	// value is the flag's variable: *string, *time.Duration, *int, or
	// *[]string of NAME=VALUE (assigned to keys[0].NAME).
	value any
}

// devFlags are serve's development flags, in the order of --help.
func (o *serveOptions) devFlags() []devFlag {
	dev := config.Dev()
	return []devFlag{
		{"listen", "listen address in development mode (loopback only; default " + dev.Listen + ")", []string{"listen"}, &o.listen},
		{"data-dir", "data directory in development mode (default " + dev.DataDir + ")", []string{"data_dir"}, &o.dataDir},
		{"ledger-dsn", "development mode: PostgreSQL ledger DSN instead of bbolt under --data-dir (password via PGPASSWORD)",
			[]string{"ledger.driver=" + config.DriverPostgres, "ledger.dsn"}, &o.ledgerDSN},
		{"ledger-schema", "development mode: PostgreSQL schema of the ledger (default " + postgres.DefaultSchema + ")", []string{"ledger.schema"}, &o.ledgerSchema},
		{"ledger-timeout", "development mode, with --ledger-dsn: bound on one PostgreSQL statement and on waiting for a pooled connection (default " +
			postgres.DefaultStatementTimeout.String() + " per statement, " + postgres.DefaultAcquireTimeout.String() + " waiting)",
			[]string{"ledger.statement_timeout", "ledger.acquire_timeout"}, &o.ledgerTimeout},
		{"policy-deadline", "development mode: bound on one policy evaluation (default " + policy.DefaultDeadline.String() + ")", []string{"policy.deadline"}, &o.policyDeadline},
		{"request-timeout", "development mode: bound on one request (default " + server.DefaultRequestTimeout.String() + ")", []string{"limits.request_timeout"}, &o.requestTimeout},
		{"max-concurrent-evaluations", "development mode: policy evaluations running at once (0: one per CPU; -1: no bound); up to " +
			strconv.Itoa(admission.DefaultQueueFactor) + " per slot " +
			"wait at most --max-queue-wait, then 503 ADMISSION_OVERLOADED (the queue's length: --set limits.max_queued_evaluations)",
			[]string{"limits.max_concurrent_evaluations"}, &o.maxEvaluations},
		{"max-queue-wait", "development mode: bound on an admission's wait for an evaluation slot, beyond which it is answered " +
			"503 ADMISSION_OVERLOADED (default " + admission.DefaultQueueWait.String() + "); under sustained overload it sets the latency of the admissions served",
			[]string{"limits.max_queue_wait"}, &o.maxQueueWait},
		{"shadow-bundle-file", "development mode: a signed candidate bundle evaluated beside the enforced one, never enforced",
			[]string{"policy.shadow.file"}, &o.shadowFile},
		{"bundle-file", "development mode: enforce this signed bundle (make bundle), verified with the development bundle key",
			[]string{"policy.bundle.file"}, &o.bundleFile},
		{"bundle-url", "development mode: poll this bundle server URL for signed bundles, verified with the development bundle key",
			[]string{"policy.bundle.url"}, &o.bundleURL},
		{"bundle-poll-interval", "development mode: how often --bundle-file/--bundle-url is polled (default " + bundle.DevPollInterval.String() +
			" in development mode)",
			[]string{"policy.bundle.poll_interval"}, &o.bundlePoll},
		{"bundle-max-age", "development mode: stop enforcing a bundle built longer ago than this", []string{"policy.bundle.max_age"}, &o.bundleMaxAge},
		{"webhook-listen", "development mode: serve the Kubernetes admission webhook (TLS) on this loopback address",
			[]string{"webhook.listen"}, &o.webhookListen},
		{"webhook-cert-file", "development mode: the webhook's serving certificate (PEM)", []string{"webhook.cert_file"}, &o.webhookCert},
		{"webhook-key-file", "development mode: the webhook's serving key (PEM)", []string{"webhook.key_file"}, &o.webhookKey},
		{"webhook-client-ca-file", "development mode: require apiserver client certificates signed by this CA",
			[]string{"webhook.client_ca_file"}, &o.webhookClientCA},
		{"webhook-namespace", "development mode: NAMESPACE=ACCOUNT under the webhook's control (repeatable)",
			[]string{"webhook.namespaces"}, &o.webhookNamespaces},
	}
}

// register adds the flag to fs, its help naming the keys it sets.
func (f devFlag) register(fs *pflag.FlagSet) {
	usage := f.usage + " (= --set " + strings.Join(f.keys, ", --set ") + ")"
	if _, ok := f.value.(*[]string); ok {
		usage = f.usage + " (= --set " + f.keys[0] + ".NAMESPACE=ACCOUNT)"
	}
	switch v := f.value.(type) {
	case *string:
		fs.StringVar(v, f.name, "", usage)
	case *time.Duration:
		fs.DurationVar(v, f.name, 0, usage)
	case *int:
		fs.IntVar(v, f.name, 0, usage)
	case *[]string:
		fs.StringArrayVar(v, f.name, nil, usage)
	}
}

// assignment is one --set assignment a development flag stands for.
type assignment struct{ flag, key, value string }

// devAssignments are the development flags given (not zero), each as its
// --set assignments, in the order of devFlags.
func (o *serveOptions) devAssignments() ([]assignment, error) {
	var out []assignment
	for _, f := range o.devFlags() {
		var values []string // YAML values; none when the flag is not given
		switch v := f.value.(type) {
		case *string:
			if *v != "" {
				values = []string{yamlString(*v)}
			}
		case *time.Duration:
			if *v != 0 {
				values = []string{v.String()}
			}
		case *int:
			if *v != 0 {
				values = []string{strconv.Itoa(*v)}
			}
		case *[]string:
			for _, nv := range *v {
				name, value, ok := strings.Cut(nv, "=")
				if !ok || name == "" || value == "" || strings.Contains(name, ".") {
					return nil, fmt.Errorf("--%s %q: want NAMESPACE=ACCOUNT", f.name, nv)
				}
				out = append(out, assignment{f.name, f.keys[0] + "." + name, yamlString(value)})
			}
			continue
		}
		for _, value := range values {
			for _, key := range f.keys {
				if k, fixed, ok := strings.Cut(key, "="); ok {
					out = append(out, assignment{f.name, k, fixed})
				} else {
					out = append(out, assignment{f.name, key, value})
				}
			}
		}
	}
	return out, nil
}

// devFlagsRefused is the error for development flags beside --config.
func devFlagsRefused(as []assignment) error {
	var flags, keys []string
	for _, a := range as {
		if len(flags) == 0 || flags[len(flags)-1] != "--"+a.flag {
			flags = append(flags, "--"+a.flag)
		}
		keys = append(keys, a.key)
	}
	return fmt.Errorf("%s: development-mode flags; with --config set %s in the file (or with --set)",
		strings.Join(flags, ", "), strings.Join(keys, ", "))
}

// yamlString is s as a YAML string, whatever it holds (a JSON string is
// a YAML double-quoted scalar).
func yamlString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// defaultGCPercent is serve's garbage-collector target when GOGC is not set.
// An admission allocates ~0.6 MB, nearly all of it garbage once answered,
// over a small live heap: at Go's default (100) the collector ran every few
// admissions and took ~13 % more CPU per admission than at 200
// (BenchmarkAdmitAllow, docs/performance.md), for a heap target that stays
// well inside the memory budget.
const defaultGCPercent = 200

// tuneGC applies defaultGCPercent unless the operator set GOGC, and returns
// the percent in force (-1: collection off, as GOGC=off).
func tuneGC(getenv func(string) string) int {
	if getenv("GOGC") != "" {
		p := debug.SetGCPercent(100)
		debug.SetGCPercent(p)
		return p
	}
	debug.SetGCPercent(defaultGCPercent)
	return defaultGCPercent
}

// noPasswordInArgs refuses a PostgreSQL DSN given on the command line
// (--ledger-dsn, --set ledger.dsn=…) that holds a password: other users
// read a process's arguments. The password comes from PGPASSWORD or
// PGPASSFILE (~/.pgpass), or the DSN from the configuration file.
func (o *serveOptions) noPasswordInArgs() error {
	dsns := map[string]string{"--ledger-dsn": o.ledgerDSN}
	for _, a := range o.sets {
		if k, v, ok := strings.Cut(a, "="); ok && strings.TrimSpace(k) == "ledger.dsn" {
			dsns["--set ledger.dsn"] = v
		}
	}
	for flag, dsn := range dsns {
		if dsnHasPassword(dsn) {
			return usageError{fmt.Errorf("%s holds a password, which other users can read in the process's arguments: "+
				"give it in PGPASSWORD or PGPASSFILE (~/.pgpass), or put the DSN in the configuration file", flag)}
		}
	}
	return nil
}

// dsnPasswordKeyword finds password=… in a keyword/value DSN.
var dsnPasswordKeyword = regexp.MustCompile(`(^|\s)password\s*=`)

// dsnHasPassword reports whether a PostgreSQL DSN (URL or keyword/value
// form, as libpq and pgx read them) carries a password.
func dsnHasPassword(dsn string) bool {
	dsn = strings.TrimSpace(strings.Trim(strings.TrimSpace(dsn), `"'`))
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		if _, ok := u.User.Password(); ok {
			return true
		}
		return u.Query().Has("password")
	}
	return dsnPasswordKeyword.MatchString(dsn)
}
