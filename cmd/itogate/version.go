package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/itocompute/itogate/gatekeeper/version"
)

// newVersionCmd prints the build's identity, as --version does.
func newVersionCmd(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version of this binary (as --version does)",
		Args:  cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(stdout, version.Get().String())
			return err
		},
	}
}
