package xdpmodel

import (
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/internal/avtab"
	"github.com/xdpfab/xdpfab/loader"
)

// The fixture: endpoints of every kind, two AVs, local addresses and a set
// of XSKMAP slots with sockets, for the differential test, FuzzModel and
// the generator. The addresses are in 198.18.0.0/15 and 2001:2::/48
// (benchmarking ranges) and the special ranges the checks are about.
var (
	EP4      = netip.MustParseAddrPort("198.18.100.1:7000")
	EP6      = netip.MustParseAddrPort("[2001:2:100::1]:7000")
	EPDrop   = netip.MustParseAddrPort("198.18.100.2:7000")
	EPAuth   = netip.MustParseAddrPort("198.18.100.3:7000")
	EPCtx    = netip.MustParseAddrPort("198.18.100.4:7000") // 3 contexts, 2 queues, some slots empty
	EPNoXSK  = netip.MustParseAddrPort("198.18.100.5:7000")
	EPNoAV   = netip.MustParseAddrPort("198.18.100.6:7000")
	EPQ1     = netip.MustParseAddrPort("198.18.100.7:7000") // listens on rx queue 1 only
	EPWild4  = netip.MustParseAddrPort("0.0.0.0:7100")
	EPWild6  = netip.MustParseAddrPort("[::]:7100")
	EPSpec   = netip.MustParseAddrPort("198.18.100.1:7200") // a specific endpoint and ...
	EPWildSp = netip.MustParseAddrPort("0.0.0.0:7200")      // ... a wildcard on the same port
	EPLoop   = netip.MustParseAddrPort("127.0.0.1:7000")    // endpoints on addresses no datagram
	EPMcast  = netip.MustParseAddrPort("224.0.0.251:7000")  // from the wire may be for

	Known4   = netip.MustParseAddrPort("198.18.1.1:5000")
	Known6   = netip.MustParseAddrPort("[2001:2:1::1]:5000")
	UserIDs  = netip.MustParseAddrPort("198.18.1.2:5000")
	Keyed    = netip.MustParseAddrPort("198.18.1.3:5000")
	Known6b  = netip.MustParseAddrPort("[2001:2:1::2]:5000") // in AV 2 (the IPv6 wildcard's)
	Stranger = netip.MustParseAddrPort("198.18.9.9:5000")

	// LocalAddrs are the host's addresses in the fixture: a wildcard
	// endpoint receives on these and nothing else.
	LocalAddrs = []netip.Addr{
		netip.MustParseAddr("198.18.100.1"), netip.MustParseAddr("198.18.100.77"),
		netip.MustParseAddr("2001:2:100::1"), netip.MustParseAddr("2001:2:100::77"),
		netip.MustParseAddr("fe80::1"),
	}
)

// AuthKey is the fixture's auth key value (EPAuth, Keyed).
const AuthKey = 0x1234

// Fixture returns the fixture's tables.
func Fixture() *Tables {
	t := &Tables{EPs: map[bpf.EPKey]bpf.EPVal{}, AV: map[bpf.AVKey]bpf.AVVal{}, Local: map[bpf.Addr]bool{}, XSKs: map[uint32]bool{}}
	for k, v := range map[netip.AddrPort]bpf.EPVal{
		EP4:      {EpId: 1, AvId: 1, XskBase: 0, RxCtxs: 1, Queues: 1, Policy: bpf.PolicyNotAvail},
		EP6:      {EpId: 2, AvId: 1, XskBase: 1, RxCtxs: 1, Queues: 1, Policy: bpf.PolicySourceErr, Flags: bpf.EPFStamp},
		EPDrop:   {EpId: 3, AvId: 1, XskBase: 0, RxCtxs: 1, Queues: 1, Policy: bpf.PolicyDrop},
		EPAuth:   {EpId: 4, AvId: 1, XskBase: 2, RxCtxs: 1, Queues: 1, AuthKey: AuthKey},
		EPCtx:    {EpId: 5, AvId: 1, XskBase: 4, RxCtxs: 3, Queues: 2},
		EPNoXSK:  {EpId: 6, AvId: 1, XskBase: 20, RxCtxs: 1, Queues: 1},
		EPNoAV:   {EpId: 7, AvId: 0, XskBase: 0, RxCtxs: 1, Queues: 1, Policy: bpf.PolicySourceErr},
		EPQ1:     {EpId: 14, AvId: 1, XskBase: 1, RxCtxs: 1, Queues: 1, FirstQueue: 1},
		EPWild4:  {EpId: 8, AvId: 1, XskBase: 0, RxCtxs: 1, Queues: 1},
		EPWild6:  {EpId: 9, AvId: 2, XskBase: 1, RxCtxs: 1, Queues: 1, Policy: bpf.PolicyDrop},
		EPSpec:   {EpId: 10, AvId: 1, XskBase: 0, RxCtxs: 1, Queues: 1},
		EPWildSp: {EpId: 11, AvId: 1, XskBase: 2, RxCtxs: 2, Queues: 1},
		EPLoop:   {EpId: 12, AvId: 1, XskBase: 0, RxCtxs: 1, Queues: 1},
		EPMcast:  {EpId: 13, AvId: 1, XskBase: 0, RxCtxs: 1, Queues: 1},
	} {
		t.EPs[bpf.EPKey{Local: bpf.MakeAddr(k)}] = v
	}
	none := ^uint64(0)
	for k, v := range map[bpf.AVKey]bpf.AVVal{
		{AvId: 1, Src: bpf.MakeAddr(Known4)}:  {FiAddr: 3, UserId: none},
		{AvId: 1, Src: bpf.MakeAddr(Known6)}:  {FiAddr: 4, UserId: none},
		{AvId: 1, Src: bpf.MakeAddr(UserIDs)}: {FiAddr: 5, UserId: 0xfeed, Flags: bpf.AVFUserID},
		{AvId: 1, Src: bpf.MakeAddr(Keyed)}:   {FiAddr: 6, UserId: none, AuthKey: AuthKey},
		{AvId: 2, Src: bpf.MakeAddr(Known6b)}: {FiAddr: 7, UserId: 0x77, Flags: bpf.AVFUserID},
	} {
		t.AV[k] = v
	}
	for _, a := range LocalAddrs {
		t.Local[bpf.MakeAddr(netip.AddrPortFrom(a, 0))] = true
	}
	for _, s := range FixtureSlots {
		t.XSKs[s] = true
	}
	return t
}

// FixtureSlots are the XSKMAP slots that hold a socket in the fixture
// (slots 3, 8, 9 and 20 stay empty).
var FixtureSlots = []uint32{0, 1, 2, 4, 5, 6, 7}

// Install writes t's endpoints, AV entries and local addresses into dp's
// maps (the XSKMAP needs real sockets: the caller puts them in t.XSKs's
// slots).
func (t *Tables) Install(dp *loader.Objects) error {
	unlock := dp.Lock()
	for k, v := range t.EPs {
		if err := dp.PutEndpoint(k, v, ebpf.UpdateAny); err != nil {
			unlock()
			return fmt.Errorf("endpoint %v: %w", k.Local.AddrPort(), err)
		}
	}
	unlock()
	for k, v := range t.AV {
		if err := avtab.Put(dp, k.AvId, k.Src, v); err != nil {
			return fmt.Errorf("AV entry %v: %w", k.Src.AddrPort(), err)
		}
	}
	for k := range t.Local {
		if err := dp.PutLocalAddr(k.AddrPort().Addr(), 1); err != nil {
			return err
		}
	}
	return nil
}

// ReadTables reads dp's endpoint, AV and local-address tables into a
// Tables. The XSKMAP cannot be read from user space: xskSlots are the
// slots the caller put sockets in.
func ReadTables(dp *loader.Objects, xskSlots ...uint32) (*Tables, error) {
	t := &Tables{EPs: map[bpf.EPKey]bpf.EPVal{}, AV: map[bpf.AVKey]bpf.AVVal{}, Local: map[bpf.Addr]bool{}, XSKs: map[uint32]bool{}}
	var ek bpf.EPKey
	var ev bpf.EPVal
	for it := dp.EP.Iterate(); it.Next(&ek, &ev); {
		t.EPs[ek] = ev
	}
	ids, err := dp.AVTableIDs()
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		entries, err := avtab.Entries(dp, id)
		if err != nil {
			return nil, err
		}
		for src, v := range entries {
			t.AV[bpf.AVKey{AvId: id, Src: src}] = v
		}
	}
	local, err := dp.LocalAddrs()
	if err != nil {
		return nil, err
	}
	for a := range local {
		t.Local[bpf.MakeAddr(netip.AddrPortFrom(a, 0))] = true
	}
	for _, s := range xskSlots {
		t.XSKs[s] = true
	}
	return t, nil
}
