package cq

import (
	"testing"

	"github.com/xdpfab/xdpfab/fi"
)

// Back-pressure: Reserve grants only free room, so a full CQ makes the
// producer leave its input where it is; nothing is lost or overrun.
func TestBackPressure(t *testing.T) {
	q := mustOpen(t, Attr{Size: 8})
	p := mustBind(t, q, BindAttr{})

	n, err := p.Reserve(5)
	if n != 5 || err != nil {
		t.Fatalf("Reserve(5) = %d, %v", n, err)
	}
	for i := range 3 { // the ring had only 3 frames after all
		if err := p.Write(&Completion{Entry: Entry{OpContext: &ctx{i}}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := p.Commit(); got != 3 {
		t.Fatalf("Commit = %d, want 3", got)
	}
	if got := p.Commit(); got != 0 {
		t.Fatalf("second Commit = %d, want 0", got)
	}

	n, _ = p.Reserve(100)
	if n != 5 {
		t.Fatalf("Reserve(100) with 5 free = %d", n)
	}
	for i := range n {
		p.Write(&Completion{Entry: Entry{OpContext: &ctx{3 + i}}})
	}
	wantErr(t, "Write past the reservation", p.Write(&Completion{}), fi.EINVAL)
	p.Commit()

	if n, err := p.Reserve(1); n != 0 || err != nil {
		t.Fatalf("Reserve on a full CQ = %d, %v; want 0, nil", n, err)
	}
	q.Read(make([]Entry, 2))
	if n, err := p.Reserve(4); n != 2 || err != nil {
		t.Fatalf("Reserve after reading 2 = %d, %v", n, err)
	}
	p.Commit()

	st := q.Stats()
	if st.Lost != 0 || st.Overrun || st.Depth != 6 || st.Written != 8 {
		t.Fatalf("Stats = %+v", st)
	}
}

// Overrun (docs/semantics.md#overrun): a Push into a full CQ makes it overrun
// (fatal); the valid entries are still read, errors included, then every
// read returns EOVERRUN; each lost completion is counted.
func TestOverrun(t *testing.T) {
	q := mustOpen(t, Attr{Size: 4, WaitObj: WaitMutexCond})
	p := mustBind(t, q, BindAttr{})
	mustPush(t, p, Completion{Entry: Entry{OpContext: &ctx{0}}})
	mustPush(t, p, Completion{Entry: Entry{OpContext: &ctx{1}}})
	mustPush(t, p, Completion{Entry: Entry{OpContext: &ctx{2}}, Err: fi.EIO})
	mustPush(t, p, Completion{Entry: Entry{OpContext: &ctx{3}}})

	wantErr(t, "Push into a full CQ", p.Push(&Completion{}), fi.EOVERRUN)
	wantErr(t, "Push after overrun", p.Push(&Completion{}), fi.EOVERRUN)
	_, err := p.Reserve(1)
	wantErr(t, "Reserve after overrun", err, fi.EOVERRUN)
	if st := q.Stats(); !st.Overrun || st.Lost != 2 || st.Depth != 4 {
		t.Fatalf("Stats = %+v", st)
	}

	buf := make([]Entry, 8)
	if n, err := q.Read(buf); n != 2 || err != nil {
		t.Fatalf("Read = %d, %v; want the 2 valid entries", n, err)
	}
	_, err = q.Read(buf)
	wantErr(t, "Read at the error", err, fi.EAVAIL)
	if err := q.ReadErr(&ErrEntry{}); err != nil {
		t.Fatal(err)
	}
	if n, err := q.SRead(buf, -1); n != 1 || err != nil {
		t.Fatalf("SRead = %d, %v", n, err)
	}
	for range 2 {
		_, err = q.Read(buf)
		wantErr(t, "Read after draining", err, fi.EOVERRUN)
		_, err = q.Read(nil)
		wantErr(t, "Read(count 0) after draining", err, fi.EOVERRUN)
		_, err = q.SRead(buf, -1)
		wantErr(t, "SRead after draining", err, fi.EOVERRUN)
		wantErr(t, "ReadErr after draining", q.ReadErr(&ErrEntry{}), fi.EOVERRUN)
	}
}

// A blocked reader sees an overrun: it gets the valid entries, then
// EOVERRUN.
func TestOverrunWakesReader(t *testing.T) {
	for _, w := range blockingWaits {
		t.Run(w.String(), func(t *testing.T) {
			q := mustOpen(t, Attr{Size: 2, WaitObj: w})
			p := mustBind(t, q, BindAttr{})
			type result struct {
				n   int
				err error
			}
			done := make(chan result, 1)
			go func() {
				buf := make([]Entry, 1)
				total := 0
				for {
					n, err := q.SRead(buf, -1)
					if err != nil {
						done <- result{total, err}
						return
					}
					total += n
				}
			}()
			waitAsleep(q)
			// Push until the CQ overruns; the reader competes for room.
			for i := 0; ; i++ {
				if err := p.Push(&Completion{}); err != nil {
					wantErr(t, "Push", err, fi.EOVERRUN)
					break
				}
				if i > 1e7 {
					t.Fatal("no overrun after 10M pushes into 2 slots")
				}
			}
			r := <-done
			wantErr(t, "SRead", r.err, fi.EOVERRUN)
			if st := q.Stats(); uint64(r.n) != st.Written || st.Lost != 1 || !st.Overrun {
				t.Fatalf("read %d valid entries before EOVERRUN; Stats = %+v", r.n, st)
			}
		})
	}
}

// Every bad producer input fails with EINVAL (or EBUSY, EBADF) and changes
// no state.
func TestProducerBadInput(t *testing.T) {
	q := mustOpen(t, Attr{Size: 4})
	p := mustBind(t, q, BindAttr{Caps: fi.Source | fi.SourceErr})
	before := q.Stats()
	bad := []struct {
		name string
		c    *Completion
	}{
		{"nil", nil},
		{"negative err", &Completion{Err: -5}},
		{"negative len", &Completion{Entry: Entry{Len: -1}}},
		{"negative olen", &Completion{Err: fi.ETRUNC, OLen: -1}},
		{"olen on a success", &Completion{OLen: 3}},
		{"prov_errno on a success", &Completion{ProvErrno: 3}},
		{"err_data on a success", &Completion{ErrData: []byte{1}}},
		{"unknown source without raw address under FI_SOURCE_ERR", &Completion{SrcUnknown: true}},
	}
	for _, tt := range bad {
		wantErr(t, "Push "+tt.name, p.Push(tt.c), fi.EINVAL)
		p.Reserve(1)
		wantErr(t, "Write "+tt.name, p.Write(tt.c), fi.EINVAL)
		if n := p.Commit(); n != 0 {
			t.Fatalf("%s: Commit published %d", tt.name, n)
		}
	}
	if after := q.Stats(); after != before {
		t.Fatalf("Stats changed: %+v -> %+v", before, after)
	}

	_, err := p.Reserve(-1)
	wantErr(t, "Reserve(-1)", err, fi.EINVAL)
	if n, err := p.Reserve(0); n != 0 || err != nil {
		t.Fatalf("Reserve(0) = %d, %v", n, err)
	}
	wantErr(t, "Write without a reservation", p.Write(&Completion{}), fi.EINVAL)

	p.Reserve(1)
	_, err = p.Reserve(1)
	wantErr(t, "Reserve with a reservation open", err, fi.EINVAL)
	wantErr(t, "Push with a reservation open", p.Push(&Completion{}), fi.EINVAL)
	wantErr(t, "Unbind with a reservation open", p.Unbind(), fi.EBUSY)
	p.Commit()

	if _, err := q.Bind(BindAttr{Caps: fi.SourceErr}); err == nil {
		t.Fatal("Bind with FI_SOURCE_ERR alone succeeded")
	} else {
		wantErr(t, "Bind with FI_SOURCE_ERR alone", err, fi.EINVAL)
	}
	if after := q.Stats(); after != before {
		t.Fatalf("Stats changed: %+v -> %+v", before, after)
	}
}

// Attr.SingleProducer: the lock-free producer side admits one binding.
func TestSingleProducerBinding(t *testing.T) {
	q := mustOpen(t, Attr{SingleProducer: true, SingleConsumer: true})
	p := mustBind(t, q, BindAttr{})
	_, err := q.Bind(BindAttr{})
	wantErr(t, "second Bind", err, fi.EBUSY)
	mustPush(t, p, Completion{Entry: Entry{OpContext: &ctx{1}}})
	p.Unbind()
	p2 := mustBind(t, q, BindAttr{})
	mustPush(t, p2, Completion{Entry: Entry{OpContext: &ctx{2}}})
	buf := make([]Entry, 4)
	if n, err := q.Read(buf); n != 2 || err != nil || ctxID(buf[1].OpContext) != 2 {
		t.Fatalf("Read = %d, %v", n, err)
	}
}

// fi_close and docs/semantics.md#cq-close: EBUSY while an endpoint is bound,
// changing nothing, so a retried close is safe; entries left are discarded
// and counted.
func TestCloseBusy(t *testing.T) {
	for _, w := range []WaitObj{WaitNone, WaitFD, WaitMutexCond, WaitYield} {
		t.Run(w.String(), func(t *testing.T) {
			q, err := Open(Attr{WaitObj: w, Format: FormatMsg})
			if err != nil {
				t.Fatal(err)
			}
			p1, _ := q.Bind(BindAttr{})
			p2, _ := q.Bind(BindAttr{})
			mustPush(t, p1, Completion{Entry: Entry{OpContext: &ctx{1}}})
			mustPush(t, p1, Completion{Entry: Entry{OpContext: &ctx{2}}})

			wantErr(t, "Close with 2 bound", q.Close(), fi.EBUSY)
			p1.Unbind()
			wantErr(t, "Close with 1 bound", q.Close(), fi.EBUSY)
			wantErr(t, "second Unbind", p1.Unbind(), fi.EBADF)
			wantErr(t, "Push by an unbound producer", p1.Push(&Completion{}), fi.EBADF)
			_, err = p1.Reserve(1)
			wantErr(t, "Reserve by an unbound producer", err, fi.EBADF)

			// Nothing changed: the CQ still works.
			buf := make([]Entry, 1)
			if n, err := q.Read(buf); n != 1 || err != nil || ctxID(buf[0].OpContext) != 1 {
				t.Fatalf("Read after EBUSY = %d, %v", n, err)
			}
			if w != WaitNone {
				if err := q.Signal(); err != nil {
					t.Fatal(err)
				}
			}

			p2.Unbind()
			if err := q.Close(); err != nil {
				t.Fatalf("retried Close: %v", err)
			}
			st := q.Stats()
			if st.Discarded != 1 || st.Lost != 1 {
				t.Fatalf("Stats after Close = %+v; want 1 discarded, 1 lost", st)
			}
			wantErr(t, "second Close", q.Close(), fi.EBADF)
			_, err = q.Read(buf)
			wantErr(t, "Read after Close", err, fi.EBADF)
			_, err = q.ReadFrom(buf, nil)
			wantErr(t, "ReadFrom after Close", err, fi.EBADF)
			wantErr(t, "ReadErr after Close", q.ReadErr(&ErrEntry{}), fi.EBADF)
			_, err = q.Bind(BindAttr{})
			wantErr(t, "Bind after Close", err, fi.EBADF)
			wantErr(t, "Control after Close", q.Control(GetWaitObj, new(WaitObj)), fi.EBADF)
			if w != WaitNone {
				_, err = q.SRead(buf, -1)
				wantErr(t, "SRead after Close", err, fi.EBADF)
				wantErr(t, "Signal after Close", q.Signal(), fi.EBADF)
				wantErr(t, "TryWait after Close", q.TryWait(), fi.EBADF)
			}
		})
	}
}
