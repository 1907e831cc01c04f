package wire_test

import (
	"fmt"
	"net/netip"

	"github.com/xdpfab/xdpfab/wire"
)

// Build a frame carrying a tagged message, then find and decode its xdpfab
// header the way a receiver does: behind Ethernet, IPv4 and UDP.
func Example() {
	f := wire.Frame{
		Src:     netip.MustParseAddrPort("198.18.0.1:5000"),
		Dst:     netip.MustParseAddrPort("198.18.0.2:7000"),
		Hdr:     wire.Hdr{Op: wire.OpTagged, Tag: 0xbeef, Flags: wire.FlagCQData, CQData: 42},
		Payload: []byte("hello"),
	}
	b := wire.Build(f)
	hdrOff := 14 + 20 + wire.UDPHeaderLen
	h, ok := wire.ParseHdr(b[hdrOff:])
	fmt.Println(len(b), ok, h.Op == wire.OpTagged, h.Tag == 0xbeef, h.CQData)
	fmt.Printf("%s\n", b[hdrOff+wire.HdrLen:])

	// What the XDP program would report in front of the frame.
	m := wire.Meta{L3Off: 14, HdrOff: uint16(hdrOff), Family: wire.AFInet}
	src, _ := wire.Source(b, m)
	fmt.Println(src)
	// Output:
	// 79 true true true 42
	// hello
	// 198.18.0.1:5000
}
