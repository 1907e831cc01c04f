package agent_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/loader"
)

// An endpoint opened through the agent, of a sharing domain and a private
// one, at MTU 9000: its largest message follows the MTU through the
// handover (ep.HandoverInfo.MaxMsg, the sockets' multi-buffer binding),
// and 8 KiB messages cross to a peer and back intact; one byte over the
// largest is EMSGSIZE.
func TestJumboThroughAgent(t *testing.T) {
	n := newNodeWith(t, testbed.Options{MTU: 9000})
	n.startAgent()
	peer := netip.AddrPortFrom(n.bed.B.IPv4, 7000)
	n.cli("av", "create", "--name", "job")
	if out, code := n.cli("av", "insert", "--name", "job", peer.String()); code != 0 {
		t.Fatalf("insert: %s", out)
	}
	c, err := client.Dial(n.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dp, a, err := c.OpenAV("job")
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	defer a.Close()

	// The peer: its own dataplane on B, echoing what it receives.
	pdp, err := loader.Load(loader.Config{AVEntries: 1024, MaxAVs: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer pdp.Close()
	pav, _ := av.Open(pdp, &av.Attr{})
	defer pav.Close()
	ptx, _ := cq.Open(cq.Attr{Format: cq.FormatMsg})
	prx, _ := cq.Open(cq.Attr{Format: cq.FormatMsg})
	defer ptx.Close()
	defer prx.Close()
	var pe *ep.Endpoint
	err = n.bed.B.Do(func() error {
		att, err := pdp.Attach(testbed.LinkName, loader.Native)
		if err != nil {
			return err
		}
		t.Cleanup(func() { att.Close() })
		pe, err = ep.Open(pdp, ep.Attr{Ifname: testbed.LinkName, Local: peer, AV: pav, TxCQ: ptx, RxCQ: prx, BindMode: 1, Caps: fi.Msg | fi.Source})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer pe.Close()
	const maxMsg = 9000 - 20 - 8 - 32

	for i, private := range []bool{false, true} {
		local := netip.AddrPortFrom(n.bed.A.IPv4, uint16(7100+i))
		back := []fi.Addr{0}
		if _, err := pav.Insert([]netip.AddrPort{local}, back, 0, nil); err != nil {
			t.Fatal(err)
		}
		tx, _ := cq.Open(cq.Attr{Format: cq.FormatMsg})
		rx, _ := cq.Open(cq.Attr{Format: cq.FormatMsg})
		defer tx.Close()
		defer rx.Close()
		var e *ep.Endpoint
		err := n.bed.A.Do(func() (err error) { // next hops are looked up in A's namespace
			e, err = c.OpenEndpoint(ctl.EPOpenArgs{Iface: testbed.LinkName, Local: local.String(), AV: "job", Caps: fi.Msg | fi.Source, Private: private},
				ep.Attr{Local: local, Ifname: testbed.LinkName, AV: a, TxCQ: tx, RxCQ: rx, Caps: fi.Msg | fi.Source})
			return err
		})
		if err != nil {
			t.Fatalf("private %v: %v", private, err)
		}
		if got := e.MaxMsgSize(); got != maxMsg {
			t.Fatalf("private %v: MaxMsgSize %d at MTU 9000, want %d", private, got, maxMsg)
		}
		if err := e.Send(make([]byte, maxMsg+1), 0, nil); !errors.Is(err, fi.EMSGSIZE) {
			t.Fatalf("private %v: %d bytes: %v, want EMSGSIZE", private, maxMsg+1, err)
		}
		msg := make([]byte, 8192)
		for j := range msg {
			msg[j] = byte(j*13 + i)
		}
		pbuf, buf := make([]byte, maxMsg), make([]byte, maxMsg)
		pe.Recv(pbuf, fi.AddrUnspec, nil)
		e.Recv(buf, fi.AddrUnspec, nil)
		for deadline := time.Now().Add(5 * time.Second); ; {
			err := e.Inject(msg, 0)
			if err == nil {
				break
			}
			if !errors.Is(err, fi.EAGAIN) || time.Now().After(deadline) {
				t.Fatalf("private %v: send: %v", private, err)
			}
		}
		var ent [1]cq.Entry
		var src [1]fi.Addr
		got := func(q *cq.CQ, e *ep.Endpoint) bool {
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
				if k, _ := q.ReadFrom(ent[:], src[:]); k == 1 {
					return true
				}
				e.Progress()
			}
			return false
		}
		if !got(prx, pe) || !bytes.Equal(pbuf[:ent[0].Len], msg) || src[0] != back[0] {
			t.Fatalf("private %v: the peer got %d bytes from %v, intact %v", private, ent[0].Len, src[0], bytes.Equal(pbuf[:ent[0].Len], msg))
		}
		for pe.Inject(pbuf[:ent[0].Len], back[0]) != nil {
			pe.Progress()
		}
		if !got(rx, e) || !bytes.Equal(buf[:ent[0].Len], msg) || src[0] != 0 {
			t.Fatalf("private %v: the echo came back as %d bytes from %v, intact %v", private, ent[0].Len, src[0], bytes.Equal(buf[:ent[0].Len], msg))
		}
		e.Close()
	}
}
