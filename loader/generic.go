package loader

import (
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/fi"
)

// The program for generic (skb) mode.
//
// xdpfab_rx is a multi-buffer program (SEC("xdp.frags")): native XDP on
// veth and on drivers with jumbo frames refuses a single-buffer program at
// an MTU above about a page. In generic mode the kernel runs any program at
// any MTU: a single-buffer one gets every frame linear (the kernel copies a
// fragmented skb into one buffer first), a multi-buffer one gets its
// fragments. On the skbs that AF_XDP and veth hand over the kernel copies
// either way (their headroom is below XDP's 256 bytes), and the linear copy
// is the cheaper of the two: a 64-byte ping-pong over veth in generic mode
// measured 1.38-1.44 µs p50 with the single-buffer program against
// 1.46-1.48 µs with the multi-buffer one (alternating runs, Linux 6.18,
// 2026), the 1472 B and 8 KiB sizes alike. AF_XDP sockets bound with
// XDP_USE_SG still receive a datagram longer than a frame as a chain (the
// copy into the UMEM splits it).
//
// So generic attachments run a second copy of the program, loaded without
// BPF_F_XDP_HAS_FRAGS on the same maps, on the first generic Attach.

// Kernel ABI values (checked against x/sys/unix and netlink in
// uapi_linux.go): BPF_F_XDP_HAS_FRAGS, and IFLA_XDP_ATTACHED's
// XDP_ATTACHED_DRV and XDP_ATTACHED_SKB.
const (
	bpfFXDPHasFrags = 1 << 5
	xdpAttachedDrv  = 1
	xdpAttachedSKB  = 2
)

// generic holds the single-buffer program and what loading it takes.
type generic struct {
	mu   sync.Mutex
	spec *ebpf.CollectionSpec // the dataplane's, sized; nil: none to load
	prog *ebpf.Program
}

// ProgramFor returns the program Attach attaches in mode: Program in
// native mode, its single-buffer copy in generic mode (loaded on first
// use, on the same maps). A dataplane without a program (OpenPinned,
// FromFDs) has none to give: nil.
func (d *Objects) ProgramFor(mode Mode) (*ebpf.Program, error) {
	if err := d.loaded("xdpfab program"); err != nil {
		return nil, err
	}
	if mode != Generic || d.Program == nil {
		return d.Program, nil
	}
	g := &d.generic
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.prog != nil:
		return g.prog, nil
	case g.spec == nil: // closed, or nothing to load it from
		return d.Program, nil
	}
	cs := g.spec.Copy()
	ps, ok := cs.Programs["xdpfab_rx"]
	if !ok {
		return nil, fmt.Errorf("xdpfab object has no program xdpfab_rx: %w", fi.EINVAL)
	}
	ps.Flags &^= bpfFXDPHasFrags
	cs.Programs = map[string]*ebpf.ProgramSpec{"xdpfab_rx": ps}
	// The dataplane's maps, except the checksum's scratch buffer, which
	// is each program's own (not pinned).
	repl := map[string]*ebpf.Map{
		"xdpfab_avtab": d.AVTab, "xdpfab_avmeta": d.AVMeta, "xdpfab_authkey": d.AuthKey,
		"xdpfab_ep": d.EP, "xdpfab_xsks": d.XSKs, "xdpfab_stats": d.Stats, "xdpfab_avpool": d.AVPool,
		"xdpfab_local": d.Local, "xdpfab_epport": d.EPPort, "xdpfab_epslot": d.EPSlot,
	}
	for name, ms := range cs.Maps {
		ms.Pinning = ebpf.PinNone
		if m := repl[name]; m == nil && name != "xdpfab_scratch" {
			// A map this dataplane does not hold (or a global
			// variable's): the copy would get one of its own.
			return nil, fmt.Errorf("load xdpfab's generic-mode program: map %s is not the dataplane's: %w", name, fi.EINVAL)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(cs, ebpf.CollectionOptions{MapReplacements: repl})
	if err != nil {
		return nil, fmt.Errorf("load xdpfab's generic-mode program: %w", loadError(err))
	}
	g.prog = coll.DetachProgram("xdpfab_rx")
	coll.Close()
	if g.prog == nil {
		return nil, fmt.Errorf("load xdpfab's generic-mode program: not in the collection: %w", fi.EINVAL)
	}
	return g.prog, nil
}

// close releases the single-buffer program, if it was loaded.
func (g *generic) close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.spec = nil
	if g.prog == nil {
		return nil
	}
	err := g.prog.Close()
	g.prog = nil
	return err
}
