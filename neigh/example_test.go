package neigh_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/neigh"
)

// An endpoint creates its resolver inside its network namespace, bound to
// its interface and address, and asks it for every datagram it sends.
func Example() {
	// On a thread inside the endpoint's namespace (runtime.LockOSThread
	// and setns, or testbed's Host.Do):
	r, err := neigh.New(neigh.Options{
		Ifindex: 2,
		SrcIP:   netip.MustParseAddr("198.18.0.1"),
		Timeout: time.Second,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()

	// Later, on the send path, from any goroutine:
	dst := netip.MustParseAddr("198.18.0.2")
	hop, err := r.Lookup(dst)
	if errors.Is(err, fi.EAGAIN) {
		// The kernel is resolving the next hop. A non-blocking send
		// returns EAGAIN to the application; a blocking one waits:
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		hop, err = r.Resolve(ctx, dst)
	}
	if err != nil {
		fmt.Println(err) // ENETUNREACH, EHOSTUNREACH, ...
		return
	}
	var eth [14]byte
	copy(eth[0:6], hop.DstMAC[:])
	copy(eth[6:12], hop.SrcMAC[:])
	binary.BigEndian.PutUint16(eth[12:14], 0x0800) // IPv4; hop.SrcIP goes in the IP header
	fmt.Printf("ifindex %d, src %s, frame header % x\n", hop.Ifindex, hop.SrcIP, eth)
}
