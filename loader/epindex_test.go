//go:build linux

package loader_test

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/internal/testutil"
	"github.com/xdpfab/xdpfab/internal/xdptest"
	"github.com/xdpfab/xdpfab/loader"
	"github.com/xdpfab/xdpfab/wire"
)

// The endpoint index (epindex.go) against the hash table it shortcuts:
// random binds, unbinds and value changes (SetTrace's) of endpoints on a
// few ports, at two addresses per family and the wildcards, with so few
// slots that they are retired and reused all along; after every step the
// program delivers every probe datagram to the endpoint the table says
// (the exact address, else the family's wildcard for a local address),
// and the index lists every endpoint of the ports with at most
// bpf.EPPerPort (up to six are bound: a port may have more), and nothing
// for the others.
func TestEndpointIndex(t *testing.T) {
	testutil.RequirePrivileged(t)
	const maxEPs = 6
	dp, err := loader.Load(loader.Config{AVEntries: 1024, MaxAVs: 4, MaxEndpoints: maxEPs})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	addrs := []netip.Addr{
		netip.MustParseAddr("198.18.7.1"), netip.MustParseAddr("198.18.7.2"), netip.IPv4Unspecified(),
		netip.MustParseAddr("2001:2:7::1"), netip.MustParseAddr("2001:2:7::2"), netip.IPv6Unspecified(),
	}
	// .1 of each family is the host's (a wildcard receives on it), .2 not.
	for _, a := range []netip.Addr{addrs[0], addrs[3]} {
		if err := dp.PutLocalAddr(a, 1); err != nil {
			t.Fatal(err)
		}
	}
	ports := []uint16{7000, 7001, 65535}
	src4, src6 := netip.MustParseAddrPort("198.18.9.9:5000"), netip.MustParseAddrPort("[2001:2:9::9]:5000")
	type ep struct {
		id    uint32
		flags uint8
	}
	table := map[netip.AddrPort]ep{}
	nextID := uint32(1)
	seen := map[string]bool{} // the port shapes the run went through
	check := func(step int) {
		t.Helper()
		for _, p := range ports {
			n := 0
			for k := range table {
				if k.Port() == p {
					n++
				}
			}
			var e uint64
			if err := dp.EPPort.Lookup(uint32(p), &e); err != nil {
				t.Fatal(err)
			}
			listed := 0
			for e>>(16*listed)&0xffff != 0 && listed < bpf.EPPerPort {
				listed++
			}
			if n > bpf.EPPerPort && listed != 0 || n <= bpf.EPPerPort && listed != n || e>>(16*listed) != 0 {
				t.Fatalf("step %d: port %d has %d endpoints, index entry %#x", step, p, n, e)
			}
			switch {
			case n > bpf.EPPerPort:
				seen["more than the index lists"] = true
			case n > 1:
				seen["several listed"] = true
			}
			for _, a := range addrs {
				if a.IsUnspecified() {
					continue
				}
				dst := netip.AddrPortFrom(a, p)
				want, ok := table[dst]
				if !ok && (a == addrs[0] || a == addrs[3]) {
					wild := netip.IPv4Unspecified()
					if a.Is6() {
						wild = netip.IPv6Unspecified()
					}
					want, ok = table[netip.AddrPortFrom(wild, p)]
				}
				src := src4
				if a.Is6() {
					src = src6
				}
				r, err := xdptest.Run(dp, wire.Build(wire.Frame{Src: src, Dst: dst, Hdr: wire.Hdr{Op: wire.OpMsg}}))
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case !ok && (r.HasMeta || r.Verdict != 2):
					t.Fatalf("step %d: %v has no endpoint, program: verdict %d, meta %v (ep %d)", step, dst, r.Verdict, r.HasMeta, r.Meta.EpID)
				case ok && (!r.HasMeta || r.Meta.EpID != want.id):
					t.Fatalf("step %d: %v is endpoint %d's, program: verdict %d, meta %v (ep %d)", step, dst, want.id, r.Verdict, r.HasMeta, r.Meta.EpID)
				case ok && (want.flags&bpf.EPFStamp != 0) != (r.Meta.Flags&wire.MetaStamp != 0):
					t.Fatalf("step %d: %v: endpoint %d's stamp flag %d, the frame's meta flags %#x", step, dst, want.id, want.flags, r.Meta.Flags)
				}
			}
		}
	}
	rng := rand.New(rand.NewPCG(13, 1))
	for step := range 1000 {
		k := netip.AddrPortFrom(addrs[rng.IntN(len(addrs))], ports[rng.IntN(len(ports))])
		key := bpf.EPKey{Local: bpf.MakeAddr(k)}
		unlock := dp.Lock()
		cur, bound := table[k]
		switch {
		case bound && rng.IntN(3) == 0: // a value change, as SetTrace makes
			cur.flags ^= bpf.EPFStamp
			if err := dp.PutEndpoint(key, bpf.EPVal{EpId: cur.id, RxCtxs: 1, Queues: 1, Flags: cur.flags}, ebpf.UpdateExist); err != nil {
				t.Fatal(err)
			}
			table[k] = cur
		case bound:
			if err := dp.DeleteEndpoint(key); err != nil {
				t.Fatal(err)
			}
			delete(table, k)
		case len(table) < maxEPs:
			if err := dp.PutEndpoint(key, bpf.EPVal{EpId: nextID, RxCtxs: 1, Queues: 1}, ebpf.UpdateNoExist); err != nil {
				t.Fatal(err)
			}
			table[k] = ep{id: nextID}
			nextID++
		default:
			if err := dp.DeleteEndpoint(key); err == nil {
				t.Fatalf("step %d: deleted %v, which is not bound", step, k)
			}
		}
		unlock()
		check(step)
	}
	for _, shape := range []string{"more than the index lists", "several listed"} {
		if !seen[shape] {
			t.Errorf("no step had a port with %s", shape)
		}
	}
}
