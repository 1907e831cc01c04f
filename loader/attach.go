package loader

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/xdpfab/xdpfab/fi"
	"golang.org/x/sys/unix"
)

// Mode is the XDP attach mode. String prints the names ParseMode reads; an
// unknown value prints as Mode(7).
type Mode int

//go:generate go tool stringer -type Mode -linecomment -output mode_string.go

// Attach modes.
const (
	// Native runs the program in the driver (veth supports it).
	Native Mode = iota // native
	// Generic runs it after the driver, on any interface (slower).
	Generic // generic
)

// ParseMode parses "native" or "generic".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "native", "driver", "drv":
		return Native, nil
	case "generic", "skb":
		return Generic, nil
	}
	return 0, fmt.Errorf("xdp mode %q: want native or generic: %w", s, fi.EINVAL)
}

// Attachment is the program attached to one interface.
type Attachment struct {
	Ifname  string
	Ifindex int
	Mode    Mode
	// Adopted is true when an existing pinned link was re-used.
	Adopted bool
	link    link.Link
	pin     string
}

// Attach attaches the program to ifname in mode. With a PinRoot the link is
// pinned at PinRoot/links/<ifname>, survives the process, and a later Attach
// adopts it (updating it to this process's program) instead of failing.
func (d *Objects) Attach(ifname string, mode Mode) (*Attachment, error) {
	if err := d.loaded(fmt.Sprintf("attach xdpfab to %q", ifname)); err != nil {
		return nil, err
	}
	if d.Program == nil {
		return nil, fmt.Errorf("attach xdpfab to %q: a read-only dataplane (OpenPinned, FromFDs) has no program: %w", ifname, fi.EINVAL)
	}
	iface, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("attach xdpfab to %q: no such interface: %w", ifname, fi.ENODEV)
	}
	a := &Attachment{Ifname: ifname, Ifindex: iface.Index, Mode: mode}
	if d.pinned {
		a.pin = filepath.Join(d.cfg.PinRoot, "links", ifname)
		if l, err := link.LoadPinnedLink(a.pin, nil); err == nil {
			if info, ierr := l.Info(); ierr == nil && info.XDP() != nil && int(info.XDP().Ifindex) == iface.Index {
				// The link keeps the mode it was attached in: its
				// program is that mode's. Where netlink does not say
				// (programs in two modes), the multi-buffer program,
				// which runs in either.
				var known bool
				a.Mode, known = attachedMode(iface.Index, mode)
				prog, err := d.ProgramFor(a.Mode)
				if !known {
					prog, err = d.ProgramFor(Native)
				}
				if err == nil {
					err = l.Update(prog)
				}
				if err != nil {
					l.Close()
					return nil, fmt.Errorf("adopt pinned xdp link %s: %w", a.pin, err)
				}
				a.link, a.Adopted = l, true
				return a, nil
			}
			// The interface went away (or was recreated): the old link is
			// defunct. Drop its pin and attach afresh.
			_ = l.Unpin()
			l.Close()
		}
	}
	if id, attached := otherXDP(iface.Index); attached {
		return nil, fmt.Errorf("attach xdpfab to %s: another XDP program (id %d) is attached; remove it first "+
			"(ip link set dev %s xdp off, or for a bpf_link: bpftool link detach, or remove its pin): %w", ifname, id, ifname, fi.EBUSY)
	}
	flags := link.XDPDriverMode
	if mode == Generic {
		flags = link.XDPGenericMode
	}
	prog, err := d.ProgramFor(mode)
	if err != nil {
		return nil, fmt.Errorf("attach xdpfab to %s: %w", ifname, err)
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: iface.Index, Flags: flags})
	if err != nil {
		return nil, attachError(ifname, mode, err)
	}
	if a.pin != "" {
		if err := os.MkdirAll(filepath.Dir(a.pin), 0o700); err != nil {
			l.Close()
			return nil, fmt.Errorf("pin xdp link: %w", err)
		}
		if err := l.Pin(a.pin); err != nil {
			l.Close()
			return nil, fmt.Errorf("pin xdp link at %s: %w", a.pin, err)
		}
	}
	a.link = l
	return a, nil
}

func attachError(ifname string, mode Mode, err error) error {
	switch {
	case errors.Is(err, unix.EBUSY), errors.Is(err, unix.EEXIST):
		return fmt.Errorf("attach xdpfab to %s: another XDP program is attached: %w", ifname, fi.EBUSY)
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("attach xdpfab to %s: needs CAP_NET_ADMIN and CAP_BPF (run as root): %w", ifname, fi.EPERM)
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EINVAL) && mode == Native:
		return fmt.Errorf("attach xdpfab to %s: driver has no native XDP; use generic mode: %w", ifname, fi.EOPNOTSUPP)
	case errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("attach xdpfab to %s: kernel lacks XDP links: %w", ifname, fi.ENOSYS)
	}
	return fmt.Errorf("attach xdpfab to %s in %s mode: %w", ifname, mode, err)
}

// attachedMode is the mode of the XDP program attached to ifindex as
// netlink reports it (known), or def when it reports none it knows (none,
// or programs in several modes).
func attachedMode(ifindex int, def Mode) (mode Mode, known bool) {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil || l.Attrs().Xdp == nil {
		return def, false
	}
	switch l.Attrs().Xdp.AttachMode {
	case xdpAttachedSKB:
		return Generic, true
	case xdpAttachedDrv:
		return Native, true
	}
	return def, false
}

// otherXDP reports an XDP program attached to ifindex, if any.
func otherXDP(ifindex int) (uint32, bool) {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil || l.Attrs().Xdp == nil || !l.Attrs().Xdp.Attached {
		return 0, false
	}
	return l.Attrs().Xdp.ProgId, true
}

// Close releases the process's handle. A pinned link stays attached
// (traffic keeps flowing); an unpinned one is detached. A nil or zero
// Attachment (not from Attach) holds nothing: nil.
func (a *Attachment) Close() error {
	if a == nil || a.link == nil {
		return nil
	}
	err := a.link.Close()
	a.link = nil
	return err
}

// Detach removes the program from the interface, pinned or not. A nil or
// zero Attachment holds nothing to detach: nil.
func (a *Attachment) Detach() error {
	if a == nil || a.link == nil {
		return nil
	}
	var errs []error
	if a.pin != "" {
		errs = append(errs, a.link.Unpin())
	}
	errs = append(errs, a.link.Close())
	a.link = nil
	return errors.Join(errs...)
}

// AttachedPinned reports whether a pinned xdpfab link exists for ifname
// (an agent attached the program there).
func (d *Objects) AttachedPinned(ifname string) bool {
	if d == nil || !d.pinned {
		return false
	}
	_, err := os.Stat(filepath.Join(d.cfg.PinRoot, "links", ifname))
	return err == nil
}

// Detach removes xdpfab's pinned link from ifname, for a process that did
// not attach it (`xdpfab detach`).
func (d *Objects) Detach(ifname string) error {
	if err := d.loaded(fmt.Sprintf("detach %s", ifname)); err != nil {
		return err
	}
	if !d.pinned {
		return fmt.Errorf("detach %s: dataplane is not pinned, nothing to detach: %w", ifname, fi.ENOENT)
	}
	pin := filepath.Join(d.cfg.PinRoot, "links", ifname)
	l, err := link.LoadPinnedLink(pin, nil)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("detach %s: xdpfab is not attached there: %w", ifname, fi.ENOENT)
		}
		return fmt.Errorf("detach %s: %w", ifname, err)
	}
	return errors.Join(l.Unpin(), l.Close())
}
