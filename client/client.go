package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
	"golang.org/x/sys/unix"
)

// Client is a connection to the agent. Its methods are safe for
// concurrent use; calls are serialised on the connection.
type Client struct {
	mu    sync.Mutex
	c     *net.UnixConn
	next  uint64
	agent ctl.HelloResult
}

// Dial connects to the agent's socket (ctl.DefaultSocket when path is
// empty) and runs the version handshake: an agent of another protocol
// version is an error wrapping fi.ENOPROTOOPT.
func Dial(path string) (*Client, error) {
	if err := checkOS(); err != nil {
		return nil, err
	}
	if path == "" {
		path = ctl.DefaultSocket
	}
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		switch {
		case errors.Is(err, os.ErrPermission):
			return nil, fmt.Errorf("connect to the xdpfab agent at %s: permission denied (the socket is for its group; ask to be added): %w", path, fi.EACCES)
		case errors.Is(err, os.ErrNotExist):
			return nil, fmt.Errorf("connect to the xdpfab agent at %s: no socket (is `xdpfab agent` running?): %w", path, fi.ENOENT)
		}
		return nil, fmt.Errorf("connect to the xdpfab agent at %s: %w", path, err)
	}
	cl := &Client{c: c}
	if err := cl.hello(ctl.Version); err != nil {
		c.Close()
		return nil, err
	}
	return cl, nil
}

// hello runs the handshake, announcing version.
func (c *Client) hello(version int) error {
	r, _, err := call(c, ctl.OpHello, ctl.HelloArgs{Version: version, Client: filepath.Base(os.Args[0])})
	if err != nil {
		if errors.Is(err, fi.ENOSYS) {
			// An agent from before the handshake does not know the op.
			return fmt.Errorf("the xdpfab agent predates control protocol version %d (it does not know %q); upgrade the agent: %w",
				ctl.Version, ctl.OpHello.Name(), fi.ENOPROTOOPT)
		}
		return fmt.Errorf("handshake with the xdpfab agent: %w", err)
	}
	if err := ctl.CheckVersion("agent", r.Version); err != nil {
		return err
	}
	c.agent = r
	return nil
}

// Agent returns what the agent said of itself in the handshake (the zero
// HelloResult for a nil Client).
func (c *Client) Agent() ctl.HelloResult {
	if c == nil {
		return ctl.HelloResult{}
	}
	return c.agent
}

// Close closes the connection; the agent releases what it owned. Closing a
// nil or zero Client (not from Dial) returns nil: there is nothing to
// release.
func (c *Client) Close() error {
	if c == nil || c.c == nil {
		return nil
	}
	return c.c.Close()
}

// Call sends one request of operation op with args (marshalled as JSON,
// nil for none) and decodes the result into result (if not nil). File
// descriptors the response carries are returned; the caller owns them.
// Typed callers use the ctl.Op values through the Client's methods; Call
// is the untyped form, for tools and tests. On a nil Client, or one that
// did not come from Dial (its zero value), every call fails with
// fi.EINVAL.
func (c *Client) Call(op string, args, result any) ([]int, error) {
	switch {
	case c == nil:
		return nil, fmt.Errorf("%s: nil client: %w", op, fi.EINVAL)
	case c.c == nil:
		return nil, fmt.Errorf("%s: client not connected (zero value, not from Dial): %w", op, fi.EINVAL)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	req := ctl.Request{ID: c.next, Op: op}
	if args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			return nil, fmt.Errorf("%s: encode arguments: %v: %w", op, err, fi.EINVAL)
		}
		req.Args = b
	}
	if err := ctl.WriteMsg(c.c, &req, nil); err != nil {
		return nil, fmt.Errorf("%s: send to agent: %w", op, err)
	}
	var resp ctl.Response
	fds, err := ctl.ReadMsg(c.c, &resp)
	if err != nil {
		return nil, fmt.Errorf("%s: agent reply: %w", op, err)
	}
	if resp.ID != req.ID && (resp.ID != 0 || resp.Errno == 0) {
		closeAll(fds)
		return nil, fmt.Errorf("%s: reply %d to request %d: %w", op, resp.ID, req.ID, fi.EIO)
	}
	if err := resp.Err(); err != nil {
		closeAll(fds)
		return nil, err
	}
	if result != nil {
		if err := ctl.Decode(resp.Result, result); err != nil {
			closeAll(fds)
			return nil, fmt.Errorf("%s: decode reply: %w", op, err)
		}
	}
	return fds, nil
}

// call runs one typed operation and returns its result and descriptors.
func call[A, R any](c *Client, op ctl.Op[A, R], args A) (R, []int, error) {
	var r R
	var a any = args
	if _, none := a.(ctl.None); none {
		a = nil
	}
	fds, err := c.Call(op.Name(), a, &r)
	return r, fds, err
}

// do runs one typed operation that carries no descriptors back.
func do[A, R any](c *Client, op ctl.Op[A, R], args A) (R, error) {
	r, fds, err := call(c, op, args)
	closeAll(fds)
	return r, err
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// Status returns the agent's view of the node.
func (c *Client) Status() (ctl.Status, error) { return do(c, ctl.OpStatus, ctl.None{}) }

// Stats returns the XDP counters summed over CPUs, by name.
func (c *Client) Stats() (map[string]uint64, error) { return do(c, ctl.OpStats, ctl.None{}) }

// Detach removes the XDP program from iface.
func (c *Client) Detach(iface string) error {
	_, err := do(c, ctl.OpDetach, ctl.DetachArgs{Iface: iface})
	return err
}

// AVCreate opens or creates the named AV.
func (c *Client) AVCreate(a ctl.AVCreateArgs) (ctl.AVInfo, error) { return do(c, ctl.OpAVCreate, a) }

// insertBatch bounds addresses per request (about 60 bytes each with a
// user ID), well inside a default socket buffer; larger inserts go in
// FI_MORE batches, so the agent writes the maps once per batch.
const insertBatch = 2048

// AVInsert inserts addresses into the named AV. Like fi_av_insert it
// reports per address; err is only for the call as a whole.
func (c *Client) AVInsert(a ctl.AVInsertArgs) (ctl.InsertResult, error) {
	var out ctl.InsertResult
	if a.UserIDs != nil && len(a.UserIDs) != len(a.Addrs) {
		return out, fmt.Errorf("av insert: %d user IDs for %d addresses: %w", len(a.UserIDs), len(a.Addrs), fi.EINVAL)
	}
	for start := 0; start < len(a.Addrs) || start == 0; start += insertBatch {
		end := min(start+insertBatch, len(a.Addrs))
		part := a
		part.Addrs = a.Addrs[start:end]
		if a.UserIDs != nil {
			part.UserIDs = a.UserIDs[start:end]
		}
		if end < len(a.Addrs) {
			part.Flags |= fi.More
		}
		r, err := do(c, ctl.OpAVInsert, part)
		if err != nil {
			return out, err
		}
		out.FiAddrs = append(out.FiAddrs, r.FiAddrs...)
		out.Errnos = append(out.Errnos, r.Errnos...)
		out.Inserted += r.Inserted
		if end >= len(a.Addrs) {
			break
		}
	}
	return out, nil
}

// AVInsertSym is fi_av_insertsym (and insertsvc with counts of 1).
func (c *Client) AVInsertSym(a ctl.AVInsertSymArgs) (ctl.InsertResult, error) {
	return do(c, ctl.OpAVInsertSym, a)
}

// AVRemove removes fi_addrs.
func (c *Client) AVRemove(name string, addrs []fi.Addr) error {
	_, err := do(c, ctl.OpAVRemove, ctl.AVRemoveArgs{Name: name, FiAddrs: addrs})
	return err
}

// AVLookup returns one entry.
func (c *Client) AVLookup(name string, fa fi.Addr) (ctl.AVEntry, error) {
	return do(c, ctl.OpAVLookup, ctl.AVLookupArgs{Name: name, FiAddr: fa})
}

// AVList returns the AV and all its entries, fetched a page at a time.
func (c *Client) AVList(name string) (ctl.AVInfo, error) {
	var all ctl.AVInfo
	for {
		page, err := do(c, ctl.OpAVList, ctl.AVListArgs{Name: name, Offset: len(all.List)})
		if err != nil {
			return all, err
		}
		list := append(all.List, page.List...)
		all, all.List = page, list
		if len(page.List) == 0 || len(all.List) >= page.Entries {
			return all, nil
		}
	}
}

// AVStrAddr formats a raw address as the AV would (fi_av_straddr).
func (c *Client) AVStrAddr(name string, raw []byte) (string, error) {
	return do(c, ctl.OpAVStrAddr, ctl.StrAddrArgs{Name: name, Addr: raw})
}

// AVSetUserID sets the user ID of an entry.
func (c *Client) AVSetUserID(name string, fa, id fi.Addr) error {
	_, err := do(c, ctl.OpAVSetUserID, ctl.AVSetUserIDArgs{Name: name, FiAddr: fa, UserID: id})
	return err
}

// AVDestroy removes a named AV and its entries.
func (c *Client) AVDestroy(name string) error {
	_, err := do(c, ctl.OpAVDestroy, ctl.AVNameArgs{Name: name})
	return err
}
