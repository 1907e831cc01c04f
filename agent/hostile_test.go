package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/agent"
	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"golang.org/x/sys/unix"
)

// hostileAgent runs an agent in this process on a new bed's side A, as
// inProcessAgent does, logging JSON into the returned buffer; stop ends
// it and returns Run's error (the test's cleanup does, if it has not).
func hostileAgent(t *testing.T, adjust ...func(*agent.Config)) (bed *testbed.Bed, sock string, logs *syncBuffer, stop func() error) {
	t.Helper()
	logs = &syncBuffer{}
	json := func(c *agent.Config) {
		c.SocketGroup, c.MetricsAddr, c.Logger = fmt.Sprint(nobody), "", slog.New(slog.NewJSONHandler(logs, nil))
	}
	_, bed, sock, stop = runAgent(t, append([]func(*agent.Config){json}, adjust...)...)
	return bed, sock, logs, stop
}

// dialRawAs is dialRaw from a thread with uid's credentials (and gid
// nobody): the connection is uid's.
func dialRawAs(t *testing.T, sock string, uid int) *rawConn {
	t.Helper()
	var c *net.UnixConn
	var err error
	asUser(t, uid, nobody, func() {
		c, err = net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c}
}

// jsonLines decodes the log's JSON lines.
func jsonLines(t *testing.T, logs *syncBuffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(logs.String(), "\n") {
		var m map[string]any
		if l != "" && json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// A client that writes megabytes of strings into its requests gets them
// into no log line and no error it is sent, beyond a few dozen bytes each:
// a 180 KB AV name, interface, address, destination, operation, client
// name or unknown field used to come back whole in the refusal, and twice
// in the audit line (the name, and the error quoting it), 30 MB a second
// of log from one connection. And a client sending refused requests as
// fast as it can gets a few lines a second and a count of the rest, while
// another uid's lines are all written: the flood buries nothing.
func TestHostileStringsStayOutOfTheLog(t *testing.T) {
	_, sock, logs, _ := hostileAgent(t, func(c *agent.Config) {
		c.Limits.ConnsPerUID = 4
		c.GCInterval = 200 * time.Millisecond
	})
	huge := strings.Repeat("A\n\u202eB", 30000) // 180 KB of what a log line should not carry
	hugeJSON, _ := json.Marshal(huge)
	bigBuffer := func(r *rawConn) { // a client may have 4 MiB (wmem_max) without privileges
		raw, _ := r.c.SyscallConn()
		raw.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, 2<<20) })
	}
	evil := dialRawAs(t, sock, nobody)
	bigBuffer(evil)
	if resp, err := evil.call(ctl.OpHello.Name(), fmt.Sprintf(`{"version":%d,"client":%s}`, ctl.Version, hugeJSON)); err != nil || resp.Err() != nil {
		t.Fatalf("hello: %v %v", err, resp.Err())
	}
	for _, c := range []struct{ op, args string }{
		{ctl.OpAVCreate.Name(), fmt.Sprintf(`{"name":%s}`, hugeJSON)},
		{ctl.OpAVCreate.Name(), fmt.Sprintf(`{"name":"x","type":%s,"group":%s}`, hugeJSON, hugeJSON)},
		{ctl.OpAVInsert.Name(), fmt.Sprintf(`{"name":%s,"addrs":["198.18.0.1:1"]}`, hugeJSON)},
		{ctl.OpAVDestroy.Name(), fmt.Sprintf(`{"name":%s}`, hugeJSON)},
		{ctl.OpAVList.Name(), fmt.Sprintf(`{"name":%s}`, hugeJSON)},
		{ctl.OpEPOpen.Name(), fmt.Sprintf(`{"iface":%s,"local":%s,"av":%s}`, hugeJSON, hugeJSON, hugeJSON)},
		{ctl.OpEPOpen.Name(), fmt.Sprintf(`{"iface":"veth0","local":"198.18.0.1:7000","av":%s,"domain":%s}`, hugeJSON, hugeJSON)},
		{ctl.OpLocalConnect.Name(), fmt.Sprintf(`{"id":1,"dest":%s}`, hugeJSON)},
		{ctl.OpDetach.Name(), fmt.Sprintf(`{"iface":%s}`, hugeJSON)},
		{huge, `{}`},
		{ctl.OpStatus.Name(), fmt.Sprintf(`{%s:1}`, hugeJSON)},
		{ctl.OpAVCreate.Name(), fmt.Sprintf(`{"name":"x","count":1%s}`, strings.Repeat("0", 180000))},
	} {
		resp, err := evil.call(c.op, c.args)
		if err != nil {
			t.Fatalf("%.20s: %v", c.op, err)
		}
		if resp.Errno == 0 {
			t.Errorf("%.20s %.40s: accepted", c.op, c.args)
		}
		if len(resp.Error) > ctl.MaxErrorText+64 || strings.ContainsAny(resp.Error, "\n\x00\u202e") {
			t.Errorf("%.20s: a refusal of %d bytes: %.200q", c.op, len(resp.Error), resp.Error)
		}
	}
	skipper := dialRawAs(t, sock, nobody) // a first request that is not the handshake
	bigBuffer(skipper)
	if _, err := skipper.call(huge, `{}`); err != nil {
		t.Fatal(err)
	}
	for _, m := range jsonLines(t, logs) {
		b, _ := json.Marshal(m)
		if len(b) > 2048 || strings.ContainsRune(string(b), '\u202e') {
			t.Fatalf("a log line of %d bytes: %.300s", len(b), b)
		}
	}
	for _, m := range jsonLines(t, logs) {
		if m["op"] == ctl.OpAVCreate.Name() && m["uid"] == float64(nobody) {
			if av, _ := m["av"].(string); !strings.HasPrefix(av, `A\n\u202eB`) || !strings.HasSuffix(av, "(180000 bytes)") {
				t.Errorf("the audit line's av %q: want the name's start, escaped, and its length", av)
			}
			break
		}
	}

	// The flood: 2000 refused requests, as fast as the agent answers.
	start, before := time.Now(), len(jsonLines(t, logs))
	for range 2000 {
		if _, err := evil.call(ctl.OpAVInsert.Name(), `{"name":"nosuch","addrs":["198.18.0.1:1"]}`); err != nil {
			t.Fatal(err)
		}
	}
	// And refused connections: 4 allowed, the rest of 100 refused.
	for range 100 {
		asUser(t, nobody, nobody, func() {
			if c, err := client.Dial(sock); err == nil {
				t.Cleanup(func() { c.Close() })
			}
		})
	}
	elapsed := time.Since(start)
	root, err := client.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	_, err = root.AVCreate(ctl.AVCreateArgs{Name: "genuine", Type: "neither"})
	wantErrno(t, "root's bad create", err, fi.EINVAL)
	if _, err := root.AVCreate(ctl.AVCreateArgs{Name: "genuine"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // a collection reports what was held back
	lines := jsonLines(t, logs)
	nobodys, suppressed := 0, 0.0
	rootRefused, rootMade := false, false
	for _, m := range lines[before:] {
		if m["uid"] == float64(nobody) && m["level"] == "WARN" {
			nobodys++
		}
		if n, ok := m["suppressed"].(float64); ok && m["uid"] == float64(nobody) {
			suppressed += n
		}
		if m["op"] == ctl.OpAVCreate.Name() && m["uid"] == 0.0 && m["av"] == "genuine" {
			rootRefused = rootRefused || m["result"] == "EINVAL"
			rootMade = rootMade || m["result"] == "ok"
		}
	}
	// A burst of 50 and 5 a second, the reports of what was held back
	// included.
	if limit := 50 + int(5*elapsed.Seconds()) + 10; nobodys > limit {
		t.Errorf("2000 refused requests and 100 refused connections in %v wrote %d lines of uid %d, want at most %d", elapsed, nobodys, nobody, limit)
	}
	if int(suppressed)+nobodys < 2000 {
		t.Errorf("%d lines written and %v reported suppressed: the flood's count is lost", nobodys, suppressed)
	}
	if !rootRefused || !rootMade {
		t.Errorf("root's audit lines after the flood: refused %v, made %v", rootRefused, rootMade)
	}
}

// A client that sends requests and reads no replies has its connection
// ended once a reply waited replyTimeout for room, and holds at most one
// large reply in the kernel meanwhile: the agent used to raise every
// connection's send buffer to 4 MiB, so eight 530 KB pages of an AV list
// sat in the kernel per connection, for as long as the client liked. A
// client that reads gets its large replies as before.
func TestClientThatReadsNoReplies(t *testing.T) {
	t.Cleanup(agent.SetReplyTimeout(time.Second)) // after the agent's own cleanup
	_, sock, _, _ := hostileAgent(t)
	root, err := client.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := root.AVCreate(ctl.AVCreateArgs{Name: "big"}); err != nil {
		t.Fatal(err)
	}
	addrs := make([]string, 5000)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("198.19.%d.%d:%d", i/250, i%250+1, 7000)
	}
	if r, err := root.AVInsert(ctl.AVInsertArgs{Name: "big", Addrs: addrs}); err != nil || r.Inserted != len(addrs) {
		t.Fatal(r.Inserted, err)
	}
	evil := dialRawAs(t, sock, nobody)
	if _, err := evil.hello(ctl.Version); err != nil {
		t.Fatal(err)
	}
	const asked = 20
	evil.c.SetWriteDeadline(time.Now().Add(2 * time.Second))
	for i := range asked {
		req := ctl.Request{ID: uint64(100 + i), Op: ctl.OpAVList.Name(), Args: json.RawMessage(`{"name":"big"}`)}
		if err := ctl.WriteMsg(evil.c, &req, nil); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	time.Sleep(2 * time.Second) // past the agent's reply timeout (1 s here)
	evil.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, bytes := 0, 0
	var end error
	for {
		var resp ctl.Response
		buf := make([]byte, ctl.MaxMessage)
		n, _, _, _, err := evil.c.ReadMsgUnix(buf, nil)
		if errors.Is(err, unix.ECONNRESET) && end == nil {
			// The agent closed with requests unread: the first read
			// says so, the next ones return what it had sent.
			end = err
			continue
		}
		if err != nil || n == 0 {
			break
		}
		if json.Unmarshal(buf[:n], &resp) != nil || resp.Err() != nil {
			t.Fatalf("reply %d: %.200s", got, buf[:n])
		}
		got++
		bytes += n
	}
	t.Logf("%d replies (%d KB) before the connection ended (%v)", got, bytes>>10, end)
	if got >= asked || got > 2 {
		t.Errorf("a client that read nothing for 2 s then got %d of its %d replies: the agent held them", got, asked)
	}
	if !errors.Is(end, unix.ECONNRESET) {
		t.Errorf("the connection ended with %v, want the agent's close (ECONNRESET: requests left unread)", end)
	}
	// Large replies for a client that reads them.
	if l, err := root.AVList("big"); err != nil || len(l.List) != len(addrs) {
		t.Errorf("a list of %d entries: %d, %v", len(addrs), len(l.List), err)
	}
}

// lingeringSockets makes n TCP sockets in host A, each connected to a
// listener on host B that never reads, with unsent data queued and
// SO_LINGER of linger: the last close of one waits that long. The sockets
// B accepted are closed at the end of the test.
func lingeringSockets(t *testing.T, bed *testbed.Bed, n int, linger time.Duration) []int {
	t.Helper()
	var ln net.Listener
	err := bed.B.Do(func() (err error) {
		lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
			return c.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 2048) })
		}}
		ln, err = lc.Listen(context.Background(), "tcp4", netip.AddrPortFrom(bed.B.IPv4, 0).String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	junk := make([]byte, 64<<10)
	var fds []int
	for range n {
		c, err := bed.A.Dial("tcp4", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := c.(*net.TCPConn).SyscallConn()
		fd := -1
		raw.Control(func(s uintptr) {
			unix.SetsockoptInt(int(s), unix.SOL_SOCKET, unix.SO_SNDBUF, 2048)
			fd, err = unix.Dup(int(s))
		})
		c.Close() // not the last reference: the duplicate is
		if err != nil {
			t.Fatal(err)
		}
		// Fill the peer's window and the send buffer (the duplicate shares
		// the file's O_NONBLOCK).
		for deadline := time.Now().Add(5 * time.Second); ; {
			if _, err := unix.Write(fd, junk); errors.Is(err, unix.EAGAIN) {
				break
			} else if err != nil || time.Now().After(deadline) {
				t.Fatalf("fill the socket: %v", err)
			}
		}
		if err := unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: int32(linger / time.Second)}); err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
	}
	return fds
}

// sendWithFD sends req over c with fd attached, then lets go of this
// process's reference: the agent's, if it took the descriptor, is the
// last. A send the kernel refuses (the agent's socket does not take
// descriptors) returns false, and the socket is aborted so that closing it
// here does not wait.
func sendWithFD(t *testing.T, c *net.UnixConn, req ctl.Request, fd int) bool {
	t.Helper()
	return sendWithFDClosed(t, c, req, fd) != nil
}

// sendWithFDClosed is sendWithFD that closes the test's own copy of a sent
// descriptor in the background and returns a channel closed when that
// close returned (nil when the descriptor was not sent): of the test's
// close and the agent's, whichever is the last lingers, and it must not
// be the test's that the measurements wait for.
func sendWithFDClosed(t *testing.T, c *net.UnixConn, req ctl.Request, fd int) chan struct{} {
	t.Helper()
	err := ctl.WriteMsg(c, &req, []int{fd})
	if err != nil {
		// EPERM: the kernel refuses descriptors to the agent. EPIPE,
		// ECONNRESET: a refused connection the agent already closed
		// (the refusal does not wait for what the client sends).
		if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EPIPE) && !errors.Is(err, unix.ECONNRESET) {
			t.Fatalf("send a descriptor: %v", err)
		}
		unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
		unix.Close(fd)
		return nil
	}
	done := make(chan struct{})
	go func() {
		unix.Close(fd)
		close(done)
	}()
	return done
}

// Descriptors a client attaches are never closed where the agent serves:
// the last close of a TCP socket lingering with unsent data towards a peer
// that does not read waits out its linger time (4 s here), and the agent
// used to close them on the connection's goroutine (its next reply came
// that late), in its refusal slots (64 such refusals and every other
// refused client was cut off without a reason), and before shutdown could
// finish. The kernel refuses them (SO_PASSRIGHTS, Linux 6.16 and later),
// or the agent refuses the request and closes them in the background (on
// an older kernel: SetRefuseRights(false)).
func TestLingeringDescriptors(t *testing.T) {
	t.Run("kernel refuses them", func(t *testing.T) { lingeringDescriptors(t, true) })
	t.Run("kernel lets them through", func(t *testing.T) {
		defer agent.SetRefuseRights(agent.SetRefuseRights(false))
		lingeringDescriptors(t, false)
	})
}

func lingeringDescriptors(t *testing.T, refused bool) {
	bed, sock, _, stop := hostileAgent(t, func(c *agent.Config) { c.Limits.ConnsPerUID = 1 })
	const linger = 4 * time.Second
	fds := lingeringSockets(t, bed, 72, linger)

	// On a served connection: the next request is answered at once.
	evil := dialRawAs(t, sock, nobody)
	if _, err := evil.hello(ctl.Version); err != nil {
		t.Fatal(err)
	}
	evil.next++
	start := time.Now()
	if local := sendWithFDClosed(t, evil.c, ctl.Request{ID: evil.next, Op: ctl.OpStatus.Name()}, fds[0]); local != nil {
		resp, err := evil.read()
		if err != nil || !errors.Is(resp.Err(), fi.EINVAL) {
			t.Errorf("a request with a descriptor: %+v %v, want EINVAL", resp, err)
		}
		// One of the two closes lingers: the agent's, in the background,
		// unless the test's came last.
		select {
		case <-local:
			if n := agent.StraysPending(); n == 0 {
				t.Errorf("the lingering socket is not being closed in the background")
			}
		default:
		}
	} else if !refused {
		t.Fatal("the kernel refused a descriptor the agent did not ask it to refuse")
	}
	if resp, err := evil.call(ctl.OpStatus.Name(), ""); err != nil || resp.Err() != nil {
		t.Fatalf("status: %v %v", err, resp.Err())
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("a request with a lingering socket attached and the next were answered after %v", d)
	}

	// Refused connections (uid nobody has its one): 70 send a lingering
	// socket each, then another refused client still hears why.
	for _, fd := range fds[1:71] {
		var c *net.UnixConn
		var err error
		asUser(t, nobody, nobody, func() {
			c, err = net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
		})
		if err != nil {
			t.Fatal(err)
		}
		sendWithFD(t, c, ctl.Request{ID: 1, Op: ctl.OpHello.Name(), Args: json.RawMessage(fmt.Sprintf(`{"version":%d}`, ctl.Version))}, fd)
		c.Close()
	}
	var err error
	start = time.Now()
	for deadline := start.Add(time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, err = dialAs(t, sock, nobody, nobody)
		if errors.Is(err, fi.EDQUOT) || time.Now().After(deadline) {
			break
		}
	}
	wantErrno(t, "a refused client after 70 refused ones that sent lingering sockets", err, fi.EDQUOT)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a refused client after 70 refused ones that sent lingering sockets heard why after %v", d)
	}

	// Shutdown does not wait for a close either.
	evil.next++
	sendWithFD(t, evil.c, ctl.Request{ID: evil.next, Op: ctl.OpStatus.Name()}, fds[71])
	time.Sleep(100 * time.Millisecond) // the agent has it, if the kernel let it through
	start = time.Now()
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("shutdown took %v", d)
	}
}
