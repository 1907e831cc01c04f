//go:build linux

package agent_test

import (
	"testing"

	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
)

// An endpoint takes a run of adjacent XSKMAP slots, the first free run
// that fits. Before, uids other than root that closed every other of
// their endpoints left holes, and their next, longer endpoint went past
// them, into the part of the map their limit left to root; root's next
// endpoint went into their holes. Now their endpoints stay below their
// share of the map (here 8 slots: a 2-slot endpoint finds no run there,
// ENOSPC), and root's go above it first.
func TestXSKSlotsPlaced(t *testing.T) {
	n := newNodeWith(t, testbed.Options{RxQueues: 4, TxQueues: 4})
	n.startAgent("--socket-group", "65534", "--xsk-slots-total", "8", "--xsk-slots-per-uid", "4")
	root, err := client.Dial(n.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := root.AVCreate(ctl.AVCreateArgs{Name: "place", RxCtxBits: 2}); err != nil {
		t.Fatal(err)
	}
	port := uint16(7000)
	// open opens an endpoint of ctxs receive contexts on queue q (private
	// for root, else in the sharing domain of c's uid).
	open := func(c *client.Client, q, ctxs int, private bool) (uint32, error) {
		port++
		return n.openEP(c, port, ctl.EPOpenArgs{AV: "place", RxContexts: ctxs, FirstQueue: q, Queues: 1, RingSize: 16, Private: private, Frames: 64})
	}
	base := func(id uint32) uint32 {
		st, err := root.Status()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range st.Endpoints {
			if e.ID == id {
				return e.XSKBase
			}
		}
		t.Fatalf("endpoint %d not in the status", id)
		return 0
	}
	a, b := mustDialAs(t, n.socket, 5401, nobody), mustDialAs(t, n.socket, 5402, nobody)
	ids := map[*client.Client][]uint32{}
	for q, c := range []*client.Client{a, b} { // slots 0-3, then 4-7
		for range 4 {
			id, err := open(c, q, 1, false)
			if err != nil {
				t.Fatal(err)
			}
			ids[c] = append(ids[c], id)
		}
	}
	for _, c := range []*client.Client{a, b} { // holes of one slot: 1, 3, 5, 7
		for _, id := range []uint32{ids[c][1], ids[c][3]} {
			if _, err := c.Call(ctl.OpEPClose.Name(), ctl.EPCloseArgs{ID: id}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	c := mustDialAs(t, n.socket, 5403, nobody)
	if id, err := open(c, 2, 2, false); err == nil {
		if b := base(id); b+2 > 8 {
			t.Errorf("a 2-slot endpoint of a uid other than root at slots %d-%d, past their 8", b, b+1)
		}
	} else if fi.Code(err) != fi.ENOSPC {
		t.Errorf("a 2-slot endpoint with only 1-slot holes below 8: %v, want ENOSPC", err)
	}
	id, err := open(root, 3, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	if b := base(id); b < 8 {
		t.Errorf("root's endpoint at slot %d, in the uids' part of the map", b)
	}
}
