//go:build linux

package ctl_test

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
	"golang.org/x/sys/unix"
)

// pair returns two connected SEQPACKET ends.
func pair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "seqpacket")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

func TestMessageRoundTripWithDescriptors(t *testing.T) {
	a, b := pair(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	req := ctl.Request{ID: 7, Op: ctl.OpStatus.Name()}
	if err := ctl.WriteMsg(a, &req, []int{int(w.Fd())}); err != nil {
		t.Fatal(err)
	}
	var got ctl.Request
	fds, err := ctl.ReadMsg(b, &got)
	if err != nil || got.ID != 7 || got.Op != "status" || len(fds) != 1 {
		t.Fatalf("ReadMsg = %+v, %v, %v", got, fds, err)
	}
	// The descriptor is a working duplicate of the pipe's write end.
	f := os.NewFile(uintptr(fds[0]), "dup")
	f.WriteString("x")
	f.Close()
	buf := make([]byte, 1)
	if n, err := r.Read(buf); n != 1 || err != nil {
		t.Fatalf("read through the passed descriptor: %d %v", n, err)
	}
}

// An empty message is a bad message (EINVAL) on a connection that stays
// usable; the end of the connection is io.EOF. SEQPACKET reads both as 0
// bytes.
func TestEmptyMessageIsNotEOF(t *testing.T) {
	a, b := pair(t)
	if _, err := a.Write(nil); err != nil {
		t.Fatal(err)
	}
	var req ctl.Request
	if _, err := ctl.ReadMsg(b, &req); !errors.Is(err, fi.EINVAL) {
		t.Fatalf("empty message: %v, want EINVAL", err)
	}
	if err := ctl.WriteMsg(a, &ctl.Request{ID: 1, Op: "x"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ctl.ReadMsg(b, &req); err != nil || req.ID != 1 {
		t.Fatalf("message after the empty one: %+v %v", req, err)
	}
	a.Close()
	if _, err := ctl.ReadMsg(b, &req); !errors.Is(err, io.EOF) {
		t.Fatalf("after close: %v, want io.EOF", err)
	}
}

func TestBadMessages(t *testing.T) {
	a, b := pair(t)
	var req ctl.Request
	for _, msg := range []string{"{", "[]", `"x"`, "\xff"} {
		if _, err := a.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		if _, err := ctl.ReadMsg(b, &req); !errors.Is(err, fi.EINVAL) {
			t.Errorf("%q: %v, want EINVAL", msg, err)
		}
	}
	// Larger than MaxMessage: EMSGSIZE, and the next one reads. Sending
	// that much in one message needs a send buffer above the default
	// limit, which only root may force.
	if os.Geteuid() == 0 {
		raw, _ := a.SyscallConn()
		raw.Control(func(fd uintptr) {
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4*ctl.MaxMessage)
		})
		if _, err := a.Write(make([]byte, ctl.MaxMessage+1)); err != nil {
			t.Fatal(err)
		}
		if _, err := ctl.ReadMsg(b, &req); !errors.Is(err, fi.EMSGSIZE) {
			t.Errorf("%d bytes: %v, want EMSGSIZE", ctl.MaxMessage+1, err)
		}
		ctl.WriteMsg(a, &ctl.Request{ID: 9}, nil)
		if _, err := ctl.ReadMsg(b, &req); err != nil || req.ID != 9 {
			t.Errorf("after an oversized message: %+v %v", req, err)
		}
	}
	if err := ctl.WriteMsg(a, &ctl.Request{ID: 2}, make([]int, ctl.MaxFDs+1)); !errors.Is(err, fi.EMSGSIZE) {
		t.Errorf("%d descriptors: %v, want EMSGSIZE", ctl.MaxFDs+1, err)
	}
}

// Decode is strict: a field this side does not know is an error, not
// silently dropped.
func TestDecodeStrict(t *testing.T) {
	var args ctl.AVCreateArgs
	if err := ctl.Decode(json.RawMessage(`{"name":"a","count":4}`), &args); err != nil || args.Name != "a" || args.Count != 4 {
		t.Fatalf("Decode = %+v, %v", args, err)
	}
	for _, raw := range []string{`{"name":"a","size":4}`, `{"name":"a"} {}`, `{"count":"four"}`, `[1]`} {
		if err := ctl.Decode(json.RawMessage(raw), &args); !errors.Is(err, fi.EINVAL) {
			t.Errorf("Decode(%s) = %v, want EINVAL", raw, err)
		}
	}
	var none ctl.None
	if err := ctl.Decode(nil, &none); err != nil {
		t.Errorf("Decode(nothing) = %v", err)
	}
}

func TestRemoteError(t *testing.T) {
	r := ctl.ErrorResponse(3, errors.Join(errors.New("busy"), fi.EBUSY))
	err := r.Err()
	if !errors.Is(err, fi.EBUSY) || fi.Code(err) != fi.EBUSY || !strings.Contains(err.Error(), "busy") {
		t.Fatalf("Err() = %v", err)
	}
	if (&ctl.Response{ID: 1}).Err() != nil {
		t.Fatal("success carries an error")
	}
	if err := (&ctl.Response{Errno: -5, Error: "x"}).Err(); !errors.Is(err, fi.EOTHER) {
		t.Fatalf("negative errno: %v", err)
	}
}

func TestVersion(t *testing.T) {
	if err := ctl.CheckVersion("agent", ctl.Version); err != nil {
		t.Fatal(err)
	}
	err := ctl.CheckVersion("agent", ctl.Version+1)
	if !errors.Is(err, fi.ENOPROTOOPT) || !strings.Contains(err.Error(), "version") {
		t.Fatalf("CheckVersion(other) = %v", err)
	}
}

func TestOpsAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, name := range ctl.Ops() {
		if seen[name] || name == "" {
			t.Errorf("operation %q declared twice or empty", name)
		}
		seen[name] = true
	}
	if !seen["hello"] || !seen["av.insert"] {
		t.Errorf("Ops() = %v", ctl.Ops())
	}
}
