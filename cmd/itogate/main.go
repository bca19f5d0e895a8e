// Command itogate is the admission gatekeeper and its toolset: serve, the
// client (train, status), manifest signing (sign, verify, keygen),
// development token minting (token), the end-to-end demo, the code list and
// signed policy bundle checks (bundle inspect).
package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
)

// exitError carries a process exit code through cobra.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func main() {
	root := newRootCmd(os.Stdout, os.Stderr)
	if err := root.Execute(); err != nil {
		if ee, ok := err.(exitError); ok {
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "itogate:", err)
		os.Exit(1)
	}
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "itogate",
		Short:         "Policy-as-code admission gatekeeper for training runs on booked GPU compute",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	logger := func() *slog.Logger { return slog.New(slog.NewJSONHandler(stderr, nil)) }
	root.AddCommand(
		newServeCmd(logger),
		newTrainCmd(stdout, stderr),
		newStatusCmd(stdout, stderr),
		newSignCmd(stdout),
		newVerifyCmd(stdout),
		newKeygenCmd(stdout),
		newTokenCmd(stdout),
		newDemoCmd(stdout, stderr),
		newCodesCmd(stdout),
		newEvalCmd(stdout),
		newReplayCmd(stdout),
		newBundleCmd(stdout, stderr),
	)
	return root
}
