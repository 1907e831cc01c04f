package agent_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
)

// rawConn is a control connection that speaks the protocol by hand.
type rawConn struct {
	t    *testing.T
	c    *net.UnixConn
	next uint64
}

func dialRaw(t *testing.T, sock string) *rawConn {
	t.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c}
}

// call sends op with raw JSON args and returns the response; err is set
// when the agent ended the connection instead of answering.
func (r *rawConn) call(op, args string) (ctl.Response, error) {
	r.next++
	req := ctl.Request{ID: r.next, Op: op}
	if args != "" {
		req.Args = json.RawMessage(args)
	}
	if err := ctl.WriteMsg(r.c, &req, nil); err != nil {
		return ctl.Response{}, err
	}
	return r.read()
}

func (r *rawConn) read() (ctl.Response, error) {
	var resp ctl.Response
	fds, err := ctl.ReadMsg(r.c, &resp)
	for range fds {
		r.t.Errorf("unexpected descriptors")
	}
	return resp, err
}

func (r *rawConn) hello(version int) (ctl.Response, error) {
	return r.call(ctl.OpHello.Name(), fmt.Sprintf(`{"version":%d,"client":"test"}`, version))
}

// The handshake: a client of another protocol version, or one that skips
// the handshake, is refused with ENOPROTOOPT and a message naming the
// versions, and the connection ends; nothing it sent is interpreted.
func TestProtocolHandshake(t *testing.T) {
	_, _, sock := inProcessAgent(t)

	t.Run("other version", func(t *testing.T) {
		r := dialRaw(t, sock)
		resp, err := r.hello(ctl.Version + 1)
		if err != nil {
			t.Fatal(err)
		}
		msg := resp.Err()
		if !errors.Is(msg, fi.ENOPROTOOPT) || !strings.Contains(msg.Error(), fmt.Sprint("version ", ctl.Version+1)) ||
			!strings.Contains(msg.Error(), fmt.Sprint("version ", ctl.Version)) {
			t.Fatalf("hello of version %d: %v", ctl.Version+1, msg)
		}
		if _, err := r.call(ctl.OpAVCreate.Name(), `{"name":"sneaky"}`); err == nil {
			t.Fatal("the agent answered after refusing the handshake")
		}
		if st := status(t, sock); len(st.AVs) != 0 {
			t.Errorf("a refused client created AVs: %+v", st.AVs)
		}
	})
	t.Run("no handshake", func(t *testing.T) {
		r := dialRaw(t, sock)
		resp, err := r.call(ctl.OpAVCreate.Name(), `{"name":"early"}`)
		if err != nil {
			t.Fatal(err)
		}
		if msg := resp.Err(); !errors.Is(msg, fi.ENOPROTOOPT) || !strings.Contains(msg.Error(), "hello") {
			t.Fatalf("request before hello: %v", msg)
		}
		if _, err := r.read(); !errors.Is(err, io.EOF) {
			t.Fatalf("connection after a refused first request: %v, want EOF", err)
		}
		if st := status(t, sock); len(st.AVs) != 0 {
			t.Errorf("a request before the handshake ran: %+v", st.AVs)
		}
	})
	t.Run("same version", func(t *testing.T) {
		r := dialRaw(t, sock)
		resp, err := r.hello(ctl.Version)
		if err != nil || resp.Err() != nil {
			t.Fatalf("hello: %v %v", err, resp.Err())
		}
		var h ctl.HelloResult
		if err := json.Unmarshal(resp.Result, &h); err != nil || h.Version != ctl.Version {
			t.Fatalf("hello result %s: %v", resp.Result, err)
		}
		// After the handshake: bad requests are answered, the connection
		// stays.
		for _, c := range []struct{ op, args string }{
			{"no.such.op", ""},
			{ctl.OpAVCreate.Name(), `{"name":"x","unknown_field":1}`},
			{ctl.OpAVCreate.Name(), `{"name":7}`},
			{ctl.OpHello.Name(), `{"version":1}`}, // only the first request is the handshake
		} {
			resp, err := r.call(c.op, c.args)
			if err != nil || resp.Err() == nil {
				t.Errorf("%s %s: answered %+v, %v; want an error", c.op, c.args, resp, err)
			}
		}
		if _, err := r.c.Write(nil); err != nil { // an empty message
			t.Fatal(err)
		}
		if resp, err := r.read(); err != nil || !errors.Is(resp.Err(), fi.EINVAL) {
			t.Errorf("empty message: %+v %v, want EINVAL", resp, err)
		}
		if resp, err := r.call(ctl.OpStatus.Name(), ""); err != nil || resp.Err() != nil {
			t.Errorf("status after bad requests: %v %v", err, resp.Err())
		}
	})
}

func status(t *testing.T, sock string) ctl.Status {
	t.Helper()
	c, err := client.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := c.Status()
	if err != nil {
		t.Fatal(err)
	}
	return st
}
