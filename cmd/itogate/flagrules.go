package main

import (
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/itocompute/itogate/gatekeeper/safefile"
)

// What a flag's value is, as a flag annotation (pflag's SetAnnotation),
// for the rules below and the tests that walk every command's flags:
//
//	valueReadsFile  a path of a file the command reads (through gatekeeper/safefile)
//	valueReadsDir   a path of a directory the command reads (safefile.ReadDir)
//	valueWrites     a path the command writes
//	valuePlain      neither a secret nor a path, though its name looks like one
//	                (the annotation's second value says why)
//
// A command whose positional arguments are files it reads carries
// valueReadsFile in its own Annotations under annValue.
const (
	annValue       = "itogate:value"
	valueReadsFile = "reads-file"
	valueReadsDir  = "reads-dir"
	valueWrites    = "writes"
	valuePlain     = "plain"
)

func annotate(f *pflag.FlagSet, name string, values ...string) {
	if err := f.SetAnnotation(name, annValue, values); err != nil {
		panic(err) // a flag that does not exist: a programming error
	}
}

// readsFile marks flags whose values are paths of files the command reads.
func readsFile(f *pflag.FlagSet, names ...string) {
	for _, n := range names {
		annotate(f, n, valueReadsFile)
	}
}

// plainValue marks a flag whose name looks like a secret or a path but
// whose value is neither, saying why.
func plainValue(f *pflag.FlagSet, name, why string) { annotate(f, name, valuePlain, why) }

// flagValue is what the flag's annotation says its value is ("" if none).
func flagValue(f *pflag.Flag) string {
	if v := f.Annotations[annValue]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// secretName is the rule for secret-valued flags: a flag whose name has one
// of these words takes a secret, so its value must not be the secret
// itself (other users read it in ps, shells keep it in their history). It
// must be a path the command reads the secret from (a valueReadsFile
// flag; "-" reads standard input where the help says so), or be marked
// valuePlain with the reason it is no secret. The secret itself comes from
// that file, standard input or the environment ($ITOGATE_TOKEN …).
var secretName = regexp.MustCompile(`(^|-)(token|tokens|secret|secrets|password|passwd|passphrase|credential|credentials|` +
	`bearer|jwt|cookie|apikey|api-key|private-key|key-material|entitlement|confirmation)($|-)|(^|-)key$`)

// secretFlagProblems lists, for every command under root, each flag that
// breaks the rule of secretName, as "itogate cmd --flag: why".
func secretFlagProblems(root *cobra.Command) []string {
	var out []string
	eachFlag(root, func(c *cobra.Command, f *pflag.Flag) {
		if !secretName.MatchString(f.Name) {
			return
		}
		switch flagValue(f) {
		case valueReadsFile:
			return
		case valuePlain:
			if len(f.Annotations[annValue]) > 1 && f.Annotations[annValue][1] != "" {
				return
			}
		}
		out = append(out, fmt.Sprintf("%s --%s: its name says it takes a secret; take a file (annotated %s), standard input or the environment instead, or mark it %s with the reason",
			c.CommandPath(), f.Name, valueReadsFile, valuePlain))
	})
	return out
}

// envDefaultProblems lists every flag under root whose default or help
// shows one of the values: run with every environment variable the CLI
// reads set to a distinct value, it finds a default taken from the
// environment, which --help would print (a token, or a URL with a
// password).
func envDefaultProblems(root *cobra.Command, values []string) []string {
	var out []string
	eachFlag(root, func(c *cobra.Command, f *pflag.Flag) {
		for _, v := range values {
			if strings.Contains(f.DefValue, v) || strings.Contains(f.Usage, v) {
				out = append(out, fmt.Sprintf("%s --%s: its default or help shows a value of the environment", c.CommandPath(), f.Name))
			}
		}
	})
	return out
}

// eachFlag calls fn for every flag of every command under root (local and
// persistent, the help flag included), once per command that has it.
func eachFlag(root *cobra.Command, fn func(*cobra.Command, *pflag.Flag)) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) { fn(c, f) })
		c.PersistentFlags().VisitAll(func(f *pflag.Flag) {
			if c.Flags().Lookup(f.Name) == nil {
				fn(c, f)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// maxSecretBytes bounds a credential read from a file or standard input.
const maxSecretBytes = 64 << 10

// secretSource is where a command takes its credentials from: files
// through the safe reader, "-" for standard input (once per command), the
// environment.
type secretSource struct {
	stdin     io.Reader
	getenv    func(string) string
	stdinUsed string // the flag that took standard input
}

// read reads a credential from file (a path, or "-" for standard input),
// else from $env; never from a flag's value. flag names the file flag, for
// messages.
func (s *secretSource) read(flag, file, env, what string) (string, error) {
	switch file {
	case "":
		if v := s.getenv(env); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("%s: give --%s FILE (or - for standard input) or set $%s", what, flag, env)
	case "-":
		if s.stdinUsed != "" {
			return "", fmt.Errorf("--%s -: standard input is already --%s's", flag, s.stdinUsed)
		}
		s.stdinUsed = flag
		raw, err := io.ReadAll(io.LimitReader(s.stdin, maxSecretBytes+1))
		if err != nil {
			return "", fmt.Errorf("%s: standard input: %w", what, err)
		}
		if len(raw) > maxSecretBytes {
			return "", fmt.Errorf("%s: standard input holds more than %d bytes", what, maxSecretBytes)
		}
		return nonEmpty(what, "standard input", raw)
	}
	raw, err := safefile.ReadFile(file, maxSecretBytes)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	return nonEmpty(what, file, raw)
}

func nonEmpty(what, where string, raw []byte) (string, error) {
	v := strings.TrimSpace(string(raw))
	if v == "" {
		return "", fmt.Errorf("%s: %s is empty", what, where)
	}
	return v, nil
}

// fileArgs marks a command whose positional arguments are paths of files
// it reads ("-" excepted where the help says standard input).
func fileArgs(c *cobra.Command) *cobra.Command {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[annValue] = valueReadsFile
	return c
}

// readsFileArgs: c's arguments are files it reads.
func readsFileArgs(c *cobra.Command) bool { return c.Annotations[annValue] == valueReadsFile }
