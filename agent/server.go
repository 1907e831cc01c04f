package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"

	"github.com/xdpfab/xdpfab/ctl"
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
				unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 2*ctl.MaxMessage)
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

// serve answers one connection's requests in order, starting with the
// version handshake. When the connection ends (the process closed it or
// died), its endpoints are released.
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
	buf := make([]byte, ctl.MaxMessage)
	greeted := false
	for {
		var req ctl.Request
		fds, err := ctl.ReadMsg(cn.c, buf, &req)
		closeFDs(fds) // clients send none
		if err != nil {
			if errors.Is(err, fi.EINVAL) || errors.Is(err, fi.EMSGSIZE) {
				// A message the agent cannot read: answer, keep the
				// connection (it is still in step: one message, one reply).
				if a.reply(cn, log, "", ctl.ErrorResponse(0, err), nil) != nil {
					return
				}
				continue
			}
			if !errors.Is(err, io.EOF) {
				log.Debug("read", "err", err)
			}
			return // closed, or the peer went away
		}
		if !greeted {
			if err := a.hello(&req, log); err != nil {
				a.reply(cn, log, req.Op, ctl.ErrorResponse(req.ID, err), nil)
				return
			}
			greeted = true
			res, _ := json.Marshal(ctl.HelloResult{Version: ctl.Version, Agent: buildVersion()})
			if a.reply(cn, log, req.Op, &ctl.Response{ID: req.ID, Result: res}, nil) != nil {
				return
			}
			continue
		}
		resp, outFDs := a.dispatch(cn, &req, log)
		if a.reply(cn, log, req.Op, resp, outFDs) != nil {
			return
		}
	}
}

// hello checks a connection's first request: the handshake.
func (a *Agent) hello(req *ctl.Request, log *slog.Logger) error {
	if req.Op != ctl.OpHello.Name() {
		log.Warn("client skipped the handshake", "op", req.Op)
		return fmt.Errorf("the first request must be %q with the protocol version (this agent speaks version %d); the client predates it: %w",
			ctl.OpHello.Name(), ctl.Version, fi.ENOPROTOOPT)
	}
	var h ctl.HelloArgs
	if err := ctl.Decode(req.Args, &h); err != nil {
		return fmt.Errorf("%s: %w", req.Op, err)
	}
	if err := ctl.CheckVersion("client", h.Version); err != nil {
		log.Warn("client of another protocol version refused", "client_version", h.Version, "client", h.Client)
		return err
	}
	return nil
}

// reply sends one response. A response too large for one message is
// replaced by an EMSGSIZE error, never a dropped connection.
func (a *Agent) reply(cn *conn, log *slog.Logger, op string, resp *ctl.Response, fds []int) error {
	err := ctl.WriteMsg(cn.c, resp, fds)
	if errors.Is(err, fi.EMSGSIZE) {
		err = ctl.WriteMsg(cn.c, ctl.ErrorResponse(resp.ID, err), nil)
	}
	if err != nil {
		log.Warn("reply", "op", op, "err", err)
	}
	return err
}

func credField(cn *conn, f func(*unix.Ucred) int) int {
	if cn.cred == nil {
		return -1
	}
	return f(cn.cred)
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// dispatch runs one request through its handler and builds the response.
func (a *Agent) dispatch(cn *conn, req *ctl.Request, log *slog.Logger) (*ctl.Response, []int) {
	h, ok := a.handlers[req.Op]
	if !ok {
		return ctl.ErrorResponse(req.ID, fmt.Errorf("unknown operation %q: %w", req.Op, fi.ENOSYS)), nil
	}
	result, fds, err := h(cn, req.Args)
	if err == nil {
		var b []byte
		if b, err = json.Marshal(result); err == nil {
			return &ctl.Response{ID: req.ID, Result: b}, fds
		}
		closeFDs(fds)
		err = fmt.Errorf("%s: encode result: %v: %w", req.Op, err, fi.EIO)
	}
	log.Debug("request failed", "op", req.Op, "err", err)
	return ctl.ErrorResponse(req.ID, err), nil
}

// handler runs one operation on its raw arguments. Descriptors returned
// travel with the response and stay the handler's (SCM_RIGHTS duplicates
// them).
type handler func(cn *conn, args json.RawMessage) (any, []int, error)

// typed makes a handler of f for op: the arguments are decoded strictly
// into op's argument type, and f's result is op's result type.
func typed[A, R any](op ctl.Op[A, R], f func(cn *conn, args A) (R, []int, error)) (string, handler) {
	return op.Name(), func(cn *conn, raw json.RawMessage) (any, []int, error) {
		var args A
		if err := ctl.Decode(raw, &args); err != nil {
			return nil, nil, fmt.Errorf("%s: arguments: %w", op.Name(), err)
		}
		return f(cn, args)
	}
}

// plain is typed for handlers that neither need the connection nor return
// descriptors.
func plain[A, R any](op ctl.Op[A, R], f func(args A) (R, error)) (string, handler) {
	return typed(op, func(_ *conn, args A) (R, []int, error) {
		r, err := f(args)
		return r, nil, err
	})
}

// none adapts a function without result to a handler body.
func none[A any](f func(A) error) func(A) (ctl.None, error) {
	return func(args A) (ctl.None, error) { return ctl.None{}, f(args) }
}

// handlerTable is the agent's dispatch table: one entry per operation.
func (a *Agent) handlerTable() map[string]handler {
	t := map[string]handler{}
	add := func(name string, h handler) { t[name] = h }
	add(plain(ctl.OpStatus, func(ctl.None) (ctl.Status, error) { return a.status(true) }))
	add(plain(ctl.OpStats, func(ctl.None) (map[string]uint64, error) { return a.stats() }))
	add(plain(ctl.OpDetach, none(func(args ctl.DetachArgs) error { return a.detach(args.Iface) })))
	add(plain(ctl.OpAVCreate, a.avCreate))
	add(plain(ctl.OpAVInsert, a.avInsert))
	add(plain(ctl.OpAVInsertSym, a.avInsertSym))
	add(plain(ctl.OpAVRemove, none(a.avRemove)))
	add(plain(ctl.OpAVLookup, a.avLookup))
	add(plain(ctl.OpAVList, a.avList))
	add(plain(ctl.OpAVStrAddr, a.avStrAddr))
	add(plain(ctl.OpAVSetUserID, none(a.avSetUserID)))
	add(plain(ctl.OpAVDestroy, none(func(args ctl.AVNameArgs) error { return a.avDestroy(args.Name) })))
	add(typed(ctl.OpEPOpen, a.epOpen))
	add(typed(ctl.OpEPClose, func(cn *conn, args ctl.EPCloseArgs) (ctl.None, []int, error) {
		return ctl.None{}, nil, a.epClose(cn, args.ID)
	}))
	add(typed(ctl.OpEPReport, func(cn *conn, args ctl.EPReportArgs) (ctl.None, []int, error) {
		return ctl.None{}, nil, a.epReport(cn, args)
	}))
	add(typed(ctl.OpMapsOpen, func(*conn, ctl.None) (ctl.None, []int, error) {
		fds, err := a.roFDs()
		return ctl.None{}, fds, err
	}))
	add(plain(ctl.OpNeighUse, none(a.neighUse)))
	return t
}
