package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"github.com/xdpfab/xdpfab/fi"
)

// Client is a connection to the agent. Its methods are safe for
// concurrent use; calls are serialised on the connection.
type Client struct {
	mu   sync.Mutex
	c    *net.UnixConn
	next uint64
	buf  []byte
}

// Dial connects to the agent's socket (DefaultSocket when path is empty).
func Dial(path string) (*Client, error) {
	if path == "" {
		path = DefaultSocket
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
	return &Client{c: c, buf: make([]byte, MaxMessage)}, nil
}

// Close closes the connection; the agent releases what it owned.
func (c *Client) Close() error { return c.c.Close() }

// Call sends op with args and decodes the result into result (if not nil).
// File descriptors the response carries are returned; the caller owns them.
func (c *Client) Call(op string, args, result any) ([]int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	req := Request{ID: c.next, Op: op}
	if args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			return nil, err
		}
		req.Args = b
	}
	if err := WriteMsg(c.c, &req, nil); err != nil {
		return nil, fmt.Errorf("%s: send to agent: %w", op, err)
	}
	var resp Response
	fds, err := ReadMsg(c.c, c.buf, &resp)
	if err != nil {
		return nil, fmt.Errorf("%s: agent reply: %w", op, err)
	}
	// ID 0: the agent could not read the request, so it could not name it.
	if resp.ID != req.ID && !(resp.ID == 0 && resp.Errno != 0) {
		closeAll(fds)
		return nil, fmt.Errorf("%s: reply %d to request %d: %w", op, resp.ID, req.ID, fi.EIO)
	}
	if err := errorFrom(&resp); err != nil {
		closeAll(fds)
		return nil, err
	}
	if result != nil && len(resp.Result) > 0 {
		if err := json.Unmarshal(resp.Result, result); err != nil {
			closeAll(fds)
			return nil, fmt.Errorf("%s: decode reply: %w", op, err)
		}
	}
	return fds, nil
}

func (c *Client) call(op string, args, result any) error {
	fds, err := c.Call(op, args, result)
	closeAll(fds)
	return err
}

// Status returns the agent's view of the node.
func (c *Client) Status() (Status, error) {
	var s Status
	return s, c.call(OpStatus, nil, &s)
}

// Stats returns the XDP counters summed over CPUs, by name.
func (c *Client) Stats() (map[string]uint64, error) {
	var s map[string]uint64
	return s, c.call(OpStats, nil, &s)
}

// Detach removes the XDP program from iface.
func (c *Client) Detach(iface string) error {
	return c.call(OpDetach, DetachArgs{Iface: iface}, nil)
}

// AVCreate opens or creates the named AV.
func (c *Client) AVCreate(a AVCreateArgs) (AVInfo, error) {
	var info AVInfo
	return info, c.call(OpAVCreate, a, &info)
}

// insertBatch bounds addresses per request (about 60 bytes each with a
// user ID), well inside a default socket buffer; larger inserts go in
// FI_MORE batches, so the agent writes the maps once per batch.
const insertBatch = 2048

// AVInsert inserts addresses into the named AV. Like fi_av_insert it
// reports per address; err is only for the call as a whole.
func (c *Client) AVInsert(a AVInsertArgs) (InsertResult, error) {
	var out InsertResult
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
		var r InsertResult
		if err := c.call(OpAVInsert, part, &r); err != nil {
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
func (c *Client) AVInsertSym(a AVInsertSymArgs) (InsertResult, error) {
	var out InsertResult
	return out, c.call(OpAVInsertSym, a, &out)
}

// AVRemove removes fi_addrs.
func (c *Client) AVRemove(name string, addrs []fi.Addr) error {
	return c.call(OpAVRemove, AVRemoveArgs{Name: name, FiAddrs: addrs}, nil)
}

// AVLookup returns one entry.
func (c *Client) AVLookup(name string, fa fi.Addr) (AVEntry, error) {
	var e AVEntry
	return e, c.call(OpAVLookup, AVLookupArgs{Name: name, FiAddr: fa}, &e)
}

// AVList returns the AV and all its entries, fetched a page at a time.
func (c *Client) AVList(name string) (AVInfo, error) {
	var all AVInfo
	for {
		var page AVInfo
		if err := c.call(OpAVList, AVListArgs{Name: name, Offset: len(all.List)}, &page); err != nil {
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
	var s string
	return s, c.call(OpAVStrAddr, StrAddrArgs{Name: name, Addr: raw}, &s)
}

// AVSetUserID sets the user ID of an entry.
func (c *Client) AVSetUserID(name string, fa, id fi.Addr) error {
	return c.call(OpAVSetUserID, AVSetUserIDArgs{Name: name, FiAddr: fa, UserID: id}, nil)
}

// AVDestroy removes a named AV and its entries.
func (c *Client) AVDestroy(name string) error {
	return c.call(OpAVDestroy, AVNameArgs{Name: name}, nil)
}
