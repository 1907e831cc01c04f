package agent

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"

	"github.com/xdpfab/xdpfab/fi"
	"golang.org/x/sys/unix"
)

// inetDiag asks the kernel (NETLINK_SOCK_DIAG, inet_diag) who owns a TCP
// socket: /metrics keys a connection from this node by the uid of the
// socket at its other end, so that one local user's connections do not
// count against another's (a local Prometheus's, say). The netlink socket
// lives in the network namespace it was made in, the listener's.
type inetDiag struct {
	mu  sync.Mutex
	fd  int
	seq uint32
	buf []byte
}

func newInetDiag() (*inetDiag, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("sock_diag socket: %w", err)
	}
	// An answer that does not come at once is no answer: the lookup
	// runs in the metrics listener's accept loop.
	tv := unix.Timeval{Usec: 100_000}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sock_diag socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sock_diag bind: %w", err)
	}
	return &inetDiag{fd: fd, buf: make([]byte, 4096)}, nil
}

func (d *inetDiag) Close() error {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd < 0 {
		return nil
	}
	err := unix.Close(d.fd)
	d.fd = -1
	return err
}

// inet_diag's layout (linux/inet_diag.h): the request (struct
// inet_diag_req_v2, 56 bytes) and where the answer (struct inet_diag_msg)
// holds the socket's uid (its inode follows).
const (
	diagReqLen    = 56
	diagMsgUIDOff = 4 + 48 + 12
	diagNoCookie  = ^uint32(0)
)

// uid returns the uid that owns the TCP socket whose own address is self
// and whose peer is peer, looked up exactly (one hash lookup in the
// kernel, not a dump of every socket). Both addresses must be of one
// family as the socket has it.
//
// Only a socket a process still holds answers (its inode is not 0): one
// its process closed (orphaned, in TIME_WAIT or FIN_WAIT2 as a time-wait
// socket) or a request not yet accepted has no owner left (the kernel
// answers uid 0 for the latter two) and is ENOENT.
func (d *inetDiag) uid(self, peer netip.AddrPort) (uint32, error) {
	if d == nil {
		return 0, fmt.Errorf("no sock_diag: %w", fi.ENOSYS)
	}
	if self.Addr().Is4() != peer.Addr().Is4() {
		return 0, fmt.Errorf("sock_diag: mixed families: %w", fi.EINVAL)
	}
	family := uint8(unix.AF_INET6)
	if self.Addr().Is4() {
		family = unix.AF_INET
	}
	req := make([]byte, unix.NLMSG_HDRLEN+diagReqLen)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd < 0 {
		return 0, fmt.Errorf("sock_diag closed: %w", fi.EBADF)
	}
	d.seq++
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(req[8:], d.seq)
	r := req[unix.NLMSG_HDRLEN:]
	r[0], r[1] = family, unix.IPPROTO_TCP
	ne.PutUint32(r[4:], ^uint32(0)) // every state
	id := r[8:]
	binary.BigEndian.PutUint16(id[0:], self.Port())
	binary.BigEndian.PutUint16(id[2:], peer.Port())
	if family == unix.AF_INET {
		a, b := self.Addr().As4(), peer.Addr().As4()
		copy(id[4:], a[:])
		copy(id[20:], b[:])
	} else {
		a, b := self.Addr().As16(), peer.Addr().As16()
		copy(id[4:], a[:])
		copy(id[20:], b[:])
	}
	if z := self.Addr().Zone(); z != "" { // a link-local socket is bound to its device
		if ifc, err := net.InterfaceByName(z); err == nil {
			ne.PutUint32(id[36:], uint32(ifc.Index))
		} else if n, err := strconv.ParseUint(z, 10, 32); err == nil { // a zone Go could not name
			ne.PutUint32(id[36:], uint32(n))
		}
	}
	ne.PutUint32(id[40:], diagNoCookie)
	ne.PutUint32(id[44:], diagNoCookie)
	if err := unix.Sendto(d.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, fmt.Errorf("sock_diag send: %w", err)
	}
	for {
		n, _, err := unix.Recvfrom(d.fd, d.buf, 0)
		if err != nil {
			return 0, fmt.Errorf("sock_diag receive: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(d.buf[:n])
		if err != nil {
			return 0, fmt.Errorf("sock_diag: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != d.seq {
				continue // an answer to an earlier request that timed out
			}
			switch m.Header.Type {
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if e := int32(ne.Uint32(m.Data)); e != 0 {
						return 0, fmt.Errorf("sock_diag: %w", unix.Errno(-e))
					}
				}
				return 0, fmt.Errorf("sock_diag: no socket: %w", fi.ENOENT)
			case unix.SOCK_DIAG_BY_FAMILY:
				if len(m.Data) < diagMsgUIDOff+8 {
					return 0, fmt.Errorf("sock_diag: short answer: %w", fi.EIO)
				}
				if ne.Uint32(m.Data[diagMsgUIDOff+4:]) == 0 {
					return 0, fmt.Errorf("sock_diag: the socket's process closed it (state %d): %w", m.Data[1], fi.ENOENT)
				}
				return ne.Uint32(m.Data[diagMsgUIDOff:]), nil
			}
		}
	}
}
