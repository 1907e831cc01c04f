//go:build linux

package bpf_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/internal/testutil"
	"github.com/xdpfab/xdpfab/internal/xdpmodel"
	"github.com/xdpfab/xdpfab/internal/xdptest"
	"github.com/xdpfab/xdpfab/loader"
	"github.com/xdpfab/xdpfab/wire"
	"golang.org/x/sys/unix"
)

// fixIPv4 rewrites the checksum of the IPv4 header h.
func fixIPv4(h []byte) {
	h[10], h[11] = 0, 0
	binary.BigEndian.PutUint16(h[10:], wire.IPv4Checksum(h))
}

// mutate builds s, applies f to the frame and the datagram ParseUDP found
// in it, and fixes the checksums f broke when fix is set, so that f's
// change is the frame's only defect.
func mutate(s wire.Frame, fix bool, f func([]byte, wire.Datagram)) []byte {
	b := wire.Build(s)
	d, _ := wire.ParseUDP(b)
	f(b, d)
	if fix {
		xdpmodel.FixIPv4Checksum(b, d)
		xdpmodel.FixUDPChecksum(b, d)
	}
	return b
}

func to(a string, port uint16) netip.AddrPort {
	return netip.AddrPortFrom(netip.MustParseAddr(a), port)
}

// Issue 10, finding 7: frames the kernel would never deliver to a UDP
// socket reached the application. Each kind is now refused, counted in
// one counter, and never redirected. Before, the program redirected every
// case up to the fragments but the one marked "already before" (run
// against the previous object, b9b968c's). The last cases are datagrams
// the kernel does deliver, which must still be.
func TestXDPKernelChecks(t *testing.T) {
	dp := fixture(t)
	drop := func(c bpf.Counter) want { return want{verdict: xdpDrop, counter: c} }
	notLocal := want{verdict: xdpPass, counter: bpf.CounterNotLocal}
	hit6 := want{xdpRedirect, bpf.CounterTranslated, 4, notAvail, wire.MetaKnown, 14, 62, 0}
	wild4 := func(dst string) []byte { return wire.Build(spec(known4, to(dst, 7100))) }
	wild6 := func(dst string) []byte {
		// The IPv6 wildcard's endpoint is added below.
		return wire.Build(spec(known6, to(dst, 7100)))
	}
	if err := dp.EP.Put(bpf.EPKey{Local: bpf.MakeAddr(to("::", 7100))}, bpf.EPVal{EpId: 8, AvId: 1, RxCtxs: 1, Queues: 1}); err != nil {
		t.Fatal(err)
	}
	if err := dp.EP.Put(bpf.EPKey{Local: bpf.MakeAddr(to("127.0.0.1", 7000))}, bpf.EPVal{EpId: 9, AvId: 1, RxCtxs: 1, Queues: 1}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		frame []byte
		want  want
	}{
		{"IPv4 header checksum wrong", mutate(spec(known4, ep4), false, func(b []byte, d wire.Datagram) { b[d.L3Off+10] ^= 0x55 }), drop(bpf.CounterCsumError)},
		{"IPv4 TTL changed, header checksum not", mutate(spec(known4, ep4), false, func(b []byte, d wire.Datagram) { b[d.L3Off+8]-- }), drop(bpf.CounterCsumError)},
		// Options are the kernel's to judge, before any check of the
		// header (TestXDPLeftToKernel).
		{"IPv4 options, header checksum wrong: the kernel's", func() []byte {
			s := spec(known4, ep4)
			s.IPOptions = []byte{1, 1, 1, 0}
			b := wire.Build(s)
			b[14+20] = 7
			return b
		}(), want{verdict: xdpPass, counter: bpf.CounterPass}},
		{"UDP checksum wrong (IPv4)", mutate(spec(known4, ep4), false, func(b []byte, d wire.Datagram) { b[d.L4Off+6] ^= 0x01 }), drop(bpf.CounterCsumError)},
		{"UDP payload corrupted (IPv4)", mutate(spec(known4, ep4), false, func(b []byte, d wire.Datagram) { b[len(b)-1] ^= 0x80 }), drop(bpf.CounterCsumError)},
		{"UDP payload corrupted (IPv6)", mutate(spec(known6, ep6), false, func(b []byte, d wire.Datagram) { b[d.L4Off+8+wire.HdrLen] ^= 0x02 }), drop(bpf.CounterCsumError)},
		{"UDP checksum 0 over IPv6", mutate(spec(known6, ep6), false, func(b []byte, d wire.Datagram) { b[d.L4Off+6], b[d.L4Off+7] = 0, 0 }), drop(bpf.CounterCsumError)},
		{"IPv4 version 6", mutate(spec(known4, ep4), true, func(b []byte, d wire.Datagram) { b[d.L3Off] = 0x65 }), drop(bpf.CounterMalformed)},
		{"IPv4 version 0", mutate(spec(known4, ep4), true, func(b []byte, d wire.Datagram) { b[d.L3Off] = 0x05 }), drop(bpf.CounterMalformed)},
		{"IPv6 version 4", mutate(spec(known6, ep6), true, func(b []byte, d wire.Datagram) { b[d.L3Off] = 0x40 }), drop(bpf.CounterMalformed)},
		{"IPv4 total length beyond the frame", mutate(spec(known4, ep4), true, func(b []byte, d wire.Datagram) {
			binary.BigEndian.PutUint16(b[d.L3Off+2:], binary.BigEndian.Uint16(b[d.L3Off+2:])+4)
		}), drop(bpf.CounterMalformed)},
		{"IPv6 payload length beyond the frame", mutate(spec(known6, ep6), true, func(b []byte, d wire.Datagram) {
			binary.BigEndian.PutUint16(b[d.L3Off+4:], binary.BigEndian.Uint16(b[d.L3Off+4:])+4)
		}), drop(bpf.CounterMalformed)},
		{"already before: UDP length beyond the IPv6 payload", mutate(spec(known6, ep6), true, func(b []byte, d wire.Datagram) {
			binary.BigEndian.PutUint16(b[d.L4Off+4:], binary.BigEndian.Uint16(b[d.L4Off+4:])+2)
		}), drop(bpf.CounterMalformed)},
		{"martian source 127.0.0.1", wire.Build(spec(to("127.0.0.1", 5000), ep4)), drop(bpf.CounterMalformed)},
		{"martian source 255.255.255.255", wire.Build(spec(to("255.255.255.255", 5000), ep4)), drop(bpf.CounterMalformed)},
		{"martian source ff02::1", wire.Build(spec(to("ff02::1", 5000), ep6)), drop(bpf.CounterMalformed)},
		{"wildcard: limited broadcast", wild4("255.255.255.255"), notLocal},
		{"wildcard: subnet broadcast", wild4("198.18.100.255"), notLocal},
		{"wildcard: multicast", wild4("224.0.0.251"), notLocal},
		{"wildcard: loopback", wild4("127.0.0.1"), notLocal},
		{"wildcard: 0.0.0.0", wild4("0.0.0.0"), notLocal},
		{"wildcard: another host's address", wild4("198.18.200.9"), notLocal},
		{"wildcard IPv6: multicast", wild6("ff02::1"), notLocal},
		{"wildcard IPv6: loopback", wild6("::1"), notLocal},
		{"wildcard IPv6: another host's address", wild6("2001:2:200::9"), notLocal},
		{"endpoint bound to loopback", wire.Build(spec(known4, to("127.0.0.1", 7000))), notLocal},
		{"still: first fragment passes", mutate(spec(known4, ep4), true, func(b []byte, d wire.Datagram) { b[d.L3Off+6] = 0x20 }), want{verdict: xdpPass, counter: bpf.CounterPass}},
		{"still: later fragment passes", mutate(spec(known4, ep4), true, func(b []byte, d wire.Datagram) { b[d.L3Off+7] = 0x08 }), want{verdict: xdpPass, counter: bpf.CounterPass}},

		// What the kernel delivers, xdpfab still does.
		{"UDP checksum 0 over IPv4 (none)", wire.Build(func() wire.Frame { s := spec(known4, ep4); s.NoUDPCsum = true; return s }()), hit4},
		{"CHECKSUM_PARTIAL (IPv4)", partial(spec(known4, ep4)), hit4},
		{"CHECKSUM_PARTIAL (IPv6)", partial(spec(known6, ep6)), hit6},
		{"wildcard: a local address", wild4("198.18.100.77"), hit4},
		{"wildcard IPv6: a local address", wild6("2001:2:100::77"), want{xdpRedirect, bpf.CounterTranslated, 4, notAvail, wire.MetaKnown, 14, 62, 0}},
		{"DF set", mutate(spec(known4, ep4), true, func(b []byte, d wire.Datagram) { b[d.L3Off+6] = 0x40 }), hit4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			check(t, dp, tc.frame, bpf.XDPMD{}, tc.want)
			// The model agrees.
			if got := fixtureTables(t, dp).Run(tc.frame, bpf.XDPMD{IngressIfindex: 1}); got.Action != tc.want.verdict || got.Counter != tc.want.counter {
				t.Errorf("model: %v, want %d/%v", got, tc.want.verdict, tc.want.counter)
			}
		})
	}
}

// partial builds s with the UDP checksum field holding the bare
// pseudo-header sum, as a kernel socket's datagram over veth has it
// (CHECKSUM_PARTIAL).
func partial(s wire.Frame) []byte {
	return mutate(s, false, func(b []byte, d wire.Datagram) {
		n := int(binary.BigEndian.Uint16(b[d.L4Off+4:]))
		binary.BigEndian.PutUint16(b[d.L4Off+6:], wire.Checksum16(nil, wire.PseudoHeaderSum(d.Src.Addr(), d.Dst.Addr(), n)))
	})
}

// fixtureTables reads dp's tables into the model's form (fixture's
// socket is in XSKMAP slots 0 and 1).
func fixtureTables(t *testing.T, dp *loader.Objects) *xdpmodel.Tables {
	t.Helper()
	tb, err := xdpmodel.ReadTables(dp, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// Jumbo datagrams on a veth pair at MTU 9000, in native mode (which veth
// allows only to a multi-buffer program: xdp.frags) and generic mode:
// sent as raw frames from B, with checksums computed in full, so that the
// program sums them over the frame's fragments. Valid ones are checked
// and (for want of a socket in their slot) fail the redirect; a byte
// corrupted in the fragments is a checksum error; lengths that reach past
// the frame are malformed. The test-run side of the same checks is the
// differential test's (internal/xdpmodel, frames of kind jumbo).
func TestXDPJumbo(t *testing.T) {
	testutil.RequirePrivileged(t)
	for _, mode := range []testbed.XDPMode{testbed.Native, testbed.Generic} {
		t.Run(mode.String(), func(t *testing.T) { testXDPJumbo(t, mode) })
	}
}

func testXDPJumbo(t *testing.T, mode testbed.XDPMode) {
	dp, err := loader.Load(loader.Config{AVEntries: 1024, MaxAVs: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	bed := testbed.New(t, testbed.Options{MTU: 9000, XDPMode: mode, StaticNeighbors: true})
	testbed.AttachXDP(t, bed.A, dp.Program)
	local := netip.AddrPortFrom(bed.A.IPv4, 7000)
	if err := dp.EP.Put(bpf.EPKey{Local: bpf.MakeAddr(local)}, bpf.EPVal{EpId: 1, AvId: 1, RxCtxs: 1, Queues: 1, XskBase: 7}); err != nil {
		t.Fatal(err)
	}
	var fd int
	err = bed.B.Do(func() (err error) {
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	to := &unix.SockaddrLinklayer{Ifindex: bed.B.Ifindex, Halen: 6}
	copy(to.Addr[:], bed.A.MAC)
	const maxUDP = 9000 - 20 // the longest datagram MTU 9000 carries over IPv4
	for _, tc := range []struct {
		udpLen  int
		corrupt int // payload byte corrupted, counted from the end; 0: none
		lie     int // added to the UDP length (checksum fixed when longer)
		want    bpf.Counter
	}{
		{4000, 0, 0, bpf.CounterRedirectFail},
		{4000, 3, 0, bpf.CounterCsumError},
		{xdpmodel.MaxLinearSum + 1, 0, 0, bpf.CounterRedirectFail},
		{8000, 0, 0, bpf.CounterRedirectFail},
		{8000, 3, 0, bpf.CounterCsumError},
		{8000, 4500, 0, bpf.CounterCsumError},
		{maxUDP, 0, 0, bpf.CounterRedirectFail},
		{maxUDP, 1, 0, bpf.CounterCsumError},
		{8000, 0, 1, bpf.CounterMalformed},     // UDP length past the IP payload
		{8000, 0, -1000, bpf.CounterCsumError}, // a shorter datagram: its sum is wrong
	} {
		s := spec(netip.AddrPortFrom(bed.B.IPv4, 5000), local)
		copy(s.DstMAC[:], bed.A.MAC)
		copy(s.SrcMAC[:], bed.B.MAC)
		s.Payload = make([]byte, tc.udpLen-wire.UDPHeaderLen-wire.HdrLen)
		for i := range s.Payload {
			s.Payload[i] = byte(i)
		}
		f := wire.Build(s)
		if tc.corrupt > 0 {
			f[len(f)-tc.corrupt] ^= 0x10
		}
		if tc.lie != 0 {
			d, _ := wire.ParseUDP(f)
			binary.BigEndian.PutUint16(f[d.L4Off+4:], uint16(tc.udpLen+tc.lie))
			if tc.lie > 0 {
				xdpmodel.FixUDPChecksum(f, d)
			}
		}
		before, _ := dp.Counters()
		if err := unix.Sendto(fd, f, 0, to); err != nil {
			t.Fatalf("send %d bytes: %v", len(f), err)
		}
		var after [bpf.NumCounters]uint64
		for range 400 {
			if after, _ = dp.Counters(); after[bpf.CounterRX] > before[bpf.CounterRX] && after[tc.want] > before[tc.want] {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if after[tc.want] != before[tc.want]+1 {
			t.Errorf("UDP length %d (corrupted %d from the end, length %+d): counter %v moved by %d; counters before %v after %v",
				tc.udpLen, tc.corrupt, tc.lie, tc.want, after[tc.want]-before[tc.want], before, after)
		}
	}
}

// The verifier accepts the program with the agent's capabilities alone
// (CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN, CAP_NET_RAW, CAP_IPC_LOCK; no
// CAP_SYS_ADMIN): the checks' variable-offset packet pointers need
// CAP_PERFMON (docs/platform.md#variable-offsets-need-cap_perfmon).
func TestXDPLoadsWithAgentCaps(t *testing.T) {
	testutil.RequirePrivileged(t)
	if dp, err := loader.Load(loader.Config{AVEntries: 1024}); err == nil { // probe features with all caps
		dp.Close()
	}
	keep := map[int]bool{unix.CAP_BPF: true, unix.CAP_PERFMON: true, unix.CAP_NET_ADMIN: true, unix.CAP_NET_RAW: true, unix.CAP_IPC_LOCK: true}
	var drop []int
	for c := range unix.CAP_LAST_CAP + 1 {
		if !keep[c] {
			drop = append(drop, c)
		}
	}
	testutil.WithoutCaps(t, drop, func() {
		dp, err := loader.Load(loader.Config{AVEntries: 1024})
		if err != nil {
			t.Fatalf("load with the agent's capabilities: %v", err)
		}
		dp.Close()
	})
}

// The UDP checksum is summed in pieces chosen by the datagram's length
// (512-byte chunks, then the remainder's set bits: by helper calls from
// 256 down to 128, as 32-bit words below, then 2 and 1 bytes), so every
// remainder takes a different combination of them. For every payload
// length up to 700 bytes (UDP lengths 40 to 740: every remainder below
// 512 and a chunk), both families: the datagram with its checksum is
// redirected with its full metadata (the last 16 bytes of which the
// program writes as two words), and the same with one byte corrupted in
// its first, middle or last 4-byte word is dropped as a checksum error.
func TestXDPChecksumEveryLength(t *testing.T) {
	dp := fixture(t)
	tb := fixtureTables(t, dp)
	// The program of native mode, and the single-buffer copy generic
	// mode attaches (loader.Objects.ProgramFor).
	for _, mode := range []loader.Mode{loader.Native, loader.Generic} {
		prog, err := dp.ProgramFor(mode)
		if err != nil {
			t.Fatal(err)
		}
		checksumEveryLength(t, dp, tb, prog, mode)
	}
}

func checksumEveryLength(t *testing.T, dp *loader.Objects, tb *xdpmodel.Tables, prog *ebpf.Program, mode loader.Mode) {
	for _, c := range []struct {
		src, dst netip.AddrPort
		epID     uint32
		rxCtx    uint8
		fiAddr   uint64
		l3, hdr  uint16
		family   uint8
	}{
		{known4, epCtx, 5, 1, 3, 14, 42, wire.AFInet},
		{known6, ep6, 2, 0, 4, 14, 62, wire.AFInet6},
	} {
		for n := 0; n <= 700; n++ {
			s := spec(c.src, c.dst)
			s.Hdr.RxCtx = c.rxCtx
			s.Payload = make([]byte, n)
			for i := range s.Payload {
				s.Payload[i] = byte(i*7 + n)
			}
			good := wire.Build(s)
			r, err := xdptest.RunProgram(prog, good, bpf.XDPMD{})
			if err != nil {
				t.Fatal(err)
			}
			wantMeta := wire.Meta{FiAddr: c.fiAddr, UserID: notAvail, EpID: c.epID, Flags: wire.MetaKnown, L3Off: c.l3, HdrOff: c.hdr,
				PayloadLen: uint16(n), Family: c.family, Version: wire.MetaVersion, RxCtx: c.rxCtx}
			if r.Verdict != xdpRedirect || !r.HasMeta || r.Meta != wantMeta {
				t.Fatalf("%v %v, payload %d B: verdict %d, metadata %+v (%v), want a redirect with %+v", mode, c.src, n, r.Verdict, r.Meta, r.HasMeta, wantMeta)
			}
			udp := int(c.hdr) - 8
			before, err := dp.Counters()
			if err != nil {
				t.Fatal(err)
			}
			for _, at := range []int{udp + 8, udp + (8+wire.HdrLen+n)/2, len(good) - 1} {
				bad := bytes.Clone(good)
				bad[at] ^= 0x40
				r, err := xdptest.RunProgram(prog, bad, bpf.XDPMD{})
				if err != nil {
					t.Fatal(err)
				}
				if r.Verdict != xdpDrop {
					t.Fatalf("%v %v, payload %d B, byte %d corrupted: verdict %d, want a drop", mode, c.src, n, at, r.Verdict)
				}
				if m := tb.Run(bad, bpf.XDPMD{IngressIfindex: 1}); m.Counter != bpf.CounterCsumError {
					t.Fatalf("%v, payload %d B, byte %d corrupted: the model says %v", c.src, n, at, m)
				}
			}
			after, err := dp.Counters()
			if err != nil {
				t.Fatal(err)
			}
			if d := after[bpf.CounterCsumError] - before[bpf.CounterCsumError]; d != 3 {
				t.Fatalf("%v, payload %d B: %d checksum errors counted for 3 corrupted datagrams", c.src, n, d)
			}
		}
	}
}

// Frames the program leaves to the kernel untouched (pass, counted
// passed), whoever sends them and whatever they hold: each is a valid
// datagram from a source in the AV to an endpoint, by its address or
// through the wildcard, that the program would attribute and redirect
// untagged and without options.
//   - VLAN-tagged frames: the kernel delivers a frame of VLAN n only
//     through a VLAN device for n, an interface of its own, and drops it
//     where there is none. An endpoint receives its interface's untagged
//     traffic, so on a trunk port a host of any VLAN would reach it. A
//     priority tag (VLAN 0), which the kernel takes as untagged, is left
//     to it too.
//   - IPv4 headers with options: the kernel refuses source routes
//     (accept_source_route, off by default) and drops malformed options
//     (a length of 0, a timestamp too short for its pointer); valid ones
//     (NOPs, a router alert) go to it as well, the same way, since UDP
//     senders do not use options.
//
// The model agrees.
func TestXDPLeftToKernel(t *testing.T) {
	dp := fixture(t)
	wild := to("198.18.100.77", 7100) // the wildcard endpoint, on a local address
	tagged := func(src, dst netip.AddrPort, tags ...[2]uint16) []byte {
		s := spec(src, dst)
		s.VLANs = tags
		return wire.Build(s)
	}
	withOpts := func(dst netip.AddrPort, o ...byte) []byte {
		s := spec(known4, dst)
		s.IPOptions = o
		return wire.Build(s)
	}
	q := func(id uint16) [2]uint16 { return [2]uint16{wire.Ether8021Q, id} }
	ad := func(id uint16) [2]uint16 { return [2]uint16{wire.Ether8021AD, id} }
	cases := []struct {
		name  string
		frame []byte
	}{
		{"802.1Q VLAN 10", tagged(known4, ep4, q(10))},
		{"802.1Q VLAN 4094", tagged(known4, ep4, q(4094))},
		{"802.1Q VLAN 10, to the wildcard", tagged(known4, wild, q(10))},
		{"802.1Q VLAN 10, IPv6", tagged(known6, ep6, q(10))},
		{"802.1ad VLAN 20", tagged(known4, ep4, ad(20))},
		{"QinQ 20/10", tagged(known4, ep4, ad(20), q(10))},
		{"QinQ 20/10, IPv6", tagged(known6, ep6, ad(20), q(10))},
		{"two 802.1Q tags", tagged(known4, ep4, q(1), q(2))},
		{"priority tag (VLAN 0)", tagged(known4, ep4, q(0))},
		{"LSRR", withOpts(ep4, 0x83, 7, 4, 198, 18, 1, 1, 1)},
		{"SSRR", withOpts(ep4, 0x89, 7, 4, 198, 18, 1, 1, 1)},
		{"LSRR, to the wildcard", withOpts(wild, 0x83, 7, 4, 198, 18, 1, 1, 1)},
		{"option of length 0", withOpts(ep4, 0x44, 0, 1, 1)},
		{"timestamp of 2 bytes", withOpts(ep4, 0x44, 2, 1, 1)},
		{"router alert", withOpts(ep4, 0x94, 4, 0, 0)},
		{"NOPs", withOpts(ep4, 1, 1, 1, 1)},
		{"40 bytes of NOPs", withOpts(ep4, bytes.Repeat([]byte{1}, 40)...)},
	}
	kernels := want{verdict: xdpPass, counter: bpf.CounterPass}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			check(t, dp, tc.frame, bpf.XDPMD{}, kernels)
			if got := fixtureTables(t, dp).Run(tc.frame, bpf.XDPMD{IngressIfindex: 1}); got.Action != xdpPass || got.Counter != bpf.CounterPass {
				t.Errorf("model: %v, want pass/passed", got)
			}
		})
	}
}
