package main

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/codes"
	"github.com/itocompute/itogate/policies"
)

func newCodesCmd(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "codes",
		Short: "Print docs/codes.md: every stable code, from the policy METADATA and the pipeline",
		Args:  cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			pc, err := codes.FromPolicy(policies.Bundle())
			if err != nil {
				return err
			}
			_, err = stdout.Write(codes.Markdown(pc, api.Registry()))
			return err
		},
	}
}
