package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"strconv"

	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
)

func init() {
	// plain adapts an av command without flags of its own.
	plain := func(run func(e *env, name string, args []string) error) func(*flag.FlagSet, *string) agentRun {
		return func(_ *flag.FlagSet, name *string) agentRun {
			return func(_ context.Context, e *env, args []string) error { return run(e, *name, args) }
		}
	}
	avCmd("create", "[--type table|map] [--user-id] [--count N]", "create (or open) a named address vector",
		"Creates the named AV in the agent, or reports the existing one.", avCreate)
	avCmd("insert", "[--user-ids ID,...] ADDR...", "insert addresses (1.2.3.4:5000, [2001:2::1]:5000 or fi_sockaddr_in://...)",
		`Inserts addresses; prints each one's fi_addr, or its errno when it failed. A
duplicate insert returns the existing fi_addr and counts a reference.`, avInsert)
	avCmd("insertsvc", "NODE SERVICE", "insert NODE:SERVICE (fi_av_insertsvc)",
		"Inserts the address of a host (name or number) and service (port or name).", plain(avInsertSvc))
	avCmd("insertsym", "NODE NODECNT SERVICE SVCCNT", "insert a range of nodes x services (fi_av_insertsym)",
		"Inserts NODECNT consecutive nodes (addresses, or names with a numeric suffix) times SVCCNT consecutive ports, node-major.", plain(avInsertSym))
	avCmd("remove", "FI_ADDR...", "remove addresses by fi_addr",
		"Removes addresses; an address inserted n times needs n removes.", plain(avRemove))
	avCmd("lookup", "FI_ADDR", "show the address at an fi_addr", "Prints the address stored at FI_ADDR.", plain(avLookup))
	avCmd("list", "", "list the addresses of an AV", "Lists every address of the AV in fi_addr order.", plain(avList))
	avCmd("straddr", "ADDR", "format an address as libfabric does (fi_av_straddr)",
		"Prints ADDR in libfabric's FI_ADDR_STR form; it need not be in the AV.", plain(avStrAddr))
	avCmd("set-user-id", "FI_ADDR USER_ID", "set the user ID reported for an fi_addr (AV created with --user-id)",
		"Sets the ID completions report for FI_ADDR in place of the fi_addr.", plain(avSetUserID))
	avCmd("destroy", "", "remove a named AV and all its addresses", "Removes the AV from the node's maps.", plain(avDestroy))
}

// avCmd registers "av SUB": an agent command with --name.
func avCmd(sub, args, short, long string, setup func(fs *flag.FlagSet, name *string) agentRun) {
	agentCmd("av "+sub, "--name NAME "+args, short, long, func(fs *flag.FlagSet) agentRun {
		name := fs.String("name", "", "the named address vector")
		run := setup(fs, name)
		return func(ctx context.Context, e *env, args []string) error {
			if *name == "" {
				return usagef("--name is required")
			}
			return run(ctx, e, args)
		}
	})
}

func noArgs(args []string) error {
	if len(args) > 0 {
		return usagef("unexpected arguments %q", args)
	}
	return nil
}

func avCreate(fs *flag.FlagSet, name *string) agentRun {
	typ := fs.String("type", "table", "AV type: table or map")
	userID := fs.Bool("user-id", false, "completions report user IDs (FI_AV_USER_ID); set them with av set-user-id")
	group := fs.String("group", "", "group (name or number) whose members may change the AV besides you; you must be in it")
	count := fs.Int("count", 0, "expected number of addresses (a hint)")
	return func(_ context.Context, e *env, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		return e.call(func(c *client.Client) error {
			info, err := c.AVCreate(ctl.AVCreateArgs{Name: *name, Type: *typ, UserID: *userID, Count: *count, Group: *group})
			if err != nil {
				return err
			}
			e.emit(info, func(w io.Writer) {
				fmt.Fprintf(w, "AV %q: id %d, type %s, %d addresses, flags %v\n", info.Name, info.ID, info.Type, info.Entries, info.Flags)
			})
			return nil
		})
	}
}

func avInsert(fs *flag.FlagSet, name *string) agentRun {
	userIDs := fs.String("user-ids", "", "comma-separated user ID per address (per-insert FI_AV_USER_ID)")
	return func(_ context.Context, e *env, args []string) error {
		if len(args) == 0 {
			return usagef("no addresses")
		}
		req := ctl.AVInsertArgs{Name: *name, Addrs: args}
		if *userIDs != "" {
			ids, err := parseAddrList(*userIDs)
			if err != nil {
				return usagef("--user-ids: %v", err)
			}
			if len(ids) != len(args) {
				return usagef("--user-ids has %d IDs for %d addresses", len(ids), len(args))
			}
			req.UserIDs = ids
		}
		return e.call(func(c *client.Client) error {
			r, err := c.AVInsert(req)
			if err != nil {
				return err
			}
			return e.insertResult(args, r)
		})
	}
}

// insertResult prints per-address results and fails (with the first
// failure's errno) when not all went in.
func (e *env) insertResult(addrs []string, r ctl.InsertResult) error {
	type row struct {
		Addr   string  `json:"addr"`
		FiAddr fi.Addr `json:"fi_addr"`
		Errno  int     `json:"errno,omitempty"`
		Error  string  `json:"error,omitempty"`
	}
	rows := make([]row, len(r.FiAddrs))
	var first fi.Errno
	for i := range rows {
		if i < len(addrs) {
			rows[i].Addr = addrs[i]
		}
		rows[i].FiAddr = r.FiAddrs[i]
		if en := r.Errnos[i]; en != 0 {
			rows[i].Errno, rows[i].Error = int(en), en.Error()
			if first == 0 {
				first = en
			}
		}
	}
	e.emit(map[string]any{"inserted": r.Inserted, "results": rows}, func(w io.Writer) {
		fmt.Fprintln(w, "ADDRESS\tFI_ADDR\tERROR\t")
		for _, x := range rows {
			if x.Errno != 0 {
				fmt.Fprintf(w, "%s\t-\t%s\t\n", x.Addr, x.Error)
			} else {
				fmt.Fprintf(w, "%s\t%d\t\t\n", x.Addr, uint64(x.FiAddr))
			}
		}
	})
	if first != 0 {
		return fmt.Errorf("%d of %d addresses inserted: %w", r.Inserted, len(rows), first)
	}
	return nil
}

func avInsertSvc(e *env, name string, args []string) error {
	if len(args) != 2 {
		return usagef("want NODE SERVICE")
	}
	return e.call(func(c *client.Client) error {
		r, err := c.AVInsertSym(ctl.AVInsertSymArgs{Name: name, Node: args[0], NodeCnt: 1, Service: args[1], SvcCnt: 1})
		if err != nil {
			return err
		}
		return e.insertResult([]string{args[0] + ":" + args[1]}, r)
	})
}

func avInsertSym(e *env, name string, args []string) error {
	if len(args) != 4 {
		return usagef("want NODE NODECNT SERVICE SVCCNT")
	}
	nodes, err1 := strconv.Atoi(args[1])
	svcs, err2 := strconv.Atoi(args[3])
	if err1 != nil || err2 != nil {
		return usagef("NODECNT and SVCCNT are numbers")
	}
	return e.call(func(c *client.Client) error {
		r, err := c.AVInsertSym(ctl.AVInsertSymArgs{Name: name, Node: args[0], NodeCnt: nodes, Service: args[2], SvcCnt: svcs})
		if err != nil {
			return err
		}
		labels := make([]string, len(r.FiAddrs))
		for i := range labels {
			labels[i] = fmt.Sprintf("%s+%d:%s+%d", args[0], i/max(svcs, 1), args[2], i%max(svcs, 1))
		}
		return e.insertResult(labels, r)
	})
}

func parseAddrList(s string) ([]fi.Addr, error) {
	var out []fi.Addr
	for _, f := range splitComma(s) {
		v, err := strconv.ParseUint(f, 0, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, fi.Addr(v))
	}
	return out, nil
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}

func parseFiAddrs(args []string) ([]fi.Addr, error) {
	out := make([]fi.Addr, len(args))
	for i, a := range args {
		v, err := strconv.ParseUint(a, 0, 64)
		if err != nil {
			return nil, usagef("fi_addr %q is not a number", a)
		}
		out[i] = fi.Addr(v)
	}
	return out, nil
}

func avRemove(e *env, name string, args []string) error {
	if len(args) == 0 {
		return usagef("no fi_addr")
	}
	fas, err := parseFiAddrs(args)
	if err != nil {
		return err
	}
	return e.call(func(c *client.Client) error {
		if err := c.AVRemove(name, fas); err != nil {
			return err
		}
		e.emit(map[string]any{"removed": fas}, func(w io.Writer) { fmt.Fprintf(w, "removed %d\n", len(fas)) })
		return nil
	})
}

func avLookup(e *env, name string, args []string) error {
	if len(args) != 1 {
		return usagef("want one FI_ADDR")
	}
	fas, err := parseFiAddrs(args)
	if err != nil {
		return err
	}
	return e.call(func(c *client.Client) error {
		x, err := c.AVLookup(name, fas[0])
		if err != nil {
			return err
		}
		e.emit(x, func(w io.Writer) { fmt.Fprintf(w, "%d\t%s\t%s\t\n", uint64(x.FiAddr), x.Addr, userID(x.UserID)) })
		return nil
	})
}

func userID(id fi.Addr) string {
	if id == fi.AddrNotAvail {
		return "-"
	}
	return fmt.Sprintf("%#x", uint64(id))
}

func avList(e *env, name string, args []string) error {
	if err := noArgs(args); err != nil {
		return err
	}
	return e.call(func(c *client.Client) error {
		info, err := c.AVList(name)
		if err != nil {
			return err
		}
		e.emit(info, func(w io.Writer) {
			fmt.Fprintln(w, "FI_ADDR\tADDRESS\tUSER ID\tREFS\t")
			for _, x := range info.List {
				fmt.Fprintf(w, "%d\t%s\t%s\t%d\t\n", uint64(x.FiAddr), x.Addr, userID(x.UserID), x.Refs)
			}
		})
		return nil
	})
}

func avStrAddr(e *env, name string, args []string) error {
	if len(args) != 1 {
		return usagef("want one address")
	}
	ap, err := netip.ParseAddrPort(args[0])
	if err != nil {
		if ap, err = fi.ParseAddrStr(args[0]); err != nil {
			return usagef("address %q: %v", args[0], err)
		}
	}
	return e.call(func(c *client.Client) error {
		s, err := c.AVStrAddr(name, fi.EncodeSockaddr(nil, ap))
		if err != nil {
			return err
		}
		e.emit(map[string]string{"straddr": s}, func(w io.Writer) { fmt.Fprintln(w, s) })
		return nil
	})
}

func avSetUserID(e *env, name string, args []string) error {
	if len(args) != 2 {
		return usagef("want FI_ADDR USER_ID")
	}
	fas, err := parseFiAddrs(args)
	if err != nil {
		return err
	}
	return e.call(func(c *client.Client) error {
		if err := c.AVSetUserID(name, fas[0], fas[1]); err != nil {
			return err
		}
		e.emit(map[string]any{"fi_addr": fas[0], "user_id": fas[1]}, func(w io.Writer) {
			fmt.Fprintf(w, "fi_addr %d reports user ID %#x\n", uint64(fas[0]), uint64(fas[1]))
		})
		return nil
	})
}

func avDestroy(e *env, name string, args []string) error {
	if err := noArgs(args); err != nil {
		return err
	}
	return e.call(func(c *client.Client) error {
		if err := c.AVDestroy(name); err != nil {
			return err
		}
		e.emit(map[string]string{"destroyed": name}, func(w io.Writer) { fmt.Fprintf(w, "destroyed %s\n", name) })
		return nil
	})
}
