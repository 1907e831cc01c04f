package agent

import (
	"testing"

	"github.com/xdpfab/xdpfab/ep"
)

// An endpoint with a channel to itself and two more towards it is
// dropped (closed, or its connection gone): every channel is shut and
// closed, the peers forget theirs, and nothing panics. The channel to
// itself is in both of its lists; the drop used to walk its in list with
// its out list appended in place, and the first deletion left a nil in
// the walk: the agent panicked (found by a review, helper-15).
func TestLocalDropSelfChannel(t *testing.T) {
	l := &localState{eps: map[uint32]*localEP{}, sent: map[*conn][]int{}}
	bell, err := ep.NewDoorbell()
	if err != nil {
		t.Skip("same-host channels unavailable here:", err)
	}
	a := &localEP{id: 1, bell: bell}
	b, d := &localEP{id: 2}, &localEP{id: 3}
	for _, id := range []uint32{1, 2, 3} {
		l.eps[id] = map[uint32]*localEP{1: a, 2: b, 3: d}[id]
	}
	connect := func(from *localEP) *localChan {
		ch, _, _, err := ep.NewLocalChannel(64)
		if err != nil {
			t.Fatal(err)
		}
		c := &localChan{ch: ch, from: from, to: a}
		from.out = append(from.out, c)
		a.in = append(a.in, c)
		return c
	}
	self := connect(a)
	cb, cd := connect(b), connect(d)
	l.dropLocked(1)
	if _, ok := l.eps[1]; ok {
		t.Errorf("endpoint 1 still known")
	}
	if len(b.out) != 0 || len(d.out) != 0 {
		t.Errorf("peers still hold their channels to the dropped endpoint: %d, %d", len(b.out), len(d.out))
	}
	for _, c := range []*localChan{self, cb, cd} {
		if c.ch.FD() >= 0 {
			t.Errorf("a channel of the dropped endpoint is still open")
		}
	}
}
