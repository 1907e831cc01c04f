package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/fi"
	"golang.org/x/sys/unix"
)

// conn is one client connection and what it owns.
type conn struct {
	c    *net.UnixConn
	cred *unix.Ucred

	mu  sync.Mutex
	eps []*clientEP // endpoints to release when the connection ends
}

func (a *Agent) accept() error {
	for {
		c, err := a.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("agent: accept: %w", err)
		}
		cn := &conn{c: c}
		if raw, err := c.SyscallConn(); err == nil {
			raw.Control(func(fd uintptr) {
				cn.cred, _ = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
				// Room for a whole reply (an AV listing page, say): a
				// SEQPACKET message must fit the sender's buffer. Without
				// CAP_NET_ADMIN this fails and large replies get EMSGSIZE.
				unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 2*client.MaxMessage)
			})
		}
		a.mu.Lock()
		a.clients[cn] = struct{}{}
		a.serving.Add(1)
		a.mu.Unlock()
		go func() {
			defer a.serving.Done()
			a.serve(cn)
		}()
	}
}

// serve answers one connection's requests in order. When the connection
// ends (the process closed it or died), its endpoints are released.
func (a *Agent) serve(cn *conn) {
	log := a.log.With("pid", credField(cn, func(c *unix.Ucred) int { return int(c.Pid) }),
		"uid", credField(cn, func(c *unix.Ucred) int { return int(c.Uid) }))
	log.Debug("client connected")
	defer func() {
		a.releaseClient(cn)
		cn.c.Close()
		a.mu.Lock()
		delete(a.clients, cn)
		a.mu.Unlock()
		log.Debug("client gone")
	}()
	buf := make([]byte, client.MaxMessage)
	for {
		var req client.Request
		fds, err := client.ReadMsg(cn.c, buf, &req)
		for _, fd := range fds { // clients send none
			unix.Close(fd)
		}
		if err != nil {
			if errors.Is(err, fi.EINVAL) || errors.Is(err, fi.EMSGSIZE) {
				client.WriteMsg(cn.c, &client.Response{Errno: int(fi.Code(err)), Error: err.Error()}, nil)
				continue
			}
			return // closed, or the peer went away
		}
		result, outFDs, err := a.dispatch(cn, &req)
		resp := client.Response{ID: req.ID}
		if err != nil {
			resp.Errno, resp.Error = int(fi.Code(err)), err.Error()
			outFDs = nil
			log.Debug("request failed", "op", req.Op, "err", err)
		} else if result != nil {
			if resp.Result, err = json.Marshal(result); err != nil {
				resp.Errno, resp.Error = int(fi.EIO), err.Error()
			}
		}
		err = client.WriteMsg(cn.c, &resp, outFDs)
		if errors.Is(err, fi.EMSGSIZE) {
			// Requests are bounded so that replies fit; should one not,
			// the caller gets the errno, not a dropped connection.
			err = client.WriteMsg(cn.c, &client.Response{ID: req.ID, Errno: int(fi.EMSGSIZE), Error: err.Error()}, nil)
		}
		if err != nil {
			log.Warn("reply", "op", req.Op, "err", err)
			return
		}
	}
}

func credField(cn *conn, f func(*unix.Ucred) int) int {
	if cn.cred == nil {
		return -1
	}
	return f(cn.cred)
}

// dispatch runs one request. Argument errors are EINVAL.
func (a *Agent) dispatch(cn *conn, req *client.Request) (any, []int, error) {
	decode := func(v any) error {
		if err := json.Unmarshal(req.Args, v); err != nil {
			return fmt.Errorf("%s: arguments: %v: %w", req.Op, err, fi.EINVAL)
		}
		return nil
	}
	switch req.Op {
	case client.OpStatus:
		s, err := a.status(true)
		return s, nil, err
	case client.OpStats:
		s, err := a.stats()
		return s, nil, err
	case client.OpDetach:
		var args client.DetachArgs
		if err := decode(&args); err != nil {
			return nil, nil, err
		}
		return nil, nil, a.detach(args.Iface)
	case client.OpAVCreate:
		var args client.AVCreateArgs
		if err := decode(&args); err != nil {
			return nil, nil, err
		}
		r, err := a.avCreate(args)
		return r, nil, err
	case client.OpAVInsert:
		var args client.AVInsertArgs
		if err := decode(&args); err != nil {
			return nil, nil, err
		}
		r, err := a.avInsert(args)
		return r, nil, err
	case client.OpAVInsertSym:
		var args client.AVInsertSymArgs
		if err := decode(&args); err != nil {
			return nil, nil, err
		}
		r, err := a.avInsertSym(args)
		return r, nil, err
	case client.OpAVRemove:
		var args client.AVRemoveArgs
		if err := decode(&args); err != nil {
			return nil, nil, err
		}
		return nil, nil, a.avRemove(args)
	case client.OpAVLookup:
		var args client.AVLookupArgs
		if err := decode(&args); err != nil {
			return nil, nil, err
		}
		r, err := a.avLookup(args)
		return r, nil, err
	case client.OpAVList:
		var args client.AVListArgs
		if err := decode(&args); err != nil {
			return nil, nil, err
		}
		r, err := a.avList(args)
		return r, nil, err
	case client.OpAVStrAddr:
		var args client.StrAddrArgs
		if err := decode(&args); err != nil {
			return nil, nil, err
		}
		r, err := a.avStrAddr(args)
		return r, nil, err
	case client.OpAVSetUserID:
		var args client.AVSetUserIDArgs
		if err := decode(&args); err != nil {
			return nil, nil, err
		}
		return nil, nil, a.avSetUserID(args)
	case client.OpAVDestroy:
		var args client.AVNameArgs
		if err := decode(&args); err != nil {
			return nil, nil, err
		}
		return nil, nil, a.avDestroy(args.Name)
	case client.OpEPOpen:
		var args client.EPOpenArgs
		if err := decode(&args); err != nil {
			return nil, nil, err
		}
		return a.epOpen(cn, args)
	case client.OpEPClose:
		var args client.EPCloseArgs
		if err := decode(&args); err != nil {
			return nil, nil, err
		}
		return nil, nil, a.epClose(cn, args.ID)
	case client.OpMapsOpen:
		fds, err := a.roFDs()
		return nil, fds, err
	case client.OpEPReport:
		var args client.EPReportArgs
		if err := decode(&args); err != nil {
			return nil, nil, err
		}
		return nil, nil, a.epReport(cn, args)
	case client.OpNeighUse:
		var args client.NeighUseArgs
		if err := decode(&args); err != nil {
			return nil, nil, err
		}
		return nil, nil, a.neighUse(args)
	}
	return nil, nil, fmt.Errorf("unknown operation %q: %w", req.Op, fi.ENOSYS)
}
