package ctl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/xdpfab/xdpfab/fi"
	"golang.org/x/sys/unix"
)

// DefaultSocket is where the agent listens unless told otherwise.
const DefaultSocket = "/run/xdpfab/agent.sock"

// MaxFDs is the most descriptors one message carries (the kernel's
// SCM_MAX_FD).
const MaxFDs = 253

// MaxMessage bounds one message. A SEQPACKET message must also fit its
// sender's socket buffer: the agent raises its own for a reply larger
// than the buffer, for that reply alone (SO_SNDBUFFORCE); a client's stays
// at the system default (about 208 KiB on Debian), which is why package
// client sends large AV inserts in batches.
const MaxMessage = 1 << 20

// Request is one call.
type Request struct {
	ID   uint64          `json:"id"`
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args,omitempty"`
}

// Response answers the Request with the same ID. ID 0 answers a message
// the agent could not read (so it could not name it).
type Response struct {
	ID     uint64          `json:"id"`
	Errno  int             `json:"errno,omitempty"`
	Error  string          `json:"error,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// ErrorResponse is the response to request id that failed with err. The
// errno is err's libfabric code (fi.Code); the message is err's, cut to
// MaxErrorText bytes. A nil err, which says nothing of the failure, is
// answered as fi.EOTHER.
func ErrorResponse(id uint64, err error) *Response {
	if err == nil {
		err = fmt.Errorf("failed without an error: %w", fi.EOTHER)
	}
	return &Response{ID: id, Errno: int(fi.Code(err)), Error: ClipText(err.Error(), MaxErrorText)}
}

// Err rebuilds the error a response carries: nil on success, else a
// *RemoteError. A nil *Response carries no answer: fi.EINVAL.
func (r *Response) Err() error {
	if r == nil {
		return fmt.Errorf("nil response: %w", fi.EINVAL)
	}
	if r.Errno == 0 && r.Error == "" {
		return nil
	}
	code := fi.Errno(r.Errno)
	if code <= 0 {
		code = fi.EOTHER
	}
	return &RemoteError{Msg: r.Error, Code: code}
}

// RemoteError is an error the agent reported. errors.Is matches its errno.
type RemoteError struct {
	Msg  string
	Code fi.Errno
}

func (e *RemoteError) Error() string {
	if e == nil {
		return "<nil>"
	}
	return "agent: " + e.Msg
}

// Unwrap exposes the errno to errors.Is and fi.Code (nil for a nil
// *RemoteError).
func (e *RemoteError) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Code
}

// Decode unmarshals one operation's arguments or result strictly: unknown
// fields and trailing data are EINVAL, so a field the other side means but
// this side does not know is never silently ignored. Empty input decodes
// to the zero value.
func Decode(raw json.RawMessage, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		// The decoder quotes what it could not take (an unknown field's
		// name, a number's digits): as long as the peer made it.
		return fmt.Errorf("%s: %w", ClipText(err.Error(), 2*MaxQuoted), fi.EINVAL)
	}
	if d.More() {
		return fmt.Errorf("trailing data after the JSON value: %w", fi.EINVAL)
	}
	return nil
}

// WriteMsg sends v as one message with fds attached (SCM_RIGHTS). A nil
// connection is fi.EINVAL.
func WriteMsg(c *net.UnixConn, v any, fds []int) error {
	if c == nil {
		return fmt.Errorf("write message: nil connection: %w", fi.EINVAL)
	}
	b, err := EncodeMsg(v)
	if err != nil {
		return err
	}
	return WriteEncoded(c, b, fds)
}

// EncodeMsg encodes v as one message for WriteEncoded: for a writer that
// needs the message's size before it sends it. A message larger than
// MaxMessage is fi.EMSGSIZE.
func EncodeMsg(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode message: %v: %w", err, fi.EINVAL)
	}
	if len(b) > MaxMessage {
		return nil, fmt.Errorf("message of %d bytes, at most %d: %w", len(b), MaxMessage, fi.EMSGSIZE)
	}
	return b, nil
}

// WriteEncoded sends a message EncodeMsg made, with fds attached. A nil
// connection is fi.EINVAL.
func WriteEncoded(c *net.UnixConn, b []byte, fds []int) error {
	if c == nil {
		return fmt.Errorf("write message: nil connection: %w", fi.EINVAL)
	}
	if len(b) > MaxMessage {
		return fmt.Errorf("message of %d bytes, at most %d: %w", len(b), MaxMessage, fi.EMSGSIZE)
	}
	if len(fds) > MaxFDs {
		return fmt.Errorf("%d descriptors in one message, at most %d: %w", len(fds), MaxFDs, fi.EMSGSIZE)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	_, _, err := c.WriteMsgUnix(b, oob, nil)
	if errors.Is(err, unix.EMSGSIZE) {
		// A SEQPACKET message must fit the sender's socket buffer.
		return fmt.Errorf("message of %d bytes does not fit the socket buffer: %w", len(b), fi.EMSGSIZE)
	}
	return err
}

// ReadMsg receives one message into v and returns the descriptors it
// carried; the caller owns them. It holds no buffer while it waits: the
// message's length is learnt first and a buffer of that size is used for
// it alone, so an idle connection costs no message buffer. The end of the
// connection is io.EOF. A message that is empty, larger than MaxMessage,
// carries too many descriptors or is not one JSON document is an error
// wrapping fi.EINVAL or fi.EMSGSIZE, after which the connection stays
// usable (the message is consumed); its descriptors are closed. A nil
// connection is fi.EINVAL.
func ReadMsg(c *net.UnixConn, v any) ([]int, error) {
	fds, err := ReadMsgKeepFDs(c, v)
	if err != nil {
		closeFDs(fds)
		return nil, err
	}
	return fds, nil
}

// ReadMsgKeepFDs is ReadMsg for a reader that must not close what its peer
// attached on its own time: the descriptors the message carried are
// returned whether or not the message could be read, and closing them is
// the caller's. The last close of a file can wait for as long as its other
// end likes (a TCP socket lingering with unsent data towards a peer that
// does not read, a FUSE file whose daemon does not answer), so a server
// hands them to a closer of its own instead of closing them where it
// serves.
func ReadMsgKeepFDs(c *net.UnixConn, v any) ([]int, error) {
	if c == nil {
		return nil, fmt.Errorf("read message: nil connection: %w", fi.EINVAL)
	}
	buf, fds, flags, err := recvmsg(c)
	if err != nil {
		return fds, err
	}
	switch {
	case flags&unix.MSG_TRUNC != 0:
		return fds, fmt.Errorf("message larger than %d bytes: %w", MaxMessage, fi.EMSGSIZE)
	case flags&unix.MSG_CTRUNC != 0:
		return fds, fmt.Errorf("more than %d descriptors in one message: %w", MaxFDs, fi.EMSGSIZE)
	case len(buf) == 0:
		// SEQPACKET reads 0 bytes both for an empty message and at the
		// end of the connection; only the latter leaves the socket hung
		// up.
		if hungUp(c) {
			return fds, io.EOF
		}
		return fds, fmt.Errorf("empty message: %w", fi.EINVAL)
	}
	if err := json.Unmarshal(buf, v); err != nil {
		return fds, fmt.Errorf("bad message: %s: %w", ClipText(err.Error(), 2*MaxQuoted), fi.EINVAL)
	}
	return fds, nil
}

// recvmsg reads one message with recvmsg(2) itself: net.UnixConn's
// ReadMsgUnix turns a 0-byte read into io.EOF, which on SEQPACKET hides an
// empty message. Once the socket is readable it peeks at the message's
// length (MSG_PEEK|MSG_TRUNC), then reads it into a buffer of that length
// (MaxMessage at most: a longer one is consumed and reported with
// MSG_TRUNC). Descriptors arrive close-on-exec.
func recvmsg(c *net.UnixConn) (buf []byte, fds []int, flags int, err error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, nil, 0, err
	}
	oob := make([]byte, unix.CmsgSpace(4*MaxFDs))
	var n, oobn int
	rerr := raw.Read(func(fd uintptr) bool {
		n, _, _, _, err = unix.Recvmsg(int(fd), nil, nil, unix.MSG_PEEK|unix.MSG_TRUNC|unix.MSG_DONTWAIT)
		if err == unix.EAGAIN {
			return false
		}
		if err != nil {
			return true
		}
		buf = make([]byte, min(n, MaxMessage))
		n, oobn, flags, _, err = unix.Recvmsg(int(fd), buf, oob, msgCmsgCloexec|unix.MSG_DONTWAIT)
		return err != unix.EAGAIN
	})
	if rerr != nil {
		return nil, nil, 0, rerr
	}
	if err != nil {
		return nil, nil, 0, &net.OpError{Op: "read", Net: "unixpacket", Err: err}
	}
	if oobn > 0 {
		msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
		if perr != nil {
			return nil, nil, 0, fmt.Errorf("control message: %v: %w", perr, fi.EINVAL)
		}
		for _, m := range msgs {
			if f, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, f...)
			}
		}
		cloexec(fds)
	}
	return buf[:n], fds, flags, nil
}

// hungUp reports whether the peer shut the connection down.
func hungUp(c *net.UnixConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return true
	}
	hup := true
	raw.Control(func(fd uintptr) {
		p := []unix.PollFd{{Fd: int32(fd), Events: pollRDHUP}}
		if n, err := unix.Poll(p, 0); err == nil {
			hup = n > 0 && p[0].Revents&(pollRDHUP|unix.POLLHUP|unix.POLLERR) != 0
		}
	})
	return hup
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
