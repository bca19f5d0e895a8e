// Command itogate is the admission gatekeeper and its toolset: serve, the
// client (train, status, runs), revocation (revoke), the eval authority's
// report (eval-report), manifest signing (sign, verify, keygen),
// development token minting (token), the end-to-end demo, the code list and
// signed policy bundle checks (bundle inspect).
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/itocompute/itogate/gatekeeper/version"
)

// exitError carries a process exit code through cobra.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

// run runs the command line args and returns the exit code of the command
// that ran, from exitTable: an error the command did not print itself is
// printed on stderr, inert.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runContext(context.Background(), args, stdin, stdout, stderr)
}

func runContext(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd(stdout, stderr)
	root.SetIn(stdin)
	root.SetArgs(args)
	c, err := root.ExecuteContextC(ctx)
	code, msg := exitStatus(c, err)
	if msg != "" {
		fmt.Fprintln(stderr, msg)
	}
	return code
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "itogate",
		Short:         "Policy-as-code admission gatekeeper for training runs on booked GPU compute",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Get().String(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	logger := func() *slog.Logger { return slog.New(slog.NewJSONHandler(stderr, nil)) }
	root.AddCommand(
		newServeCmd(logger),
		newTrainCmd(stdout, stderr),
		newStatusCmd(stdout, stderr),
		newRunsCmd(stdout, stderr),
		newRevokeCmd(stdout, stderr),
		newEvalReportCmd(stdout, stderr),
		newSignCmd(stdout),
		newVerifyCmd(stdout),
		newKeygenCmd(stdout),
		newTokenCmd(tokenDeps{stdout: stdout, stderr: stderr, getenv: os.Getenv, now: time.Now}),
		newDemoCmd(stdout, stderr),
		newCodesCmd(stdout),
		newEvalCmd(stdout),
		newPlanCmd(stdout),
		newReplayCmd(stdout, stderr),
		newBundleCmd(stdout, stderr),
		newTicketCmd(stdout, stderr),
		newWebhookCmd(stdout),
		newVersionCmd(stdout),
		newLedgerCmd(stdout),
	)
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	plainBoolFlags(root)
	markUsageErrors(root)
	return root
}

// plainBoolFlags makes help show a boolean flag as "--json" rather than
// "--json[=true|false]" (pflag 1.1 writes the latter for every bool flag,
// -h/--help included). Parsing is unchanged: a bare --json still means true
// (NoOptDefVal), --json=false still works.
func plainBoolFlags(c *cobra.Command) {
	c.InitDefaultHelpFlag()
	wrap := func(f *pflag.Flag) {
		if _, done := f.Value.(plainBool); !done && f.Value.Type() == "bool" {
			f.Value = plainBool{f.Value}
		}
	}
	c.Flags().VisitAll(wrap)
	c.PersistentFlags().VisitAll(wrap)
	for _, sub := range c.Commands() {
		plainBoolFlags(sub)
	}
}

// plainBool hides a bool flag's IsBoolFlag method (only String, Set and Type
// are promoted from the embedded interface).
type plainBool struct{ pflag.Value }
