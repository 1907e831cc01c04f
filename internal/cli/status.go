package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/client"
)

func statusCommand(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "status",
		Short: "what is attached where, map sizes, AVs, endpoints",
		Long:  "Asks the agent what the node's dataplane looks like.",
		Args:  noArgs,
	}
	return clientCommand(e, c, func(*cobra.Command, []string) error {
		return e.call(func(c *client.Client) error {
			s, err := c.Status()
			if err != nil {
				return err
			}
			e.emit(toStatusDoc(s), func(w io.Writer) {
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
				fmt.Fprintln(w, "\nIFACE\tQUEUES\tHOLDER\tENDPOINTS\t")
				for _, q := range s.Queues {
					users := "1"
					if q.Name != "" {
						users = fmt.Sprintf("%d of %d", q.Users, q.Slots)
					}
					fmt.Fprintf(w, "%s\t%d-%d\t%s\t%s\t\n", q.Iface, q.FirstQueue, q.FirstQueue+q.Queues-1, q.Holder, users)
				}
			})
			return nil
		})
	})
}

func statsCommand(e *env) *cobra.Command {
	var watch time.Duration
	c := &cobra.Command{
		Use:   "stats [--watch INTERVAL]",
		Short: "the XDP program's counters (rates with --watch)",
		Long: `Prints the XDP program's per-CPU counters summed over CPUs and interfaces.
Every frame counts in rx and in exactly one of the other counters. With
--watch, prints rates per second every INTERVAL (e.g. 1s, 500ms) until
interrupted; with -o json that is one JSON document per line per interval.`,
		Args: noArgs,
	}
	c.Flags().DurationVar(&watch, "watch", 0, "print rates every INTERVAL (a positive duration, e.g. 1s)")
	return clientCommand(e, c, func(c *cobra.Command, _ []string) error {
		if c.Flags().Changed("watch") && watch <= 0 {
			return usagef("--watch %v: want a positive duration, e.g. 1s", watch)
		}
		return e.call(func(cl *client.Client) error {
			prev, err := cl.Stats()
			if err != nil {
				return err
			}
			if watch == 0 {
				e.emit(struct {
					docHeader
					Counters map[string]uint64 `json:"counters"`
				}{header(kindStats), prev}, func(w io.Writer) { printCounters(w, prev, nil) })
				return nil
			}
			t := time.NewTicker(watch)
			defer t.Stop()
			last := time.Now()
			for {
				select {
				case <-c.Context().Done():
					return nil
				case now := <-t.C:
					cur, err := cl.Stats()
					if err != nil {
						return err
					}
					dt := now.Sub(last).Seconds()
					rates := map[string]float64{}
					for k, v := range cur {
						rates[k] = float64(v-prev[k]) / dt
					}
					doc := struct {
						docHeader
						Time      time.Time          `json:"time"`
						Seconds   float64            `json:"interval_seconds"`
						PerSecond map[string]float64 `json:"per_second"`
						Counters  map[string]uint64  `json:"counters"`
					}{header(kindStatsRate), now.UTC(), dt, rates, cur}
					if e.json() {
						writeJSON(e.out, doc, false) // JSON Lines: one document per interval
					} else {
						e.emit(nil, func(w io.Writer) {
							fmt.Fprintf(w, "%s\n", now.Format(time.TimeOnly))
							printCounters(w, cur, rates)
						})
					}
					prev, last = cur, now
				}
			}
		})
	})
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

func detachCommand(e *env) *cobra.Command {
	var iface string
	c := &cobra.Command{
		Use:   "detach --iface IF",
		Short: "remove the XDP program from an interface",
		Long:  "Asks the agent to detach its XDP program (and unpin the link) from IF. Root and the agent's admin group only.",
		Args:  noArgs,
	}
	c.Flags().StringVar(&iface, "iface", "", "interface (required)")
	c.MarkFlagRequired("iface")
	return clientCommand(e, c, func(*cobra.Command, []string) error {
		if iface == "" {
			return usagef("--iface: want an interface name")
		}
		return e.call(func(c *client.Client) error {
			if err := c.Detach(iface); err != nil {
				return err
			}
			e.emit(struct {
				docHeader
				Iface string `json:"iface"`
			}{header(kindDetach), iface}, func(w io.Writer) { fmt.Fprintf(w, "detached from %s\n", iface) })
			return nil
		})
	})
}
