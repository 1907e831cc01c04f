package stack_test

import (
	"log"
	"net/netip"

	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/loader"
	"github.com/xdpfab/xdpfab/stack"
)

// An endpoint on eth0 with its own AV and CQs, then a send to a peer.
func Example() {
	objs, err := loader.Load(loader.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer objs.Close()
	att, err := objs.Attach("eth0", loader.Native)
	if err != nil {
		log.Fatal(err)
	}
	defer att.Close()

	s, err := stack.Open(objs, stack.Attr{
		TxCQ: cq.Attr{Format: cq.FormatMsg},
		RxCQ: cq.Attr{Format: cq.FormatMsg},
		EP:   ep.Attr{Ifname: "eth0", Local: netip.MustParseAddrPort("198.18.0.1:7000"), Caps: fi.Msg | fi.Source},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	peer := make([]fi.Addr, 1)
	if _, err := s.AV.Insert([]netip.AddrPort{netip.MustParseAddrPort("198.18.0.2:7000")}, peer, 0, nil); err != nil {
		log.Fatal(err)
	}
	if err := s.EP.Send([]byte("hello"), peer[0], nil); err != nil {
		log.Fatal(err)
	}
}
