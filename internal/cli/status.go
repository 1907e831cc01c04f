package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/client"
)

func init() {
	agentCmd("status", "[-o json]", "what is attached where, map sizes, AVs, endpoints",
		"Asks the agent what the node's dataplane looks like.", func(*flag.FlagSet) agentRun { return runStatus })
	agentCmd("stats", "[--watch INTERVAL] [-o json]", "the XDP program's counters (rates with --watch)",
		`Prints the XDP program's per-CPU counters summed. Every frame counts in rx and
in exactly one of translated, unknown_source, dropped_policy, malformed,
passed and redirect_failed. With --watch, prints rates per second every
INTERVAL until interrupted.`, statsCmd)
	agentCmd("detach", "--iface IF", "remove the XDP program from an interface",
		"Asks the agent to detach its XDP program (and unpin the link) from IF.", detachCmd)
}

func runStatus(_ context.Context, e *env, args []string) error {
	if err := noArgs(args); err != nil {
		return err
	}
	return e.call(func(c *client.Client) error {
		s, err := c.Status()
		if err != nil {
			return err
		}
		e.emit(s, func(w io.Writer) {
			fmt.Fprintf(w, "pin root\t%s\nagent restarts\t%d\nclients\t%d\n\n", s.PinRoot, s.Restarts, s.Clients)
			fmt.Fprintln(w, "IFACE\tIFINDEX\tMODE\tADOPTED\t")
			for _, a := range s.Attachments {
				fmt.Fprintf(w, "%s\t%d\t%s\t%v\t\n", a.Iface, a.Ifindex, a.Mode, a.Adopted)
			}
			fmt.Fprintln(w, "\nMAP\tENTRIES\tMAX\t")
			for _, m := range s.Maps {
				fmt.Fprintf(w, "%s\t%d\t%d\t\n", m.Name, m.Entries, m.MaxEntries)
			}
			fmt.Fprintln(w, "\nAV\tID\tTYPE\tENTRIES\tFLAGS\t")
			for _, v := range s.AVs {
				fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%v\t\n", v.Name, v.ID, v.Type, v.Entries, v.Flags)
			}
			fmt.Fprintln(w, "\nENDPOINT\tLOCAL\tAV\tXSK SLOTS\tCONTEXTS\tQUEUES\tUNKNOWN SOURCES\t")
			for _, p := range s.Endpoints {
				fmt.Fprintf(w, "%d\t%s\t%d\t%d-%d\t%d\t%d\t%s\t\n", p.ID, p.Local, p.AVID, p.XSKBase, p.XSKBase+uint32(p.RxCtxs*p.Queues)-1, p.RxCtxs, p.Queues, p.Policy)
			}
		})
		return nil
	})
}

func statsCmd(fs *flag.FlagSet) agentRun {
	watch := fs.Duration("watch", 0, "print rates every INTERVAL (e.g. 1s)")
	return func(ctx context.Context, e *env, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		return e.call(func(c *client.Client) error {
			prev, err := c.Stats()
			if err != nil {
				return err
			}
			if *watch <= 0 {
				e.emit(prev, func(w io.Writer) { printCounters(w, prev, nil) })
				return nil
			}
			t := time.NewTicker(*watch)
			defer t.Stop()
			last := time.Now()
			for {
				select {
				case <-ctx.Done():
					return nil
				case now := <-t.C:
					cur, err := c.Stats()
					if err != nil {
						return err
					}
					dt := now.Sub(last).Seconds()
					rates := map[string]float64{}
					for k, v := range cur {
						rates[k] = float64(v-prev[k]) / dt
					}
					e.emit(map[string]any{"time": now.UTC(), "per_second": rates, "total": cur}, func(w io.Writer) {
						fmt.Fprintf(w, "%s\n", now.Format(time.TimeOnly))
						printCounters(w, cur, rates)
					})
					prev, last = cur, now
				}
			}
		})
	}
}

func printCounters(w io.Writer, c map[string]uint64, rates map[string]float64) {
	names := make([]string, 0, len(c))
	for i := range bpf.NumCounters {
		names = append(names, bpf.Counter(i).String())
	}
	if rates == nil {
		fmt.Fprintln(w, "COUNTER\tTOTAL\t")
		for _, n := range names {
			fmt.Fprintf(w, "%s\t%d\t\n", n, c[n])
		}
		return
	}
	fmt.Fprintln(w, "COUNTER\tTOTAL\tPER SECOND\t")
	for _, n := range names {
		fmt.Fprintf(w, "%s\t%d\t%.0f\t\n", n, c[n], rates[n])
	}
}

func detachCmd(fs *flag.FlagSet) agentRun {
	iface := fs.String("iface", "", "interface")
	return func(_ context.Context, e *env, args []string) error {
		if *iface == "" {
			return usagef("--iface is required")
		}
		if err := noArgs(args); err != nil {
			return err
		}
		return e.call(func(c *client.Client) error {
			if err := c.Detach(*iface); err != nil {
				return err
			}
			fmt.Fprintf(e.out, "detached from %s\n", *iface)
			return nil
		})
	}
}
