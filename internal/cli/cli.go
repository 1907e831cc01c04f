// Package cli implements the xdpfab command's subcommands: flag parsing,
// output (text tables or JSON with -o json) and exit statuses. The work
// itself lives in packages agent, client, loader and the rest.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
)

// Exit statuses: an error's errno when it is a Linux errno (1-255), 1 for
// libfabric's own errno values and other errors, 64 for usage errors.
const (
	ExitUsage = 64
)

type command struct {
	name, args, short, long string
	run                     func(ctx context.Context, e *env, args []string) error
}

// env is what commands write to, and the agent's socket for agentCmd
// commands.
type env struct {
	out, errw io.Writer
	json      bool
	socket    string
}

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

// agentRun runs a command that talks to the agent, through e.call.
type agentRun func(ctx context.Context, e *env, args []string) error

// agentCmd registers a command of the agent: --socket and -o for all of
// them, and the flags setup defines before returning the command's run.
func agentCmd(name, args, short, long string, setup func(fs *flag.FlagSet) agentRun) {
	register(command{name: name, args: args, short: short, long: long,
		run: func(ctx context.Context, e *env, argv []string) error {
			fs := flags(e, name, args, long)
			fs.StringVar(&e.socket, "socket", envDefault("XDPFAB_SOCKET", ctl.DefaultSocket), "the agent's control socket")
			o := fs.String("o", "text", "output format: text or json")
			run := setup(fs)
			if err := parse(fs, argv); err != nil {
				return err
			}
			if err := e.setOutput(*o); err != nil {
				return err
			}
			return run(ctx, e, fs.Args())
		}})
}

var commands []command

func register(c command) { commands = append(commands, c) }

// usageError marks a command-line mistake.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// Main runs the command line and returns the process's exit status.
func Main(ctx context.Context, args []string, out, errw io.Writer) int {
	sort.Slice(commands, func(i, j int) bool { return commands[i].name < commands[j].name })
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		if len(args) > 1 {
			return Main(ctx, []string{args[1], "-h"}, out, errw)
		}
		topUsage(out)
		if len(args) == 0 {
			return ExitUsage
		}
		return 0
	}
	name, rest := args[0], args[1:]
	// Two-word commands: "av insert", "pingpong server".
	for _, c := range commands {
		if n := strings.Fields(c.name); len(n) == 2 && n[0] == name && len(rest) > 0 && rest[0] == n[1] {
			return runCommand(ctx, c, rest[1:], out, errw)
		}
	}
	for _, c := range commands {
		if c.name == name {
			return runCommand(ctx, c, rest, out, errw)
		}
	}
	var sub []string
	for _, c := range commands {
		if strings.HasPrefix(c.name, name+" ") {
			sub = append(sub, strings.TrimPrefix(c.name, name+" "))
		}
	}
	if len(sub) > 0 {
		fmt.Fprintf(errw, "xdpfab %s: want a subcommand: %s\n", name, strings.Join(sub, ", "))
		return ExitUsage
	}
	fmt.Fprintf(errw, "xdpfab: unknown command %q (xdpfab help lists them)\n", name)
	return ExitUsage
}

func runCommand(ctx context.Context, c command, args []string, out, errw io.Writer) int {
	e := &env{out: out, errw: errw}
	err := c.run(ctx, e, args)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(errw, "xdpfab %s: %s\nusage: xdpfab %s %s\n", c.name, ue.msg, c.name, c.args)
		return ExitUsage
	}
	code := fi.Code(err)
	if e.json {
		json.NewEncoder(out).Encode(map[string]any{"error": err.Error(), "errno": int(code), "errno_name": code.Name()})
	} else {
		fmt.Fprintf(errw, "xdpfab %s: %v\n", c.name, err)
	}
	if code > 0 && code < 256 {
		return int(code)
	}
	return 1
}

func topUsage(w io.Writer) {
	fmt.Fprintln(w, "xdpfab: libfabric address vectors and completion queues on XDP and AF_XDP.")
	fmt.Fprintln(w, "\nusage: xdpfab <command> [flags]   (xdpfab <command> -h for its flags)")
	fmt.Fprintln(w, "\ncommands:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.short)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nExit status: 0 on success; the errno (e.g. 22 for EINVAL) for Linux errno values;")
	fmt.Fprintln(w, "1 for libfabric's own errors (FI_EAVAIL and up) and others; 64 for usage errors.")
}

// flags makes a FlagSet for c that prints c's help.
func flags(e *env, name, args, long string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.errw)
	fs.Usage = func() {
		fmt.Fprintf(e.errw, "usage: xdpfab %s %s\n\n%s\n", name, args, strings.TrimSpace(long))
		var any bool
		fs.VisitAll(func(*flag.Flag) { any = true })
		if any {
			fmt.Fprintln(e.errw, "\nflags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parse parses args, flags anywhere among the positional arguments ("av
// insert --name x ADDR -o json"); "--" ends the flags. -h is not an error,
// a bad flag is a usage error. The positional arguments are fs.Args().
func parse(fs *flag.FlagSet, args []string) error {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return usageError{err.Error()}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > 0 && len(rest) < len(args) && args[len(args)-len(rest)-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	return fs.Parse(append([]string{"--"}, pos...))
}

func (e *env) setOutput(o string) error {
	switch o {
	case "text":
	case "json":
		e.json = true
	default:
		return usagef("-o %s: want text or json", o)
	}
	return nil
}

// emit writes v as JSON, or calls text.
func (e *env) emit(v any, text func(w io.Writer)) {
	if e.json {
		enc := json.NewEncoder(e.out)
		enc.SetIndent("", "  ")
		enc.Encode(v)
		return
	}
	tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
	text(tw)
	tw.Flush()
}

func envDefault(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
