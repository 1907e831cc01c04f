//go:build linux

package bpf_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/internal/avtab"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/internal/testutil"
	"github.com/xdpfab/xdpfab/internal/xdptest"
	"github.com/xdpfab/xdpfab/loader"
	"github.com/xdpfab/xdpfab/wire"
)

const (
	xdpDrop     = 1
	xdpPass     = 2
	xdpRedirect = 4
	notAvail    = ^uint64(0)
)

var (
	ep4     = netip.MustParseAddrPort("198.18.100.1:7000")
	ep6     = netip.MustParseAddrPort("[2001:2:100::1]:7000")
	epDrop  = netip.MustParseAddrPort("198.18.100.2:7000")
	epAuth  = netip.MustParseAddrPort("198.18.100.3:7000")
	epCtx   = netip.MustParseAddrPort("198.18.100.4:7000")
	epWild  = netip.MustParseAddrPort("0.0.0.0:7100")
	epNoXSK = netip.MustParseAddrPort("198.18.100.5:7000")

	known4   = netip.MustParseAddrPort("198.18.1.1:5000")
	known6   = netip.MustParseAddrPort("[2001:2:1::1]:5000")
	userIDs  = netip.MustParseAddrPort("198.18.1.2:5000")
	keyed    = netip.MustParseAddrPort("198.18.1.3:5000")
	stranger = netip.MustParseAddrPort("198.18.9.9:5000")
)

// fixture: a dataplane with endpoints of every policy, one AV, and a real
// AF_XDP socket in XSKMAP slots 0 and 1 so redirects succeed.
func fixture(t *testing.T) *loader.Objects {
	t.Helper()
	testutil.RequirePrivileged(t)
	dp, err := loader.Load(loader.Config{AVEntries: 1024, MaxAVs: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	bed := testbed.New(t, testbed.Options{})
	xdptest.BindXSK(t, dp, bed.A, 0, 0, 1)

	eps := map[netip.AddrPort]bpf.EPVal{
		ep4:     {EpId: 1, AvId: 1, RxCtxs: 1, Queues: 1, Policy: bpf.PolicyNotAvail},
		ep6:     {EpId: 2, AvId: 1, RxCtxs: 1, Queues: 1, Policy: bpf.PolicySourceErr},
		epDrop:  {EpId: 3, AvId: 1, RxCtxs: 1, Queues: 1, Policy: bpf.PolicyDrop},
		epAuth:  {EpId: 4, AvId: 1, RxCtxs: 1, Queues: 1, AuthKey: 0x1234},
		epCtx:   {EpId: 5, AvId: 1, RxCtxs: 2, Queues: 1},
		epWild:  {EpId: 6, AvId: 1, RxCtxs: 1, Queues: 1},
		epNoXSK: {EpId: 7, AvId: 1, RxCtxs: 1, Queues: 1, XskBase: 9},
	}
	for k, v := range eps {
		if err := xdptest.PutEndpoint(dp, bpf.EPKey{Local: bpf.MakeAddr(k)}, v); err != nil {
			t.Fatal(err)
		}
	}
	avs := map[netip.AddrPort]bpf.AVVal{
		known4:  {FiAddr: 3, UserId: notAvail},
		known6:  {FiAddr: 4, UserId: notAvail},
		userIDs: {FiAddr: 5, UserId: 0xfeed, Flags: bpf.AVFUserID},
		keyed:   {FiAddr: 6, UserId: notAvail, AuthKey: 0x1234},
	}
	for k, v := range avs {
		if err := avtab.Put(dp, 1, bpf.MakeAddr(k), v); err != nil {
			t.Fatal(err)
		}
	}
	// The host's addresses, which the wildcard endpoints receive on.
	for _, a := range []string{"198.18.100.77", "2001:2:100::77"} {
		if err := dp.PutLocalAddr(netip.MustParseAddr(a), 1); err != nil {
			t.Fatal(err)
		}
	}
	return dp
}

var hit4 = want{verdict: xdpRedirect, counter: bpf.CounterTranslated, fiAddr: 3, userID: notAvail, flags: wire.MetaKnown, l3Off: 14, hdrOff: 42}

func spec(src, dst netip.AddrPort) wire.Frame {
	return wire.Frame{
		SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2},
		Src: src, Dst: dst, Hdr: wire.Hdr{Op: wire.OpMsg}, Payload: []byte("hello, fabric"),
	}
}

type want struct {
	verdict uint32
	counter bpf.Counter
	fiAddr  uint64
	userID  uint64
	flags   uint16
	l3Off   uint16
	hdrOff  uint16
	rxCtx   uint8
}

func TestXDPTable(t *testing.T) {
	dp := fixture(t)
	vlan := func(s wire.Frame, tags ...[2]uint16) wire.Frame { s.VLANs = tags; return s }
	opts := func(s wire.Frame, o []byte) wire.Frame { s.IPOptions = o; return s }
	hdr := func(s wire.Frame, f func(*wire.Hdr)) wire.Frame { f(&s.Hdr); return s }
	raw := func(s wire.Frame, f func([]byte)) wire.Frame {
		b := make([]byte, wire.HdrLen)
		wire.PutHdr(b, s.Hdr)
		f(b)
		s.RawHdr = b
		return s
	}
	q := [2]uint16{wire.Ether8021Q, 10}
	ad := [2]uint16{wire.Ether8021AD, 20}
	kernels := want{verdict: xdpPass, counter: bpf.CounterPass}

	cases := []struct {
		name string
		spec wire.Frame
		want want
	}{
		{"ipv4 hit", spec(known4, ep4), hit4},
		{"ipv6 hit", spec(known6, ep6), want{xdpRedirect, bpf.CounterTranslated, 4, notAvail, wire.MetaKnown, 14, 62, 0}},
		// Tagged frames are the kernel's, whatever they hold: it delivers
		// a frame of VLAN n only through a VLAN device for n (an interface
		// of its own, whose endpoints see its frames untagged) and drops it
		// where there is none, so an endpoint of this interface must not
		// receive it (TestXDPLeftToKernel has more).
		{"802.1Q to an endpoint", vlan(spec(known4, ep4), q), kernels},
		{"QinQ to an endpoint", vlan(spec(known4, ep4), ad, q), kernels},
		{"QinQ ipv6 to an endpoint", vlan(spec(known6, ep6), ad, q), kernels},
		// So are IPv4 headers with options, even only NOPs: the kernel
		// judges options (source routes, malformed ones), UDP senders do
		// not use them.
		{"ipv4 options", opts(spec(known4, ep4), []byte{1, 1, 1, 0}), kernels},
		{"ipv4 40B options", opts(spec(known4, ep4), bytes.Repeat([]byte{1}, 40)), kernels},
		{"user id", spec(userIDs, ep4), want{xdpRedirect, bpf.CounterTranslated, 5, 0xfeed, wire.MetaKnown | wire.MetaUserID, 14, 42, 0}},
		{"wildcard endpoint", spec(known4, netip.AddrPortFrom(netip.MustParseAddr("198.18.100.77"), 7100)), hit4},
		{"unknown, policy notavail", spec(stranger, ep4), want{xdpRedirect, bpf.CounterUnknown, notAvail, notAvail, 0, 14, 42, 0}},
		{"unknown, policy source_err", spec(netip.MustParseAddrPort("[2001:2:9::9]:1"), ep6), want{xdpRedirect, bpf.CounterUnknown, notAvail, notAvail, wire.MetaSourceErr, 14, 62, 0}},
		{"unknown, policy drop", spec(stranger, epDrop), want{verdict: xdpDrop, counter: bpf.CounterDropPolicy}},
		{"known, policy drop", spec(known4, epDrop), want{xdpRedirect, bpf.CounterTranslated, 3, notAvail, wire.MetaKnown, 14, 42, 0}},
		{"auth key match", hdr(spec(keyed, epAuth), func(h *wire.Hdr) { h.AuthKey = 0x1234 }), want{xdpRedirect, bpf.CounterTranslated, 6, notAvail, wire.MetaKnown, 14, 42, 0}},
		{"auth key wrong on wire", hdr(spec(keyed, epAuth), func(h *wire.Hdr) { h.AuthKey = 0x9999 }), want{xdpRedirect, bpf.CounterUnknown, notAvail, notAvail, 0, 14, 42, 0}},
		{"auth key: peer without key", hdr(spec(known4, epAuth), func(h *wire.Hdr) { h.AuthKey = 0x1234 }), want{xdpRedirect, bpf.CounterUnknown, notAvail, notAvail, 0, 14, 42, 0}},
		{"rx context 1", hdr(spec(known4, epCtx), func(h *wire.Hdr) { h.RxCtx = 1 }), want{xdpRedirect, bpf.CounterTranslated, 3, notAvail, wire.MetaKnown, 14, 42, 1}},
		{"rx context out of range", hdr(spec(known4, epCtx), func(h *wire.Hdr) { h.RxCtx = 2 }), want{verdict: xdpDrop, counter: bpf.CounterMalformed}},
		{"no socket in slot", spec(known4, epNoXSK), want{verdict: xdpDrop, counter: bpf.CounterRedirectFail}},
		{"bad magic", raw(spec(known4, ep4), func(b []byte) { b[0] ^= 0xff }), want{verdict: xdpDrop, counter: bpf.CounterMalformed}},
		{"bad version", raw(spec(known4, ep4), func(b []byte) { b[4] = 2 }), want{verdict: xdpDrop, counter: bpf.CounterMalformed}},
		{"op 0", hdr(spec(known4, ep4), func(h *wire.Hdr) { h.Op = 0 }), want{verdict: xdpDrop, counter: bpf.CounterMalformed}},
		{"op unknown", hdr(spec(known4, ep4), func(h *wire.Hdr) { h.Op = 9 }), want{verdict: xdpDrop, counter: bpf.CounterMalformed}},
		{"plain UDP to endpoint port", func() wire.Frame { s := spec(known4, ep4); s.NoHdr = true; s.Payload = []byte("x"); return s }(), want{verdict: xdpDrop, counter: bpf.CounterMalformed}},
		{"wrong port", spec(known4, netip.AddrPortFrom(ep4.Addr(), 7001)), want{verdict: xdpPass, counter: bpf.CounterPass}},
		{"other address", spec(known4, netip.MustParseAddrPort("198.18.100.99:7000")), want{verdict: xdpPass, counter: bpf.CounterPass}},
		{"tcp", func() wire.Frame { s := spec(known4, ep4); s.Proto = 6; return s }(), want{verdict: xdpPass, counter: bpf.CounterPass}},
		{"ipv4 first fragment", func() wire.Frame { s := spec(known4, ep4); s.FragOff = 0x2000; return s }(), want{verdict: xdpPass, counter: bpf.CounterPass}},
		{"ipv4 later fragment", func() wire.Frame { s := spec(known4, ep4); s.FragOff = 0x0010; return s }(), want{verdict: xdpPass, counter: bpf.CounterPass}},
		{"ipv6 extension header", spec(known6, ep6), want{verdict: xdpPass, counter: bpf.CounterPass}},
		{"ipv6 fragment header", func() wire.Frame { s := spec(known6, ep6); s.Proto = 44; return s }(), want{verdict: xdpPass, counter: bpf.CounterPass}},
		{"three VLAN tags", vlan(spec(known4, ep4), ad, q, q), want{verdict: xdpPass, counter: bpf.CounterPass}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := wire.Build(tc.spec)
			if tc.name == "ipv6 extension header" { // the builder writes UDP for Proto 0
				f[14+len(tc.spec.VLANs)*4+6] = 0 // next header: hop-by-hop options
			}
			check(t, dp, f, bpf.XDPMD{}, tc.want)
		})
	}
}

// check runs f and compares verdict, metadata and the counter deltas: RX
// and exactly one outcome counter move by one.
func check(t *testing.T, dp *loader.Objects, f []byte, ctx bpf.XDPMD, w want) {
	t.Helper()
	before, err := dp.Counters()
	if err != nil {
		t.Fatal(err)
	}
	r, err := xdptest.RunQueue(dp, f, ctx)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := dp.Counters()
	if r.Verdict != w.verdict {
		t.Errorf("verdict %d, want %d", r.Verdict, w.verdict)
	}
	for c := range bpf.NumCounters {
		d := after[c] - before[c]
		wantD := uint64(0)
		if c == bpf.CounterRX || c == w.counter {
			wantD = 1
		}
		if d != wantD {
			t.Errorf("counter %s moved by %d, want %d", c, d, wantD)
		}
	}
	if w.verdict != xdpRedirect {
		if w.verdict == xdpPass && !bytes.Equal(r.Frame, f) {
			t.Errorf("passed frame was modified")
		}
		return
	}
	if !r.HasMeta {
		t.Fatalf("no metadata in front of a redirected frame")
	}
	m := r.Meta
	got := want{r.Verdict, w.counter, m.FiAddr, m.UserID, m.Flags, m.L3Off, m.HdrOff, m.RxCtx}
	if got != w {
		t.Errorf("metadata %+v\nwant %+v", got, w)
	}
	if !bytes.Equal(r.Frame, f) {
		t.Errorf("redirected frame differs from the input")
	}
	udpLen := int(binary.BigEndian.Uint16(f[m.HdrOff-4:]))
	if int(m.PayloadLen) != udpLen-wire.UDPHeaderLen-wire.HdrLen {
		t.Errorf("payload_len %d, UDP length %d says %d", m.PayloadLen, udpLen, udpLen-wire.UDPHeaderLen-wire.HdrLen)
	}
	if h, ok := wire.ParseHdr(f[m.HdrOff:]); !ok || h.RxCtx != m.RxCtx {
		t.Errorf("hdr_off %d does not point at the xdpfab header", m.HdrOff)
	}
}

// Every truncation of valid frames: before the UDP header is complete the
// frame cannot be ours (PASS); after it, it is a malformed datagram to an
// endpoint (DROP). Never a redirect, never a crash. A tagged frame, or
// one with IPv4 options, is never ours: PASS at every length.
func TestXDPTruncated(t *testing.T) {
	dp := fixture(t)
	for _, s := range []wire.Frame{
		spec(known4, ep4),
		spec(known6, ep6),
		func() wire.Frame {
			s := spec(known4, ep4)
			s.VLANs = [][2]uint16{{wire.Ether8021AD, 1}, {wire.Ether8021Q, 2}}
			return s
		}(),
		func() wire.Frame {
			s := spec(known4, ep4)
			s.IPOptions = []byte{1, 1, 1, 0}
			return s
		}(),
	} {
		f := wire.Build(s)
		udpEnd := 14 + 8
		if s.Src.Addr().Is4() {
			udpEnd += 20
		} else {
			udpEnd += 40
		}
		kernels := len(s.VLANs) > 0 || len(s.IPOptions) > 0
		for cut := 14; cut < len(f); cut++ {
			w := want{verdict: xdpPass, counter: bpf.CounterPass}
			if cut >= udpEnd && !kernels {
				w = want{verdict: xdpDrop, counter: bpf.CounterMalformed}
			}
			t.Run("", func(t *testing.T) {
				check(t, dp, append([]byte(nil), f[:cut]...), bpf.XDPMD{}, w)
			})
		}
	}
}

// Length fields that lie: UDP length beyond the IP payload, IP length
// shorter than the headers. (TestXDPKernelChecks has the IP lengths
// beyond the frame.)
func TestXDPLengths(t *testing.T) {
	dp := fixture(t)
	// UDP length beyond the IP payload, with Ethernet padding so the frame
	// itself is long enough: only the IP length can tell.
	f := append(wire.Build(spec(known4, ep4)), make([]byte, 16)...)
	udpLen := f[14+20+4:]
	binary.BigEndian.PutUint16(udpLen, binary.BigEndian.Uint16(udpLen)+8)
	check(t, dp, f, bpf.XDPMD{}, want{verdict: xdpDrop, counter: bpf.CounterMalformed})

	// IP total length below the header: a datagram to an endpoint, so
	// malformed (it passed to the kernel before the IP checks).
	f = wire.Build(spec(known4, ep4))
	binary.BigEndian.PutUint16(f[14+2:], 10)
	fixIPv4(f[14:34])
	check(t, dp, f, bpf.XDPMD{}, want{verdict: xdpDrop, counter: bpf.CounterMalformed})

	// Ethernet padding after the datagram is fine: lengths come from UDP.
	f = append(wire.Build(spec(known4, ep4)), make([]byte, 20)...)
	check(t, dp, f, bpf.XDPMD{}, want{xdpRedirect, bpf.CounterTranslated, 3, notAvail, wire.MetaKnown, 14, 42, 0})
}

// Live frames: the program redirects into a bound AF_XDP socket and the
// metadata arrives as the descriptor's first bytes, the frame after it.
func TestXDPLiveFrameMetadata(t *testing.T) {
	testutil.RequirePrivileged(t)
	dp, err := loader.Load(loader.Config{AVEntries: 1024, MaxAVs: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	bed := testbed.New(t, testbed.Options{})
	x := xdptest.BindXSK(t, dp, bed.A, 0, 0)
	local := netip.AddrPortFrom(bed.A.IPv4, 7000)
	peer := netip.AddrPortFrom(bed.B.IPv4, 5000)
	if err := xdptest.PutEndpoint(dp, bpf.EPKey{Local: bpf.MakeAddr(local)}, bpf.EPVal{EpId: 1, AvId: 1, RxCtxs: 1, Queues: 1}); err != nil {
		t.Fatal(err)
	}
	if err := avtab.Put(dp, 1, bpf.MakeAddr(peer), bpf.AVVal{FiAddr: 42, UserId: 4242, Flags: bpf.AVFUserID}); err != nil {
		t.Fatal(err)
	}
	s := spec(peer, local)
	copy(s.DstMAC[:], bed.A.MAC)
	copy(s.SrcMAC[:], bed.B.MAC)
	f := wire.Build(s)
	const n = 8
	if err := xdptest.Inject(dp, bed.A, f, n); err != nil {
		t.Fatal(err)
	}
	descs := make([]dataplaneDesc, n)
	got := 0
	for tries := 0; got < n && tries < 100; tries++ {
		got += receive(x, descs[got:])
	}
	if got != n {
		t.Fatalf("received %d of %d frames", got, n)
	}
	for _, d := range descs[:got] {
		pkt := x.UMEM.Packet(d)
		if len(pkt) != wire.MetaLen+len(f) || !bytes.Equal(pkt[wire.MetaLen:], f) {
			t.Errorf("descriptor of %d bytes is not the metadata and the %d-byte frame", len(pkt), len(f))
			continue
		}
		m, ok := wire.ParseMeta(pkt[:wire.MetaLen])
		if !ok || m.FiAddr != 42 || m.UserID != 4242 || m.Flags != wire.MetaKnown|wire.MetaUserID || m.EpID != 1 {
			t.Errorf("metadata in the UMEM: %+v (ok %v)", m, ok)
		}
	}
	c, _ := dp.Counters()
	if c[bpf.CounterTranslated] != n {
		t.Errorf("translated counter %d, want %d", c[bpf.CounterTranslated], n)
	}
}

// A frame for an endpoint on an rx queue it does not listen on is dropped
// and counted wrong_queue (flow steering missing), not redirected.
func TestXDPQueueNotListened(t *testing.T) {
	dp := fixture(t)
	bed := testbed.New(t, testbed.Options{RxQueues: 2, TxQueues: 2})
	f := wire.Build(spec(known4, ep4))
	err := bed.A.Do(func() error {
		check(t, dp, f, bpf.XDPMD{IngressIfindex: uint32(bed.A.Ifindex), RxQueueIndex: 1}, want{verdict: xdpDrop, counter: bpf.CounterWrongQueue})
		check(t, dp, f, bpf.XDPMD{IngressIfindex: uint32(bed.A.Ifindex), RxQueueIndex: 0}, hit4)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Those two frames count in their ingress ifindex's row.
	rows, err := dp.CountersByIfindex()
	if err != nil {
		t.Fatal(err)
	}
	row := rows[bed.A.Ifindex]
	if row[bpf.CounterRX] != 2 || row[bpf.CounterWrongQueue] != 1 || row[bpf.CounterTranslated] != 1 {
		t.Errorf("ifindex %d counters %v", bed.A.Ifindex, row)
	}
}
