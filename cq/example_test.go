package cq_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/fi"
)

// request is an application's operation context. Completions hand back
// the pointer given with the operation.
type request struct{ name string }

func ExampleOpen() {
	q, err := cq.Open(cq.Attr{Size: 100, Format: cq.FormatTagged, WaitObj: cq.WaitFD})
	if err != nil {
		panic(err)
	}
	defer q.Close()
	a := q.Attr()
	fmt.Println(a.Size, a.Format, a.WaitObj)

	_, err = cq.Open(cq.Attr{Format: 9})
	fmt.Println(errors.Is(err, fi.EINVAL))
	// Output:
	// 128 FI_CQ_FORMAT_TAGGED FI_WAIT_FD
	// true
}

func ExampleCQ_Read() {
	q, _ := cq.Open(cq.Attr{Format: cq.FormatMsg})
	defer q.Close()
	ep, _ := q.Bind(cq.BindAttr{}) // what an endpoint does
	defer ep.Unbind()
	ep.Push(&cq.Completion{Entry: cq.Entry{OpContext: &request{"send 1"}, Flags: fi.Send | fi.Msg}})
	ep.Push(&cq.Completion{Entry: cq.Entry{OpContext: &request{"recv 1"}, Flags: fi.Recv | fi.Msg, Len: 42}})

	buf := make([]cq.Entry, 16)
	for {
		n, err := q.Read(buf)
		if errors.Is(err, fi.EAGAIN) {
			break // empty
		}
		if err != nil {
			panic(err) // EAVAIL would mean: call ReadErr
		}
		for _, e := range buf[:n] {
			fmt.Println(e.OpContext.(*request).name, e.Flags, e.Len)
		}
	}
	// Output:
	// send 1 FI_MSG|FI_SEND 0
	// recv 1 FI_MSG|FI_RECV 42
}

func ExampleCQ_ReadErr() {
	q, _ := cq.Open(cq.Attr{Format: cq.FormatMsg})
	defer q.Close()
	// An endpoint with FI_SOURCE_ERR receives from a sender that is not in
	// its address vector.
	ep, _ := q.Bind(cq.BindAttr{Caps: fi.Source | fi.SourceErr})
	defer ep.Unbind()
	raw := sockaddrIn(netip.MustParseAddrPort("192.0.2.7:5000"))
	ep.Push(&cq.Completion{
		Entry:      cq.Entry{OpContext: &request{"recv 2"}, Flags: fi.Recv | fi.Msg, Len: 5},
		SrcUnknown: true, SrcRaw: raw,
	})

	buf := make([]cq.Entry, 16)
	_, err := q.Read(buf)
	fmt.Println(errors.Is(err, fi.EAVAIL))

	var e cq.ErrEntry // ErrData empty: the CQ lends its own buffer
	if err := q.ReadErr(&e); err != nil {
		panic(err)
	}
	// e.ErrData is the sender's sockaddr_in: pass it to the AV's insert,
	// and later receives from it report its fi_addr.
	fmt.Println(e.OpContext.(*request).name, e.Len, e.Err.Name(), len(e.ErrData))
	fmt.Println(q.StrError(e.ProvErrno, e.ErrData))
	// Output:
	// true
	// recv 2 5 EADDRNOTAVAIL 16
	// Cannot assign requested address: source fi_sockaddr_in://192.0.2.7:5000
}

func ExampleCQ_SRead() {
	q, _ := cq.Open(cq.Attr{Format: cq.FormatData, WaitObj: cq.WaitUnspec})
	defer q.Close()
	ep, _ := q.Bind(cq.BindAttr{})
	defer ep.Unbind()

	// Automatic progress: the endpoint's goroutine writes completions.
	go func() {
		time.Sleep(10 * time.Millisecond)
		ep.Push(&cq.Completion{Entry: cq.Entry{Flags: fi.Recv | fi.Msg | fi.RemoteCQData, Len: 8, Data: 0xfeed}})
	}()

	buf := make([]cq.Entry, 4)
	n, err := q.SRead(buf, -1) // block until a completion arrives
	fmt.Println(n, err, buf[0].Flags, fmt.Sprintf("%#x", buf[0].Data))

	_, err = q.SRead(buf, 5*time.Millisecond) // nothing more: times out
	fmt.Println(errors.Is(err, fi.EAGAIN))
	// Output:
	// 1 <nil> FI_MSG|FI_RECV|FI_REMOTE_CQ_DATA 0xfeed
	// true
}

// An endpoint that can be back-pressured reserves CQ room before it takes
// frames from its socket ring.
func ExampleProducer_Reserve() {
	q, _ := cq.Open(cq.Attr{Size: 4, Format: cq.FormatMsg})
	defer q.Close()
	ep, _ := q.Bind(cq.BindAttr{})
	defer ep.Unbind()

	frames := []int{100, 200, 300, 400, 500, 600} // waiting in the RX ring
	n, _ := ep.Reserve(len(frames))
	for _, size := range frames[:n] {
		ep.Write(&cq.Completion{Entry: cq.Entry{Flags: fi.Recv | fi.Msg, Len: size}})
	}
	ep.Commit()
	frames = frames[n:] // the rest stays in the ring
	fmt.Println(n, "completed,", len(frames), "left in the ring")

	st := q.Stats()
	fmt.Println(st.Depth, st.Lost, st.Overrun)
	// Output:
	// 4 completed, 2 left in the ring
	// 4 0 false
}

// The WaitFD descriptor in the application's own poll loop.
func ExampleCQ_Control() {
	q, _ := cq.Open(cq.Attr{WaitObj: cq.WaitFD})
	defer q.Close()
	ep, _ := q.Bind(cq.BindAttr{})
	defer ep.Unbind()
	var fd int
	if err := q.Control(cq.GetWait, &fd); err != nil {
		panic(err)
	}

	go ep.Push(&cq.Completion{Entry: cq.Entry{OpContext: &request{"done"}}})

	buf := make([]cq.Entry, 8)
	for {
		n, err := q.Read(buf)
		if err == nil {
			fmt.Println(n, buf[0].OpContext.(*request).name)
			break
		}
		// Arm the descriptor; EAGAIN means entries arrived meanwhile.
		if q.TryWait() == nil {
			unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, -1)
		}
	}
	// Output:
	// 1 done
}

// sockaddrIn is a Linux struct sockaddr_in, the raw address format of
// FI_SOURCE_ERR.
func sockaddrIn(ap netip.AddrPort) []byte {
	b := make([]byte, 16)
	binary.NativeEndian.PutUint16(b[0:], unix.AF_INET)
	binary.BigEndian.PutUint16(b[2:], ap.Port())
	a := ap.Addr().As4()
	copy(b[4:8], a[:])
	return b
}
