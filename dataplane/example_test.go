package dataplane_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/dataplane"
)

// A receive loop: open a socket on queue 0, make the XDP program redirect
// to it, keep the fill ring full, and read each packet with the 8 bytes of
// metadata the program put in front of it.
func ExampleOpen() {
	const ifindex, queue = 2, 0
	var xsks *ebpf.Map // the XSKMAP of the XDP program (package loader)

	umem, err := dataplane.NewUMEM(dataplane.UMEMConfig{NumFrames: 4096})
	if err != nil {
		log.Fatal(err)
	}
	defer umem.Close()
	s, err := dataplane.Open(ifindex, queue, umem, dataplane.SocketConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	if err := xsks.Update(uint32(queue), uint32(s.FD()), ebpf.UpdateAny); err != nil {
		log.Fatal(err)
	}
	defer xsks.Delete(uint32(queue)) // runs before s.Close: defers run last in, first out

	s.FillFree()
	descs := make([]dataplane.Desc, 64)
	for {
		n := s.Receive(descs)
		if n == 0 {
			if _, err := s.Poll(time.Second); err != nil {
				log.Fatal(err)
			}
			continue
		}
		for _, d := range descs[:n] {
			// The program pushed 8 bytes of metadata in front of
			// the packet (bpf_xdp_adjust_head).
			pkt := umem.Packet(d)
			if len(pkt) < 8 {
				umem.Free(d.Addr)
				continue
			}
			fmt.Println(binary.NativeEndian.Uint64(pkt[:8]), len(pkt)-8)
			umem.Free(d.Addr)
		}
		s.FillFree()
	}
}

// Transmitting: copy packets into free frames, put them on the TX ring,
// kick, and take the frames back once the kernel completes them.
func ExampleSocket_Transmit() {
	var s *dataplane.Socket // an open socket
	var packets [][]byte    // Ethernet frames to send

	umem := s.UMEM()
	addrs := make([]uint64, len(packets))
	descs := make([]dataplane.Desc, 0, len(packets))
	n := umem.Alloc(addrs)
	for i, a := range addrs[:n] {
		descs = append(descs, dataplane.Desc{Addr: a, Len: uint32(copy(umem.Frame(a), packets[i]))})
	}
	sent := s.Transmit(descs)
	umem.Free(addrs[sent:n]...) // the TX ring was full for these
	if err := s.Kick(); err != nil {
		log.Fatal(err)
	}
	for done := 0; done < sent; {
		done += s.CompleteFree()
		if s.TxPending() > 0 {
			if err := s.Kick(); err != nil {
				log.Fatal(err)
			}
		}
	}
}

// Two sockets on one queue share a UMEM and the queue's fill ring; the XDP
// program picks a socket per packet through its XSKMAP.
func ExampleOpen_sharedUMEM() {
	const ifindex, queue = 2, 0
	umem, err := dataplane.NewUMEM(dataplane.UMEMConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer umem.Close()
	first, err := dataplane.Open(ifindex, queue, umem, dataplane.SocketConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer first.Close()
	second, err := dataplane.Open(ifindex, queue, umem, dataplane.SocketConfig{})
	if err != nil {
		log.Fatal(err)
	}
	defer second.Close()
	first.FillFree() // feeds both: the fill ring is the queue's
}

// The agent's side of a handover: a shared UMEM, a socket it registers and
// binds, and what it sends to the application.
func ExampleSocket_Info() {
	const ifindex, queue = 2, 0
	var xsks *ebpf.Map // the XDP program's XSKMAP

	umem, err := dataplane.NewUMEM(dataplane.UMEMConfig{NumFrames: 4096, Shared: true})
	if err != nil {
		log.Fatal(err)
	}
	s, err := dataplane.Open(ifindex, queue, umem, dataplane.SocketConfig{})
	if err != nil {
		log.Fatal(err)
	}
	if err := xsks.Update(uint32(queue), uint32(s.FD()), ebpf.UpdateAny); err != nil {
		log.Fatal(err)
	}
	msg, err := json.Marshal(s.Info())
	if err != nil {
		log.Fatal(err)
	}
	fds := []int{umem.Memfd(), s.FD()} // for SCM_RIGHTS, with msg
	fmt.Println(len(msg), fds)
	// Keep s and umem open, unused, until the application is done; then
	// delete the XSKMAP entry and close s and umem.
}

// The application's side: map the UMEM, adopt the socket, and run the data
// path, without any capability.
func ExampleAdoptSocket() {
	var memfd, fd int // received with SCM_RIGHTS
	var msg []byte    // the agent's JSON of Socket.Info
	var info dataplane.SocketInfo
	if err := json.Unmarshal(msg, &info); err != nil {
		log.Fatal(err)
	}
	umem, err := dataplane.AttachUMEM(memfd, info.UMEM)
	if err != nil {
		log.Fatal(err)
	}
	defer umem.Close()
	s, err := dataplane.AdoptSocket(fd, info.Ifindex, info.Queue, umem, info.Socket)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	s.FillFree() // every frame belongs to the application
	descs := make([]dataplane.Desc, 64)
	for {
		if _, err := s.Poll(time.Second); err != nil {
			log.Fatal(err)
		}
		n := s.Receive(descs)
		for _, d := range descs[:n] {
			fmt.Println(len(umem.Packet(d)))
			umem.Free(d.Addr)
		}
		s.FillFree()
	}
}
