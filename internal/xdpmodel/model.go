// Package xdpmodel is the reference model of xdpfab's XDP program
// (bpf/av_map.c, bpf/xdpfab_parse.h) in Go: given the tables the program
// reads and a frame, what the program does with it: the action (redirect,
// to which XSKMAP slot; pass; drop), the counter the frame lands in, and
// the metadata (wire.Meta) it writes in front of the frame. It follows the
// C check by check, in the same order, so that a frame with several
// defects lands in the same counter.
//
// It is for tests and benchmarks: the differential test runs the real
// program (BPF_PROG_TEST_RUN) and the model on the same generated frames
// and compares them frame by frame (diff_test.go, `make difftest`), and
// FuzzModel fuzzes the model against invariants it must keep whatever the
// input. Product code never imports it.
package xdpmodel

import (
	"encoding/binary"
	"net/netip"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/wire"
)

// XDP actions, as the program returns them.
const (
	Drop     uint32 = 1 // XDP_DROP
	Pass     uint32 = 2 // XDP_PASS
	Redirect uint32 = 4 // XDP_REDIRECT
)

// Limits of the program (bpf/xdpfab_consts.h) and of its test runs.
const (
	// CsumChunks is XDPFAB_CSUM_CHUNKS: the program sums a datagram of
	// up to CsumChunks*512+511 bytes in the frame's linear part in place,
	// any other through a scratch buffer (fragments included). The model
	// needs no such distinction: the sum is the same.
	CsumChunks = 8
	// MaxLinearSum is the longest datagram summed in place.
	MaxLinearSum = CsumChunks*512 + 511
	// minUDPLen is the UDP header and the xdpfab header.
	minUDPLen = wire.UDPHeaderLen + wire.HdrLen
	// TestLinear is the linear part of a frame a BPF_PROG_TEST_RUN
	// shows the program (a page minus the XDP headroom and
	// skb_shared_info: *measured* 3520 bytes on Linux 6.18); the rest of
	// a longer frame goes to fragments, which the program (xdp.frags)
	// reads through bpf_xdp_load_bytes. Run models a frame with this
	// linear part; RunLinear takes another.
	TestLinear = 3520
	// MaxTestFrame bounds the frames the generator makes: an IPv6
	// datagram of the longest UDP length (65535), and two VLAN tags'
	// worth to spare, well within a test run's 17 fragments of a page.
	MaxTestFrame = 14 + 8 + 40 + 65535
	// MinFrame is the shortest frame a test run takes (an Ethernet
	// header: no driver hands XDP less). The generator makes no shorter
	// one; the model takes anything.
	MinFrame = 14
)

// Tables is the dataplane state the program reads: the maps' contents.
type Tables struct {
	// EPs is xdpfab_ep: endpoints by local address and port (an all-zero
	// address is the family's wildcard).
	EPs map[bpf.EPKey]bpf.EPVal
	// AV is what the AV tables (xdpfab_avtab) translate: (AV, source) to
	// fi_addr and user id (reported only for entries flagged
	// bpf.AVFUserID).
	AV map[bpf.AVKey]bpf.AVVal
	// Local is xdpfab_local: the host's addresses, with port 0.
	Local map[bpf.Addr]bool
	// XSKs is the set of XSKMAP slots that hold a socket.
	XSKs map[uint32]bool
}

// Result is what the program does with one frame.
type Result struct {
	// Action is Drop, Pass or Redirect.
	Action uint32
	// Counter is the outcome counter the frame counts in, in row Row
	// (bpf.CounterRX, the sum of the outcomes, counts it too).
	Counter bpf.Counter
	// Row is the counter row: the ingress ifindex, or 0 for one at or
	// above bpf.IfindexSlots.
	Row int
	// HasMeta reports that the program wrote Meta in front of the frame:
	// always for Redirect, and for a redirect that failed on an empty
	// XSKMAP slot (the metadata is written before the redirect).
	HasMeta bool
	Meta    wire.Meta
	// Stamped reports that the program put a wire.StampLen-byte stamp in
	// front of the frame (an endpoint with bpf.EPFStamp; with HasMeta):
	// the frame it hands on is the stamp and then the frame it got, and
	// Meta's offsets count the stamp. The stamp's value is the time of
	// the run, which the model cannot know.
	Stamped bool
	// Slot is the XSKMAP slot the program redirected to (or tried to),
	// valid when HasMeta.
	Slot uint32
}

// Step names where the program decided, for messages.
func (r Result) String() string {
	s := map[uint32]string{Drop: "drop", Pass: "pass", Redirect: "redirect"}[r.Action]
	if s == "" {
		s = "action?"
	}
	return s + "/" + r.Counter.String()
}

// Run returns what the program does with frame arriving with ctx's
// ingress ifindex and rx queue, laid out as a test run lays it out: its
// first TestLinear bytes linear, the rest in fragments.
func (t *Tables) Run(frame []byte, ctx bpf.XDPMD) Result {
	return t.RunLinear(frame, min(len(frame), TestLinear), ctx)
}

// RunLinear is Run for a frame whose first linear bytes are its linear
// part (the program's [data, data_end)) and the rest fragments: the
// program parses the headers in the linear part only and checks lengths
// and the checksum over the whole frame. Every kernel path hands XDP at
// least the first 3.5 KB of a frame linear, far more than the headers
// (docs/platform.md#multi-buffer-xdp), so linear matters only below that.
func (t *Tables) RunLinear(frame []byte, linear int, ctx bpf.XDPMD) Result {
	linear = min(max(linear, 0), len(frame))
	r := Result{Row: int(ctx.IngressIfindex)}
	if r.Row >= bpf.IfindexSlots {
		r.Row = 0
	}
	out := func(action uint32, c bpf.Counter) Result {
		r.Action, r.Counter = action, c
		return r
	}

	// 1. A UDP datagram with its destination, or not ours (VLAN-tagged
	// frames and IPv4 options included): its headers in the linear part.
	d, ok := wire.ParseUDP(frame[:linear])
	if !ok {
		return out(Pass, bpf.CounterPass)
	}
	src, dst := key(d.Src, d.Family), key(d.Dst, d.Family)

	// 2. The endpoint: by address, else the family's wildcard.
	ep, found := t.EPs[bpf.EPKey{Local: dst}]
	wild := false
	if !found {
		k := dst
		k.Addr = [16]byte{}
		if ep, found = t.EPs[bpf.EPKey{Local: k}]; !found {
			return out(Pass, bpf.CounterPass)
		}
		wild = true
	}

	// 3. A unicast destination; for a wildcard, one of the host's.
	if !DstUnicast(d.Dst.Addr()) {
		return out(Pass, bpf.CounterNotLocal)
	}
	if wild {
		k := dst
		k.Port = 0
		if !t.Local[k] {
			return out(Pass, bpf.CounterNotLocal)
		}
	}

	// 4. IP and UDP as the kernel checks them, then the xdpfab header.
	ipLen, bad := checkIP(frame, linear, d)
	if bad == 0 {
		bad = checkUDP(frame, d, ipLen)
	}
	if bad != 0 {
		return out(Drop, bad)
	}
	udpLen := int(binary.BigEndian.Uint16(frame[d.L4Off+4:]))
	hdrOff := d.L4Off + wire.UDPHeaderLen
	h := frame[hdrOff : hdrOff+wire.HdrLen]
	if binary.BigEndian.Uint32(h[0:]) != wire.Magic || h[4] != wire.Version ||
		h[5] == 0 || h[5] > wire.OpTagged || uint16(h[7]) >= ep.RxCtxs {
		return out(Drop, bpf.CounterMalformed)
	}
	rxCtx := h[7]
	wireKey := binary.BigEndian.Uint32(h[12:])

	// 5. The source in the endpoint's AV, bound to the endpoint's key.
	var av bpf.AVVal
	known := false
	if ep.AvId != 0 {
		av, known = t.AV[bpf.AVKey{AvId: ep.AvId, Src: src}]
	}
	if known && ep.AuthKey != 0 && (av.AuthKey != ep.AuthKey || wireKey != ep.AuthKey) {
		known = false
	}

	// 6. Unknown sources follow the endpoint's policy.
	m := wire.Meta{FiAddr: ^uint64(0), UserID: ^uint64(0)}
	switch {
	case known:
		m.Flags = wire.MetaKnown
		if av.Flags&bpf.AVFUserID != 0 {
			m.Flags |= wire.MetaUserID
		}
		m.FiAddr = av.FiAddr
		if av.Flags&bpf.AVFUserID != 0 {
			m.UserID = av.UserId
		}
	case ep.Policy == bpf.PolicyDrop:
		return out(Drop, bpf.CounterDropPolicy)
	case ep.Policy == bpf.PolicySourceErr:
		m.Flags = wire.MetaSourceErr
	}

	// 7. The socket: receive context and rx queue pick the slot.
	queue := ctx.RxQueueIndex - uint32(ep.FirstQueue) // wraps below FirstQueue
	if queue >= uint32(ep.Queues) {
		return out(Drop, bpf.CounterWrongQueue)
	}
	r.Slot = ep.XskBase + uint32(rxCtx)*uint32(ep.Queues) + queue

	// 8. The metadata (bpf_xdp_adjust_head always has the room here), in
	// front of a stamp for an endpoint being measured.
	m.EpID = ep.EpId
	m.L3Off, m.HdrOff = uint16(d.L3Off), uint16(hdrOff)
	m.PayloadLen = uint16(udpLen - minUDPLen)
	m.Family, m.Version, m.RxCtx = src.Family, wire.MetaVersion, rxCtx
	if ep.Flags&bpf.EPFStamp != 0 {
		m.Flags |= wire.MetaStamp
		m.L3Off += wire.StampLen
		m.HdrOff += wire.StampLen
		r.Stamped = true
	}
	r.HasMeta, r.Meta = true, m

	// 9. Redirect.
	if !t.XSKs[r.Slot] {
		return out(Drop, bpf.CounterRedirectFail)
	}
	if known {
		return out(Redirect, bpf.CounterTranslated)
	}
	return out(Redirect, bpf.CounterUnknown)
}

// DstUnicast reports whether a destination address can be an endpoint's
// (dst_unicast): not IPv4 0/8, loopback, multicast or 255.255.255.255,
// not IPv6 multicast, :: or ::1. An IPv4-mapped IPv6 address is IPv6 here,
// as on the wire.
func DstUnicast(a netip.Addr) bool {
	if a.Is4() {
		b := a.As4()
		return !(b[0] == 0 || b[0] == 127 || b[0] >= 224 && b[0] < 240 || b == [4]byte{255, 255, 255, 255})
	}
	b := a.As16()
	return !(b[0] == 0xff || zeroOrOne(b))
}

// SrcMartian reports a source the kernel drops (src_martian): IPv4 0/8,
// loopback, multicast, 255.255.255.255; IPv6 multicast and ::1.
func SrcMartian(a netip.Addr) bool {
	if a.Is4() {
		return !DstUnicast(a)
	}
	b := a.As16()
	return b[0] == 0xff || zeroOrOne(b) && b[15] == 1
}

// zeroOrOne reports :: or ::1.
func zeroOrOne(b [16]byte) bool {
	for _, x := range b[:15] {
		if x != 0 {
			return false
		}
	}
	return b[15] <= 1
}

// key is the map form of an address and port as the program builds it
// from the packet: the family from the header, IPv4-mapped IPv6 addresses
// left as they are (bpf.MakeAddr would unmap them).
func key(ap netip.AddrPort, family uint8) bpf.Addr {
	k := bpf.MakeAddr(ap)
	if family == wire.AFInet6 {
		k.Family, k.Addr = wire.AFInet6, ap.Addr().As16()
	}
	return k
}

// checkIP is check_ip: room for the UDP and xdpfab headers in the linear
// part, then the version, for IPv4 the header checksum (a 20-byte header:
// ParseUDP took no other) and the total length, for IPv6 the payload
// length (both lengths within the whole frame), then the source. It
// returns the IP payload length, or the counter of the failure.
func checkIP(f []byte, linear int, d wire.Datagram) (ipLen int, bad bpf.Counter) {
	l3 := d.L3Off
	if d.L4Off+minUDPLen > linear {
		return 0, bpf.CounterMalformed
	}
	if d.Family == wire.AFInet {
		if f[l3]>>4 != 4 {
			return 0, bpf.CounterMalformed
		}
		if wire.Checksum16(f[l3:l3+20], 0) != 0xffff {
			return 0, bpf.CounterCsumError
		}
		tot := int(binary.BigEndian.Uint16(f[l3+2:]))
		if tot < 20 || l3+tot > len(f) {
			return 0, bpf.CounterMalformed
		}
		ipLen = tot - 20
	} else {
		if f[l3]>>4 != 6 {
			return 0, bpf.CounterMalformed
		}
		plen := int(binary.BigEndian.Uint16(f[l3+4:]))
		if l3+40+plen > len(f) {
			return 0, bpf.CounterMalformed
		}
		ipLen = plen
	}
	if SrcMartian(d.Src.Addr()) {
		return 0, bpf.CounterMalformed
	}
	return ipLen, 0
}

// checkUDP is check_udp: the UDP length against the xdpfab header and the
// IP payload, then the checksum over the whole datagram (fragments
// included): 0 is none over IPv4 and invalid over IPv6; the bare
// pseudo-header sum is CHECKSUM_PARTIAL and accepted; otherwise the
// datagram must sum right.
func checkUDP(f []byte, d wire.Datagram, ipLen int) bpf.Counter {
	u := f[d.L4Off:]
	udpLen := int(binary.BigEndian.Uint16(u[4:]))
	if udpLen < minUDPLen || udpLen > ipLen {
		return bpf.CounterMalformed
	}
	field := binary.BigEndian.Uint16(u[6:])
	if field == 0 {
		if d.Family == wire.AFInet {
			return 0
		}
		return bpf.CounterCsumError
	}
	ps := wire.PseudoHeaderSum(d.Src.Addr(), d.Dst.Addr(), udpLen)
	if field == wire.Checksum16(nil, ps) {
		return 0
	}
	if wire.Checksum16(u[:udpLen], ps) != 0xffff {
		return bpf.CounterCsumError
	}
	return 0
}
