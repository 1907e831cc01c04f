// Package cli implements the xdpfab command on spf13/cobra: commands and
// flags, validation of every value, output (text tables, or JSON with -o
// json as docs/cli-json.md describes) and exit statuses. The work itself
// lives in packages agent, client, loader and the rest.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
)

// Exit statuses: 0 on success; an error's errno when it is a Linux errno
// (1-255, e.g. 22 for EINVAL); 1 for libfabric's own errno values
// (FI_EAVAIL and up) and other errors; ExitUsage for usage errors.
const (
	ExitUsage = 64 // EX_USAGE of sysexits.h
)

const exitHelp = `Exit status: 0 on success; the errno for Linux errno values (e.g. 22 for
EINVAL: a malformed address or argument value the agent or a parser refused);
1 for libfabric's own errors (FI_EAVAIL and up) and others; 64 for usage
errors (an unknown command or flag, a missing or out-of-range flag value).`

// env is what a command writes to, how, and the agent's socket.
type env struct {
	out, errw io.Writer
	output    string // "text" or "json"
	socket    string
}

func (e *env) json() bool { return e.output == "json" }

// call connects to the agent, runs f and hangs up. Commands check their
// arguments first, so that a usage error needs no agent.
func (e *env) call(f func(c *client.Client) error) error {
	c, err := client.Dial(e.socket)
	if err != nil {
		return err
	}
	defer c.Close()
	return f(c)
}

// usageError marks a command-line mistake: exit status 64.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// runError is an error of a command's run function. Errors that are not
// (cobra's: an unknown command, a bad flag, a missing required flag) are
// usage errors.
type runError struct{ err error }

func (r runError) Error() string { return r.err.Error() }
func (r runError) Unwrap() error { return r.err }

// runE marks f's errors as run errors.
func runE(f func(c *cobra.Command, args []string) error) func(c *cobra.Command, args []string) error {
	return func(c *cobra.Command, args []string) error {
		if err := f(c, args); err != nil {
			return runError{err}
		}
		return nil
	}
}

// invalidf is an argument the parsers refused (an address, a number that
// is an identifier): EINVAL, with the parser's message.
func invalidf(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, fi.EINVAL)...)
}

// Main runs the command line and returns the process's exit status.
func Main(ctx context.Context, args []string, out, errw io.Writer) int {
	e := &env{out: out, errw: errw, output: "text"}
	root := newRoot(e)
	if cmd, _, err := root.Find(args); err == nil && cmd != nil {
		args = longSingleDash(cmd, args)
	}
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	if cmd == nil {
		cmd = root
	}
	return e.fail(cmd, err, jsonRequested(args))
}

// fail reports err once, on stderr (as JSON with -o json), and returns the
// exit status.
func (e *env) fail(cmd *cobra.Command, err error, asJSON bool) int {
	path := cmd.CommandPath()
	var ue usageError
	var re runError
	usage := errors.As(err, &ue) || !errors.As(err, &re)
	status, code := 1, fi.Errno(0)
	switch {
	case usage:
		status = ExitUsage
	default:
		code = fi.Code(err)
		if code > 0 && code < 256 {
			status = int(code)
		}
	}
	if asJSON || e.json() {
		doc := errorDoc{docHeader: header(kindError), Command: path, Error: err.Error(), ExitStatus: status, Usage: usage}
		if code != 0 && code != fi.EOTHER {
			n, name := int(code), code.Name()
			doc.Errno, doc.ErrnoName = &n, &name
		}
		writeJSON(e.errw, doc, false)
		return status
	}
	fmt.Fprintf(e.errw, "%s: %v\n", path, err)
	if usage {
		fmt.Fprintf(e.errw, "Run '%s --help' for usage.\n", path)
	}
	return status
}

// jsonRequested tells from the raw arguments whether -o json was asked
// for, so that an error in parsing the flags is JSON too.
func jsonRequested(args []string) bool {
	for i, a := range args {
		switch {
		case a == "--":
			return false
		case a == "-o" || a == "--output" || a == "--o":
			if i+1 < len(args) && args[i+1] == "json" {
				return true
			}
		case a == "-ojson" || a == "-o=json" || a == "--output=json" || a == "--o=json":
			return true
		}
	}
	return false
}

func newRoot(e *env) *cobra.Command {
	var showVersion bool
	root := &cobra.Command{
		Use:   "xdpfab",
		Short: "libfabric address vectors and completion queues on XDP and AF_XDP",
		Long: `xdpfab: libfabric address vectors (fi_av) and completion queues (fi_cq) on an
XDP and AF_XDP dataplane. This command runs the node agent, talks to it (AVs,
status, counters, detach), and runs the demo and a fi_pingpong-style test.

` + exitHelp,
		Args:          cobra.NoArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: runE(func(c *cobra.Command, args []string) error {
			if err := e.checkOutput(); err != nil {
				return err
			}
			if showVersion {
				return printVersion(e)
			}
			return c.Help()
		}),
	}
	root.Flags().BoolVar(&showVersion, "version", false, "print the version, as the version command does")
	outputFlag(root, e) // for --version -o json
	root.SetOut(e.out)
	root.SetErr(e.errw)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err.Error()} })
	// "--o json": the flag package of earlier releases took -o as --o too.
	root.SetGlobalNormalizationFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if name == "o" {
			name = "output"
		}
		return pflag.NormalizedName(name)
	})
	root.CompletionOptions.HiddenDefaultCmd = false
	root.AddCommand(agentCommand(e), avCommand(e), statusCommand(e), statsCommand(e), detachCommand(e),
		demoCommand(e), pingpongCommand(e), versionCommand(e))
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	groupsRejectUnknown(root)
	return root
}

// groupsRejectUnknown makes every command group (av, pingpong,
// completion) print its help with exit 0 when called alone or with -h,
// and refuse an unknown subcommand (whatever flags follow it) or flag as a
// usage error: cobra otherwise shows the group's help for "av bogus".
func groupsRejectUnknown(c *cobra.Command) {
	for _, sub := range c.Commands() {
		groupsRejectUnknown(sub)
	}
	if !c.HasSubCommands() || !c.HasParent() || c.RunE != nil || c.Run != nil {
		return
	}
	c.DisableFlagParsing = true
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(c *cobra.Command, args []string) error {
		for _, a := range args {
			if a == "--" {
				break
			}
			if strings.HasPrefix(a, "-") {
				continue
			}
			msg := fmt.Sprintf("unknown command %q for %q", a, c.CommandPath())
			if s := c.SuggestionsFor(a); len(s) > 0 {
				msg += "; did you mean " + strings.Join(s, " or ") + "?"
			}
			var names []string
			for _, sub := range c.Commands() {
				if sub.IsAvailableCommand() {
					names = append(names, sub.Name())
				}
			}
			return usagef("%s (subcommands: %s)", msg, strings.Join(names, ", "))
		}
		for _, a := range args {
			switch a {
			case "-h", "--help":
				return c.Help()
			}
		}
		if len(args) > 0 {
			return usagef("unknown flag: %s", args[0])
		}
		return c.Help()
	}
}

// longSingleDash rewrites "-size 64" as "--size 64" for flags of cmd with
// names longer than a letter: the flag package of earlier releases took
// both spellings, and scripts use them (demo -size, pingpong -S is a
// shorthand and stays). Values of flags are left alone.
func longSingleDash(cmd *cobra.Command, args []string) []string {
	lookup := func(name string) *pflag.Flag {
		if f := cmd.Flags().Lookup(name); f != nil {
			return f
		}
		return cmd.InheritedFlags().Lookup(name)
	}
	out := make([]string, 0, len(args))
	skip := false // the previous argument was a flag that takes this one
	for i, a := range args {
		if skip {
			skip = false
			out = append(out, a)
			continue
		}
		if a == "--" {
			return append(out, args[i:]...)
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			out = append(out, a)
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		var f *pflag.Flag
		if strings.HasPrefix(a, "--") || len(name) > 1 {
			f = lookup(name)
			if f != nil && !strings.HasPrefix(a, "--") {
				a = "-" + a
			}
		} else {
			f = cmd.Flags().ShorthandLookup(name)
			if f == nil {
				f = cmd.InheritedFlags().ShorthandLookup(name)
			}
		}
		skip = f != nil && !hasValue && f.NoOptDefVal == ""
		out = append(out, a)
	}
	return out
}

// outputFlag adds -o/--output.
func outputFlag(c *cobra.Command, e *env) {
	c.Flags().StringVarP(&e.output, "output", "o", "text", "output format: text or json (docs/cli-json.md)")
	c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
}

// checkOutput validates -o.
func (e *env) checkOutput() error {
	switch e.output {
	case "text", "json":
		return nil
	}
	return usagef("-o %s: want text or json", e.output)
}

// clientCommand is a command that talks to the agent: --socket and -o.
// run gets the positional arguments after the flags were parsed and -o
// checked.
func clientCommand(e *env, c *cobra.Command, run func(c *cobra.Command, args []string) error) *cobra.Command {
	c.Flags().StringVar(&e.socket, "socket", envDefault("XDPFAB_SOCKET", ctl.DefaultSocket), "the agent's control socket ($XDPFAB_SOCKET)")
	outputFlag(c, e)
	c.RunE = runE(func(c *cobra.Command, args []string) error {
		if err := e.checkOutput(); err != nil {
			return err
		}
		return run(c, args)
	})
	return c
}

// emit writes one result document: v as JSON (v carries the schema
// header), or text's table.
func (e *env) emit(v any, text func(w io.Writer)) {
	if e.json() {
		writeJSON(e.out, v, true)
		return
	}
	tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
	text(tw)
	tw.Flush()
}

func writeJSON(w io.Writer, v any, indent bool) {
	enc := json.NewEncoder(w)
	if indent {
		enc.SetIndent("", "  ")
	}
	enc.Encode(v)
}

func envDefault(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// noArgs refuses positional arguments.
func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unexpected arguments %q", args)
	}
	return nil
}

// exactArgs wants n positional arguments, named by what.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("want %s, got %d arguments", what, len(args))
		}
		return nil
	}
}

// minArgs wants at least one positional argument.
func minArgs(what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) == 0 {
			return usagef("want %s", what)
		}
		return nil
	}
}
