package agent

import (
	"fmt"
	"slices"
	"unsafe"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/procid"
	"golang.org/x/sys/unix"
)

// caller is who is on the other end of a connection, as the kernel told
// at connect (SO_PEERCRED, SO_PEERGROUPS): never what the client claims.
type caller struct {
	uid, gid uint32
	pid      int32
	start    uint64   // the process's start time (internal/procid), 0 if unknown
	groups   []uint32 // supplementary groups
	self     bool     // the agent itself (audit lines say by=agent)
}

// credentials reads the peer's identity from a connected socket.
func credentials(fd int) (caller, error) {
	cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
	if err != nil {
		return caller{}, fmt.Errorf("peer credentials: %w", err)
	}
	c := caller{uid: cred.Uid, gid: cred.Gid, pid: cred.Pid}
	if id, err := procid.Of(int(cred.Pid)); err == nil {
		c.start = id.Start
	}
	c.groups, err = peerGroups(fd)
	if err != nil {
		return caller{}, fmt.Errorf("peer groups: %w", err)
	}
	return c, nil
}

// peerGroups is SO_PEERGROUPS: the supplementary groups the peer had at
// connect. (unix.GetsockoptString would cut the binary list at a zero
// byte.)
func peerGroups(fd int) ([]uint32, error) {
	buf := make([]uint32, 64)
	for {
		n := uint32(len(buf) * 4)
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		switch e {
		case 0:
			return buf[:n/4], nil
		case unix.ERANGE:
			if n/4 <= uint32(len(buf)) || n/4 > 1<<16 {
				return nil, e
			}
			buf = make([]uint32, n/4)
		default:
			return nil, e
		}
	}
}

// inGroup reports whether the caller's primary or supplementary groups
// include gid.
func (c caller) inGroup(gid uint32) bool {
	return c.gid == gid || slices.Contains(c.groups, gid)
}

// root reports whether the caller is uid 0.
func (c caller) root() bool { return c.uid == 0 }

// admin reports whether the caller may change what the whole node sees
// (attachments, every AV): root, or a member of the configured admin
// group.
func (a *Agent) admin(c caller) bool {
	return c.root() || a.adminGID >= 0 && c.inGroup(uint32(a.adminGID))
}

// requireAdmin refuses a caller that is not admin, naming what it tried.
func (a *Agent) requireAdmin(c caller, what string) error {
	if a.admin(c) {
		return nil
	}
	hint := "only root may"
	if a.adminGID >= 0 {
		hint = fmt.Sprintf("only root and members of the admin group (gid %d) may", a.adminGID)
	}
	return fmt.Errorf("%s: %s (uid %d): %w", what, hint, c.uid, fi.EACCES)
}
