package cli

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
)

func avCommand(e *env) *cobra.Command {
	g := &cobra.Command{
		Use:   "av",
		Short: "named address vectors in the agent (fi_av)",
		Long: `Commands on the node's named address vectors, through the agent: create,
insert, remove, look up, list, set user IDs, destroy. av straddr only formats
an address and needs no agent.

Addresses are 1.2.3.4:5000, [2001:2::1]:5000 or libfabric's FI_ADDR_STR
(fi_sockaddr_in://1.2.3.4:5000); one that does not parse is EINVAL (exit 22).
fi_addr values and user IDs are decimal, or hexadecimal with 0x.`,
	}
	g.AddCommand(
		avCreateCmd(e), avInsertCmd(e), avInsertSvcCmd(e), avInsertSymCmd(e), avRemoveCmd(e),
		avLookupCmd(e), avListCmd(e), avStrAddrCmd(e), avSetUserIDCmd(e), avDestroyCmd(e))
	return g
}

// avClient is an av command that talks to the agent, with --name.
func avClient(e *env, c *cobra.Command, run func(name string, args []string) error) *cobra.Command {
	name := c.Flags().String("name", "", "the named address vector (required)")
	c.MarkFlagRequired("name")
	return clientCommand(e, c, func(c *cobra.Command, args []string) error {
		if *name == "" {
			return usagef("--name: want an AV name")
		}
		return run(*name, args)
	})
}

func avCreateCmd(e *env) *cobra.Command {
	var typ, group string
	var userID bool
	var count int
	c := &cobra.Command{
		Use:   "create --name NAME [--type table|map] [--user-id] [--group GROUP] [--count N]",
		Short: "create (or open) a named address vector",
		Long: `Creates the named AV in the agent, or reports the existing one. Asking for a
type or for --user-id that the existing AV does not have is EINVAL, as
fi_av_open of a named AV with another shape; without --type any type is
accepted, and a new AV is a table.`,
		Args: noArgs,
	}
	c.Flags().StringVar(&typ, "type", "", "AV type: table or map (default: table for a new AV, any for an existing one)")
	c.Flags().BoolVar(&userID, "user-id", false, "completions report user IDs (FI_AV_USER_ID); set them with av set-user-id")
	c.Flags().StringVar(&group, "group", "", "group (name or number) whose members may change the AV besides you; you must be in it")
	c.Flags().IntVar(&count, "count", 0, "expected number of addresses (a hint; 0: none)")
	c.RegisterFlagCompletionFunc("type", cobra.FixedCompletions([]string{"table", "map"}, cobra.ShellCompDirectiveNoFileComp))
	return avClient(e, c, func(name string, _ []string) error {
		if c.Flags().Changed("type") && typ != "table" && typ != "map" {
			return usagef("--type %s: want table or map", typ)
		}
		if count < 0 {
			return usagef("--count %d: want 0 or more", count)
		}
		return e.call(func(cl *client.Client) error {
			info, err := cl.AVCreate(ctl.AVCreateArgs{Name: name, Type: typ, UserID: userID, Count: count, Group: group})
			if err != nil {
				return err
			}
			e.emit(avDoc{header(kindAV), toAVFields(info)}, func(w io.Writer) {
				fmt.Fprintf(w, "AV %q: id %d, type %s, %d addresses, flags %v\n", info.Name, info.ID, info.Type, info.Entries, info.Flags)
			})
			return nil
		})
	})
}

// parseAddr reads an address as the av commands take it: ADDR:PORT
// (brackets around IPv6) or FI_ADDR_STR. Its error is EINVAL with the
// parser's message.
func parseAddr(s string) (netip.AddrPort, error) {
	if strings.Contains(s, "://") {
		ap, err := fi.ParseAddrStr(s)
		if err != nil {
			return ap, err // "address %q: ...: EINVAL"
		}
		return ap, nil
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return ap, invalidf("address %q: %v (want ADDR:PORT, [IPv6]:PORT or fi_sockaddr_in://ADDR:PORT)", s, err)
	}
	return ap, nil
}

// parseAddrs parses every address and reports all that do not parse.
func parseAddrs(args []string) error {
	var errs []error
	for _, a := range args {
		if _, err := parseAddr(a); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// parseID reads a 64-bit identifier (fi_addr, user ID): decimal, or hex
// with 0x. A malformed one is EINVAL.
func parseID(what, s string) (fi.Addr, error) {
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) {
			err = ne.Err
		}
		return 0, invalidf("%s %q: %v (want a number, decimal or 0x hexadecimal)", what, s, err)
	}
	return fi.Addr(v), nil
}

func parseIDs(what string, ss []string) ([]fi.Addr, error) {
	out := make([]fi.Addr, len(ss))
	for i, s := range ss {
		v, err := parseID(what, s)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func avInsertCmd(e *env) *cobra.Command {
	var userIDs []string
	c := &cobra.Command{
		Use:   "insert --name NAME [--user-ids ID,...] ADDR...",
		Short: "insert addresses (1.2.3.4:5000, [2001:2::1]:5000 or fi_sockaddr_in://...)",
		Long: `Inserts addresses; prints each one's fi_addr, or its errno when it failed. A
duplicate insert returns the existing fi_addr and counts a reference. An
address that does not parse is EINVAL and nothing is inserted; when the agent
refuses some addresses (EADDRNOTAVAIL for port 0, say), the others go in and
the exit status is the first failure's errno.`,
		Args: minArgs("one or more addresses"),
	}
	c.Flags().StringSliceVar(&userIDs, "user-ids", nil, "comma-separated user ID per address (per-insert FI_AV_USER_ID)")
	return avClient(e, c, func(name string, args []string) error {
		if err := parseAddrs(args); err != nil {
			return err
		}
		req := ctl.AVInsertArgs{Name: name, Addrs: args}
		if c.Flags().Changed("user-ids") {
			ids, err := parseIDs("--user-ids: user ID", userIDs)
			if err != nil {
				return err
			}
			if len(ids) != len(args) {
				return usagef("--user-ids has %d IDs for %d addresses", len(ids), len(args))
			}
			req.UserIDs = ids
		}
		return e.call(func(cl *client.Client) error {
			r, err := cl.AVInsert(req)
			if err != nil {
				return err
			}
			return e.insertResult(args, r)
		})
	})
}

// insertResult prints per-address results and fails (with the first
// failure's errno) when not all went in.
func (e *env) insertResult(addrs []string, r ctl.InsertResult) error {
	doc := insertDoc{docHeader: header(kindAVInsert), Inserted: r.Inserted, Results: make([]insertRow, len(r.FiAddrs))}
	var first fi.Errno
	for i := range doc.Results {
		x := &doc.Results[i]
		if i < len(addrs) {
			x.Addr = addrs[i]
		}
		x.FiAddr = addrID(r.FiAddrs[i])
		if i < len(r.Errnos) && r.Errnos[i] != 0 {
			en := r.Errnos[i]
			n, msg := int(en), en.Error()
			x.Errno, x.Error, x.FiAddr = &n, &msg, nil
			doc.Failed++
			if first == 0 {
				first = en
			}
		}
	}
	e.emit(doc, func(w io.Writer) {
		fmt.Fprintln(w, "ADDRESS\tFI_ADDR\tERROR\t")
		for _, x := range doc.Results {
			if x.Errno != nil {
				fmt.Fprintf(w, "%s\t-\t%s\t\n", x.Addr, *x.Error)
			} else {
				fmt.Fprintf(w, "%s\t%s\t\t\n", x.Addr, *x.FiAddr)
			}
		}
	})
	if first != 0 {
		return fmt.Errorf("%d of %d addresses inserted: %w", r.Inserted, len(doc.Results), first)
	}
	return nil
}

func avInsertSvcCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "insertsvc --name NAME NODE SERVICE",
		Short: "insert NODE:SERVICE (fi_av_insertsvc)",
		Long:  "Inserts the address of a host (name or number) and service (port or name).",
		Args:  exactArgs(2, "NODE SERVICE"),
	}
	return avClient(e, c, func(name string, args []string) error {
		return e.call(func(cl *client.Client) error {
			r, err := cl.AVInsertSym(ctl.AVInsertSymArgs{Name: name, Node: args[0], NodeCnt: 1, Service: args[1], SvcCnt: 1})
			if err != nil {
				return err
			}
			return e.insertResult([]string{args[0] + ":" + args[1]}, r)
		})
	})
}

func avInsertSymCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "insertsym --name NAME NODE NODECNT SERVICE SVCCNT",
		Short: "insert a range of nodes x services (fi_av_insertsym)",
		Long:  "Inserts NODECNT consecutive nodes (addresses, or names with a numeric suffix) times SVCCNT consecutive ports, node-major.",
		Args:  exactArgs(4, "NODE NODECNT SERVICE SVCCNT"),
	}
	return avClient(e, c, func(name string, args []string) error {
		nodes, err1 := strconv.Atoi(args[1])
		svcs, err2 := strconv.Atoi(args[3])
		if err1 != nil || err2 != nil || nodes < 1 || svcs < 1 {
			return usagef("NODECNT %q and SVCCNT %q: want positive numbers", args[1], args[3])
		}
		return e.call(func(cl *client.Client) error {
			r, err := cl.AVInsertSym(ctl.AVInsertSymArgs{Name: name, Node: args[0], NodeCnt: nodes, Service: args[2], SvcCnt: svcs})
			if err != nil {
				return err
			}
			labels := make([]string, len(r.FiAddrs))
			for i := range labels {
				labels[i] = fmt.Sprintf("%s+%d:%s+%d", args[0], i/svcs, args[2], i%svcs)
			}
			return e.insertResult(labels, r)
		})
	})
}

func avRemoveCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "remove --name NAME FI_ADDR...",
		Short: "remove addresses by fi_addr",
		Long:  "Removes addresses; an address inserted n times needs n removes.",
		Args:  minArgs("one or more fi_addr values"),
	}
	return avClient(e, c, func(name string, args []string) error {
		fas, err := parseIDs("fi_addr", args)
		if err != nil {
			return err
		}
		return e.call(func(cl *client.Client) error {
			if err := cl.AVRemove(name, fas); err != nil {
				return err
			}
			e.emit(struct {
				docHeader
				Removed []id `json:"removed"`
			}{header(kindAVRemove), addrIDs(fas)}, func(w io.Writer) { fmt.Fprintf(w, "removed %d\n", len(fas)) })
			return nil
		})
	})
}

func avLookupCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "lookup --name NAME FI_ADDR",
		Short: "show the address at an fi_addr",
		Long:  "Prints the address stored at FI_ADDR.",
		Args:  exactArgs(1, "one FI_ADDR"),
	}
	return avClient(e, c, func(name string, args []string) error {
		fa, err := parseID("fi_addr", args[0])
		if err != nil {
			return err
		}
		return e.call(func(cl *client.Client) error {
			x, err := cl.AVLookup(name, fa)
			if err != nil {
				return err
			}
			e.emit(avEntryDoc{header(kindAVEntry), toAVEntry(x)}, func(w io.Writer) {
				fmt.Fprintf(w, "%d\t%s\t%s\t\n", uint64(x.FiAddr), x.Addr, userID(x.UserID))
			})
			return nil
		})
	})
}

func userID(id fi.Addr) string {
	if id == fi.AddrNotAvail {
		return "-"
	}
	return fmt.Sprintf("%#x", uint64(id))
}

func avListCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "list --name NAME",
		Short: "list the addresses of an AV",
		Long:  "Lists every address of the AV in fi_addr order.",
		Args:  noArgs,
	}
	return avClient(e, c, func(name string, _ []string) error {
		return e.call(func(cl *client.Client) error {
			info, err := cl.AVList(name)
			if err != nil {
				return err
			}
			doc := avListDoc{avDoc{header(kindAVList), toAVFields(info)}, []avEntry{}}
			for _, x := range info.List {
				doc.Addresses = append(doc.Addresses, toAVEntry(x))
			}
			e.emit(doc, func(w io.Writer) {
				fmt.Fprintln(w, "FI_ADDR\tADDRESS\tUSER ID\tREFS\t")
				for _, x := range info.List {
					fmt.Fprintf(w, "%d\t%s\t%s\t%d\t\n", uint64(x.FiAddr), x.Addr, userID(x.UserID), x.Refs)
				}
			})
			return nil
		})
	})
}

func avStrAddrCmd(e *env) *cobra.Command {
	var name, socket string
	c := &cobra.Command{
		Use:   "straddr ADDR",
		Short: "format an address as libfabric does (fi_av_straddr); needs no agent",
		Long: `Prints ADDR in libfabric's FI_ADDR_STR form, as fi_av_straddr would. It only
formats the address: no agent and no AV are involved, and the address need not
be in any AV.`,
		Args: exactArgs(1, "one address"),
	}
	// Earlier releases asked the agent, with --name and --socket: still
	// accepted, hidden, with a notice on stderr.
	c.Flags().StringVar(&name, "name", "", "unused: straddr needs no AV")
	c.Flags().StringVar(&socket, "socket", "", "unused: straddr needs no agent")
	c.Flags().MarkHidden("name")
	c.Flags().MarkHidden("socket")
	outputFlag(c, e)
	c.RunE = runE(func(c *cobra.Command, args []string) error {
		if err := e.checkOutput(); err != nil {
			return err
		}
		for _, f := range []string{"name", "socket"} {
			if c.Flags().Changed(f) {
				fmt.Fprintf(e.errw, "xdpfab av straddr: --%s is not needed any more (straddr only formats the address) and is ignored\n", f)
			}
		}
		ap, err := parseAddr(args[0])
		if err != nil {
			return err
		}
		s := fi.FormatAddrStr(ap)
		e.emit(struct {
			docHeader
			StrAddr string `json:"straddr"`
		}{header(kindAVStrAddr), s}, func(w io.Writer) { fmt.Fprintln(w, s) })
		return nil
	})
	return c
}

func avSetUserIDCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "set-user-id --name NAME FI_ADDR USER_ID",
		Short: "set the user ID reported for an fi_addr (AV created with --user-id)",
		Long:  "Sets the ID completions report for FI_ADDR in place of the fi_addr.",
		Args:  exactArgs(2, "FI_ADDR USER_ID"),
	}
	return avClient(e, c, func(name string, args []string) error {
		fa, err := parseID("fi_addr", args[0])
		if err != nil {
			return err
		}
		uid, err := parseID("user ID", args[1])
		if err != nil {
			return err
		}
		return e.call(func(cl *client.Client) error {
			if err := cl.AVSetUserID(name, fa, uid); err != nil {
				return err
			}
			e.emit(struct {
				docHeader
				FiAddr id `json:"fi_addr"`
				UserID id `json:"user_id"`
			}{header(kindAVSetUserID), addrID(fa), addrID(uid)}, func(w io.Writer) {
				fmt.Fprintf(w, "fi_addr %d reports user ID %#x\n", uint64(fa), uint64(uid))
			})
			return nil
		})
	})
}

func avDestroyCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "destroy --name NAME",
		Short: "remove a named AV and all its addresses",
		Long:  "Removes the AV from the node's maps.",
		Args:  noArgs,
	}
	return avClient(e, c, func(name string, _ []string) error {
		return e.call(func(cl *client.Client) error {
			if err := cl.AVDestroy(name); err != nil {
				return err
			}
			e.emit(struct {
				docHeader
				Destroyed string `json:"destroyed"`
			}{header(kindAVDestroy), name}, func(w io.Writer) { fmt.Fprintf(w, "destroyed %s\n", name) })
			return nil
		})
	})
}
