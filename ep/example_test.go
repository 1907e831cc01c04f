package ep_test

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/loader"
)

// A receive loop with manual progress: the CQ read polls the endpoint's
// sockets, and each completion names the sender by its fi_addr, computed
// by the XDP program before the frame reached user space.
func Example() {
	dp, err := loader.Load(loader.Config{PinRoot: "/sys/fs/bpf/xdpfab"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dp.Close()
	att, err := dp.Attach("eth1", loader.Native)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer att.Close()

	peers, _ := av.Open(dp, &av.Attr{Name: "job42"})
	defer peers.Close()
	tx, _ := cq.Open(cq.Attr{Format: cq.FormatMsg})
	rx, _ := cq.Open(cq.Attr{Format: cq.FormatMsg})
	defer tx.Close()
	defer rx.Close()
	e, err := ep.Open(dp, ep.Attr{
		Ifname: "eth1", Local: netip.MustParseAddrPort("198.18.0.1:7000"),
		AV: peers, TxCQ: tx, RxCQ: rx, Caps: fi.Msg | fi.Source,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()

	buf := make([]byte, e.MaxMsgSize())
	e.Recv(buf, fi.AddrUnspec, nil)
	var c [1]cq.Entry
	var src [1]fi.Addr
	for {
		n, err := rx.ReadFrom(c[:], src[:])
		if n == 1 {
			fmt.Printf("%d bytes from fi_addr %v\n", c[0].Len, src[0])
			return
		}
		if !errors.Is(err, fi.EAGAIN) {
			fmt.Println(err)
			return
		}
	}
}

// An endpoint that one goroutine drives alone: FI_THREAD_DOMAIN with
// manual progress, and CQs with one producer and one consumer, take no
// locks on the data path.
func ExampleAttr_threading() {
	dp, err := loader.Load(loader.Config{PinRoot: "/sys/fs/bpf/xdpfab"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dp.Close()
	peers, _ := av.Open(dp, &av.Attr{})
	defer peers.Close()
	one := cq.Attr{Format: cq.FormatMsg, SingleProducer: true, SingleConsumer: true}
	tx, _ := cq.Open(one)
	rx, _ := cq.Open(one)
	defer tx.Close()
	defer rx.Close()
	e, err := ep.Open(dp, ep.Attr{
		Ifname: "eth1", Local: netip.MustParseAddrPort("198.18.0.1:7000"),
		AV: peers, TxCQ: tx, RxCQ: rx, Threading: fi.ThreadDomain,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()
	fmt.Println(e.Threading()) // FI_THREAD_DOMAIN; FI_THREAD_SAFE beside thread-safe endpoints of this process on eth1
}
