package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestHelpShowsPlainBoolFlags: no command's help writes "[=true|false]"
// after a boolean flag (pflag 1.1 does by default), and a bare boolean flag
// still parses as true, =false as false.
func TestHelpShowsPlainBoolFlags(t *testing.T) {
	var walk func(c *cobra.Command)
	seen := 0
	walk = func(c *cobra.Command) {
		usage := c.Flags().FlagUsages()
		if strings.Contains(usage, "[=true|false]") {
			t.Errorf("%s help:\n%s", c.CommandPath(), usage)
		}
		if !strings.Contains(usage, "-h, --help ") {
			t.Errorf("%s help lacks -h, --help:\n%s", c.CommandPath(), usage)
		}
		seen++
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd(&bytes.Buffer{}, &bytes.Buffer{}))
	if seen < 10 {
		t.Fatalf("walked %d commands", seen)
	}

	cmd := newRootCmd(&bytes.Buffer{}, &bytes.Buffer{})
	tok, _, err := cmd.Find([]string{"token", "entitlement"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want bool
	}{{[]string{"--training-eligible"}, true}, {[]string{"--training-eligible=false"}, false}} {
		if err := tok.Flags().Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if got, err := tok.Flags().GetBool("training-eligible"); err != nil || got != tc.want {
			t.Errorf("%v: training-eligible = %v, %v", tc.args, got, err)
		}
	}
}
