package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
	"golang.org/x/sys/unix"
)

// conn is one client connection and what it owns.
type conn struct {
	c      *net.UnixConn
	who    caller
	sndbuf int // the socket's send buffer as accepted (SO_SNDBUF), 0 if unknown

	mu  sync.Mutex
	eps []*clientEP // endpoints to release when the connection ends

	// afterReply releases what the last handler made for its reply
	// (descriptors that only had to live until they were sent); the
	// connection's goroutine runs it after the reply.
	afterReply func()
}

func (a *Agent) accept() error {
	var pause time.Duration
	for {
		c, err := a.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			if !acceptAgain(err) {
				return fmt.Errorf("agent: accept: %w", err)
			}
			// Out of descriptors or memory for now (clients hold many of
			// the agent's descriptors): wait and go on serving, as
			// net/http's server does, instead of ending for everyone.
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			a.log.Warn("accept: waiting, then trying again", "err", err, "wait", pause)
			time.Sleep(pause)
			continue
		}
		pause = 0
		cn := &conn{c: c}
		var credErr error
		if raw, err := c.SyscallConn(); err == nil {
			raw.Control(func(fd uintptr) {
				cn.who, credErr = credentials(int(fd))
				// The send buffer stays the system's default: a reply
				// larger than it gets room for itself alone (sendReply),
				// so a client that reads no replies pins no more of the
				// kernel's memory than its own sockets could.
				cn.sndbuf, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
				refuseRights(int(fd)) // inherited from the listener where the kernel has it
			})
		} else {
			credErr = err
		}
		if credErr != nil {
			cn.who = caller{uid: unknownUID, gid: unknownUID}
		}
		if err := a.admit(cn, credErr); err != nil {
			a.audit(cn.who, "connect", err, nil)
			a.refuse(c, err)
			continue
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
	log := a.log.With("pid", cn.who.pid, "uid", cn.who.uid)
	log.Debug("client connected")
	defer func() {
		a.releaseClient(cn)
		closeConn(cn.c)
		a.mu.Lock()
		delete(a.clients, cn)
		a.nconns--
		a.usageOf(cn.who.uid).conns--
		a.forgetIdle(cn.who.uid)
		a.mu.Unlock()
		log.Debug("client gone")
	}()
	greeted := false
	for {
		var req ctl.Request
		fds, err := ctl.ReadMsgKeepFDs(cn.c, &req)
		if len(fds) > 0 {
			// Clients send none (and the kernel refuses them where it
			// can): closed in the background, the request refused.
			strays.add(fds)
			if err == nil {
				a.logFailure(cn.who, "client attached descriptors", "uid", cn.who.uid, "pid", cn.who.pid, "op", clean(req.Op), "fds", len(fds))
				err = fmt.Errorf("%s: %d descriptors attached; the agent takes none: %w", quote(req.Op), len(fds), fi.EINVAL)
				if a.reply(cn, req.Op, ctl.ErrorResponse(req.ID, err), nil) != nil {
					return
				}
				continue
			}
		}
		if err != nil {
			if errors.Is(err, fi.EINVAL) || errors.Is(err, fi.EMSGSIZE) {
				// A message the agent cannot read: answer, keep the
				// connection (it is still in step: one message, one reply).
				if a.reply(cn, "", ctl.ErrorResponse(0, err), nil) != nil {
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
			if err := a.hello(cn.who, &req); err != nil {
				a.reply(cn, req.Op, ctl.ErrorResponse(req.ID, err), nil)
				return
			}
			greeted = true
			res, _ := json.Marshal(ctl.HelloResult{Version: ctl.Version, Agent: buildVersion()})
			if a.reply(cn, req.Op, &ctl.Response{ID: req.ID, Result: res}, nil) != nil {
				return
			}
			continue
		}
		resp, outFDs := a.dispatch(cn, &req, log)
		err = a.reply(cn, req.Op, resp, outFDs)
		if f := cn.afterReply; f != nil {
			cn.afterReply = nil
			f()
		}
		if err != nil {
			return
		}
	}
}

// acceptAgain reports whether an accept error passes with time: the
// process or the system is out of descriptors or memory, or the peer gave
// up before its connection was taken.
func acceptAgain(err error) bool {
	for _, e := range []error{unix.EMFILE, unix.ENFILE, unix.ENOBUFS, unix.ENOMEM, unix.ECONNABORTED, unix.EINTR} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// hello checks a connection's first request: the handshake.
func (a *Agent) hello(who caller, req *ctl.Request) error {
	if req.Op != ctl.OpHello.Name() {
		a.logFailure(who, "client skipped the handshake", "uid", who.uid, "pid", who.pid, "op", clean(req.Op))
		return fmt.Errorf("the first request must be %q with the protocol version (this agent speaks version %d); the client predates it: %w",
			ctl.OpHello.Name(), ctl.Version, fi.ENOPROTOOPT)
	}
	var h ctl.HelloArgs
	if err := ctl.Decode(req.Args, &h); err != nil {
		return fmt.Errorf("%s: %w", req.Op, err)
	}
	if err := ctl.CheckVersion("client", h.Version); err != nil {
		a.logFailure(who, "client of another protocol version refused", "uid", who.uid, "pid", who.pid,
			"client_version", h.Version, "client", clean(h.Client))
		return err
	}
	return nil
}

// replyTimeout bounds how long one reply may wait for room in the
// connection's socket. A client waits for each answer before it asks
// again, so its replies never wait; one that sends requests and reads no
// answers stalls, and its connection is ended. It is an atomic so that a
// test can shorten it (export_test.go) while other agents' goroutines read
// it.
var replyTimeoutNs atomic.Int64

func init() { replyTimeoutNs.Store(int64(5 * time.Second)) }

func replyTimeout() time.Duration { return time.Duration(replyTimeoutNs.Load()) }

// reply sends one response. A response too large for one message is
// replaced by an EMSGSIZE error, never a dropped connection. An error
// ends the connection.
func (a *Agent) reply(cn *conn, op string, resp *ctl.Response, fds []int) error {
	b, err := ctl.EncodeMsg(resp)
	if err == nil {
		err = a.sendReply(cn, b, fds)
	}
	if errors.Is(err, fi.EMSGSIZE) {
		// Larger than a message, or than the send buffer the agent could
		// get: the client hears why.
		err = a.sendReply(cn, mustEncode(ctl.ErrorResponse(resp.ID, err)), nil)
	}
	if err != nil {
		a.logFailure(cn.who, "reply", "uid", cn.who.uid, "pid", cn.who.pid, "op", clean(op), "err", ctl.ClipText(err.Error(), ctl.MaxErrorText))
	}
	return err
}

func mustEncode(r *ctl.Response) []byte {
	b, err := ctl.EncodeMsg(r)
	if err != nil {
		panic(err) // an error response always encodes
	}
	return b
}

// sendReply writes one encoded reply within replyTimeout. A reply larger
// than the socket's send buffer (an AV listing page, a status with many
// AVs) must fit it whole, SEQPACKET being what it is: the buffer is raised
// to hold it for its own write, and only once the client has read every
// earlier reply (none is queued), so that a client that reads nothing
// holds at most one such reply and a default buffer's worth in the kernel,
// not a raised buffer per connection. Without CAP_NET_ADMIN the raise may
// fall short and the reply is EMSGSIZE.
func (a *Agent) sendReply(cn *conn, b []byte, fds []int) error {
	deadline := time.Now().Add(replyTimeout())
	cn.c.SetWriteDeadline(deadline)
	// 32 bytes of every message's buffer are the kernel's; a page more
	// covers the descriptors' control data.
	if need := len(b) + 4096; cn.sndbuf > 0 && need > cn.sndbuf {
		raw, err := cn.c.SyscallConn()
		if err != nil {
			return err
		}
		if err := drained(raw, deadline); err != nil {
			return err
		}
		setSndbuf(raw, need)
		defer setSndbuf(raw, cn.sndbuf)
	}
	err := ctl.WriteEncoded(cn.c, b, fds)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("the client reads no replies (none read within %v): %w", replyTimeout(), fi.ETIMEDOUT)
	}
	return err
}

// drained waits, until deadline, for the socket to hold no unread reply
// (SIOCOUTQ: the bytes it sent that its peer has not read).
func drained(raw syscall.RawConn, deadline time.Time) error {
	for {
		queued := -1
		raw.Control(func(fd uintptr) { queued, _ = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) })
		if queued <= 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the client reads no replies (%d bytes unread for %v): %w", queued, replyTimeout(), fi.ETIMEDOUT)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// setSndbuf sets the socket's send buffer to n bytes (the kernel doubles
// what it is given, and reports the doubled value).
func setSndbuf(raw syscall.RawConn, n int) {
	raw.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, n/2) != nil {
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, n/2)
		}
	})
}

// refusing bounds the connections being refused at once.
var refusing = make(chan struct{}, 64)

// refuse answers a refused connection's first request with err, then
// closes it. Answering the request (rather than closing at once) lets the
// client read why: a socket closed with an unread message makes the
// peer's next read fail with ECONNRESET instead. The wait is bounded in
// time and in number; beyond that the connection is just closed.
func (a *Agent) refuse(c *net.UnixConn, err error) {
	select {
	case refusing <- struct{}{}:
	default:
		closeConn(c)
		return
	}
	go func() {
		defer func() { <-refusing }()
		defer closeConn(c)
		c.SetDeadline(time.Now().Add(2 * time.Second))
		var req ctl.Request
		fds, rerr := ctl.ReadMsgKeepFDs(c, &req)
		strays.add(fds) // never closed here: a close can wait (closer.go)
		if rerr == nil {
			ctl.WriteMsg(c, ctl.ErrorResponse(req.ID, err), nil)
		}
	}()
}

// admit counts a new connection against the limits, or refuses it.
func (a *Agent) admit(cn *conn, credErr error) error {
	if credErr != nil {
		return fmt.Errorf("cannot tell who connected: %v: %w", credErr, fi.EACCES)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	u := a.usageOf(cn.who.uid)
	switch l := a.cfg.Limits; {
	case a.nconns >= l.Conns:
		return fmt.Errorf("the agent serves %d connections, its limit: %w", a.nconns, fi.EAGAIN)
	case u.conns >= l.ConnsPerUID:
		return fmt.Errorf("uid %d has %d connections open, its limit: %w", cn.who.uid, u.conns, fi.EDQUOT)
	}
	a.nconns++
	u.conns++
	return nil
}

// forgetIdle drops uid's usage record once it holds nothing; a.mu held.
func (a *Agent) forgetIdle(uid uint32) {
	if u := a.usage[uid]; u != nil && *u == (usage{}) {
		delete(a.usage, uid)
	}
}

// usageOf returns uid's usage record; a.mu held.
func (a *Agent) usageOf(uid uint32) *usage {
	u := a.usage[uid]
	if u == nil {
		u = &usage{}
		a.usage[uid] = u
	}
	return u
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
		return ctl.ErrorResponse(req.ID, fmt.Errorf("unknown operation %s: %w", quote(req.Op), fi.ENOSYS)), nil
	}
	result, fds, err := h(cn, req.Args)
	if err == nil {
		var b []byte
		if b, err = json.Marshal(result); err == nil {
			return &ctl.Response{ID: req.ID, Result: b}, fds
		}
		// The descriptors stay the handler's (see handler): not closed.
		err = fmt.Errorf("%s: encode result: %v: %w", req.Op, err, fi.EIO)
	}
	log.Debug("request failed", "op", clean(req.Op), "err", ctl.ClipText(err.Error(), ctl.MaxErrorText))
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

// writeAV guards an audited handler that changes the AV its arguments
// name: the caller must be allowed to write it (mayWriteAV, at once, then
// again on the AV f changes, under the name's lock: changeAV).
func writeAV[A, R any](a *Agent, what string, name func(A) string, f func(avRef, A, *auditRec) (R, error)) func(*conn, A, *auditRec) (R, []int, error) {
	return func(cn *conn, args A, rec *auditRec) (R, []int, error) {
		var r R
		rec.add("av", clean(name(args)))
		if err := a.mayWriteAV(cn.who, what, name(args)); err != nil {
			return r, nil, err
		}
		err := a.changeAV(cn.who, what, name(args), func(ref avRef) (err error) {
			r, err = f(ref, args, rec)
			return err
		})
		return r, nil, err
	}
}

// none adapts an audited function without result to a handler body.
func none[A any](f func(avRef, A, *auditRec) error) func(avRef, A, *auditRec) (ctl.None, error) {
	return func(ref avRef, args A, rec *auditRec) (ctl.None, error) { return ctl.None{}, f(ref, args, rec) }
}

// handlerTable is the agent's dispatch table: one entry per operation.
func (a *Agent) handlerTable() map[string]handler {
	t := map[string]handler{}
	add := func(name string, h handler) { t[name] = h }
	add(plain(ctl.OpStatus, func(ctl.None) (ctl.Status, error) { return a.status(true) }))
	add(plain(ctl.OpStats, func(ctl.None) (map[string]uint64, error) { return a.stats() }))
	add(audited(a, ctl.OpDetach, func(cn *conn, args ctl.DetachArgs, rec *auditRec) (ctl.None, []int, error) {
		rec.add("iface", clean(args.Iface))
		if err := a.requireAdmin(cn.who, "detach "+quote(args.Iface)); err != nil {
			return ctl.None{}, nil, err
		}
		return ctl.None{}, nil, a.detach(args.Iface)
	}))
	add(audited(a, ctl.OpAVCreate, func(cn *conn, args ctl.AVCreateArgs, rec *auditRec) (ctl.AVInfo, []int, error) {
		r, err := a.avCreate(cn.who, args, rec)
		return r, nil, err
	}))
	add(audited(a, ctl.OpAVInsert, writeAV(a, "av insert", func(args ctl.AVInsertArgs) string { return args.Name }, a.avInsert)))
	add(audited(a, ctl.OpAVInsertSym, func(cn *conn, args ctl.AVInsertSymArgs, rec *auditRec) (ctl.InsertResult, []int, error) {
		r, err := a.avInsertSym(cn.who, args, rec) // resolves host names before it takes the AV's locks
		return r, nil, err
	}))
	add(audited(a, ctl.OpAVRemove, writeAV(a, "av remove", func(args ctl.AVRemoveArgs) string { return args.Name }, none(a.avRemove))))
	add(plain(ctl.OpAVLookup, a.avLookup))
	add(plain(ctl.OpAVList, a.avList))
	add(plain(ctl.OpAVStrAddr, a.avStrAddr))
	add(audited(a, ctl.OpAVSetUserID, writeAV(a, "av set-user-id", func(args ctl.AVSetUserIDArgs) string { return args.Name }, none(a.avSetUserID))))
	add(audited(a, ctl.OpAVDestroy, writeAV(a, "av destroy", func(args ctl.AVNameArgs) string { return args.Name },
		func(ref avRef, _ ctl.AVNameArgs, rec *auditRec) (ctl.None, error) {
			return ctl.None{}, a.avDestroy(ref, rec)
		})))
	add(audited(a, ctl.OpEPOpen, a.epOpen))
	add(audited(a, ctl.OpEPClose, func(cn *conn, args ctl.EPCloseArgs, rec *auditRec) (ctl.None, []int, error) {
		rec.add("id", args.ID)
		return ctl.None{}, nil, a.epClose(cn, args.ID)
	}))
	add(typed(ctl.OpEPReport, func(cn *conn, args ctl.EPReportArgs) (ctl.None, []int, error) {
		return ctl.None{}, nil, a.epReport(cn, args)
	}))
	add(typed(ctl.OpMapsOpen, func(cn *conn, args ctl.MapsOpenArgs) (ctl.None, []int, error) {
		// Opened afresh for every request: the AV tables come and go
		// (new AVs, growth), and a handle kept would keep a replaced
		// table's memory alive.
		var ms []*ebpf.Map
		var err error
		if args.AV == "" {
			ms, err = a.dp.ReadOnlyFDs()
		} else if err = av.ValidName(args.AV); err == nil {
			ms, err = a.dp.ReadOnlyFDsFor(args.AV)
		}
		if err != nil {
			return ctl.None{}, nil, err
		}
		if n := len(ms) + len(a.dp.StampFDs()); n > ctl.MaxFDs {
			for _, m := range ms {
				m.Close()
			}
			return ctl.None{}, nil, fmt.Errorf("maps.open: %d descriptors, more than one message carries (%d): name the AV: %w", n, ctl.MaxFDs, fi.EMSGSIZE)
		}
		fds := make([]int, len(ms), len(ms)+2)
		for i, m := range ms {
			fds[i] = m.FD()
		}
		// And the AV change stamps, which tell the client when its
		// copies of AV tables are stale, with their life line, which
		// tells it when this process ended (loader/stamps.go).
		fds = append(fds, a.dp.StampFDs()...)
		cn.afterReply = func() {
			for _, m := range ms {
				m.Close()
			}
		}
		return ctl.None{}, fds, nil
	}))
	add(typed(ctl.OpNeighUse, func(cn *conn, args ctl.NeighUseArgs) (ctl.None, []int, error) {
		return ctl.None{}, nil, a.neighUse(cn, args)
	}))
	add(audited(a, ctl.OpLocalAttach, a.localAttach))
	add(audited(a, ctl.OpLocalConnect, a.localConnect))
	add(typed(ctl.OpLocalAccept, a.localAccept))
	return t
}
