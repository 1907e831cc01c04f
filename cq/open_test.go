package cq

import (
	"errors"
	"runtime"
	"testing"

	"github.com/xdpfab/xdpfab/fi"
)

// fi_cq_open, struct fi_cq_attr and SEMANTICS.md item 20.
func TestOpenAttr(t *testing.T) {
	set, err := OpenWaitSet(WAIT_UNSPEC)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close() // after the CQs below (deferred Close in mustOpen runs first)
	closedSet, err := OpenWaitSet(WAIT_MUTEX_COND)
	if err != nil {
		t.Fatal(err)
	}
	closedSet.Close()

	tests := []struct {
		name string
		attr Attr
		want fi.Errno
		// effective attributes checked on success
		size   int
		format Format
		wait   WaitObj
	}{
		{name: "zero value takes the defaults", attr: Attr{}, size: DefaultSize, format: FORMAT_CONTEXT, wait: WAIT_NONE},
		{name: "size 1", attr: Attr{Size: 1}, size: 1, format: FORMAT_CONTEXT},
		{name: "size 3 rounds up to 4", attr: Attr{Size: 3}, size: 4, format: FORMAT_CONTEXT},
		{name: "size 1000 rounds up to 1024", attr: Attr{Size: 1000}, size: 1024, format: FORMAT_CONTEXT},
		{name: "size 65536", attr: Attr{Size: 65536}, size: 65536, format: FORMAT_CONTEXT},
		{name: "size MaxSize", attr: Attr{Size: MaxSize}, size: MaxSize, format: FORMAT_CONTEXT},
		{name: "negative size", attr: Attr{Size: -1}, want: fi.EINVAL},
		{name: "size above MaxSize", attr: Attr{Size: MaxSize + 1}, want: fi.EINVAL},

		{name: "FI_AFFINITY with a valid vector", attr: Attr{Flags: fi.AFFINITY, SignalingVector: runtime.NumCPU() - 1}, size: DefaultSize, format: FORMAT_CONTEXT},
		{name: "FI_AFFINITY with a negative vector", attr: Attr{Flags: fi.AFFINITY, SignalingVector: -1}, want: fi.EINVAL},
		{name: "FI_AFFINITY with a vector past the CPUs", attr: Attr{Flags: fi.AFFINITY, SignalingVector: runtime.NumCPU()}, want: fi.EINVAL},
		{name: "vector ignored without FI_AFFINITY", attr: Attr{SignalingVector: 1 << 20}, size: DefaultSize, format: FORMAT_CONTEXT},
		{name: "unknown flag", attr: Attr{Flags: fi.SEND}, want: fi.EINVAL},

		{name: "FORMAT_UNSPEC picks CONTEXT", attr: Attr{Format: FORMAT_UNSPEC}, size: DefaultSize, format: FORMAT_CONTEXT},
		{name: "FORMAT_MSG", attr: Attr{Format: FORMAT_MSG}, size: DefaultSize, format: FORMAT_MSG},
		{name: "FORMAT_DATA", attr: Attr{Format: FORMAT_DATA}, size: DefaultSize, format: FORMAT_DATA},
		{name: "FORMAT_TAGGED", attr: Attr{Format: FORMAT_TAGGED}, size: DefaultSize, format: FORMAT_TAGGED},
		{name: "format 5", attr: Attr{Format: 5}, want: fi.EINVAL},
		{name: "format -1", attr: Attr{Format: -1}, want: fi.EINVAL},

		{name: "WAIT_UNSPEC picks MUTEX_COND", attr: Attr{WaitObj: WAIT_UNSPEC}, size: DefaultSize, format: FORMAT_CONTEXT, wait: WAIT_MUTEX_COND},
		{name: "WAIT_FD", attr: Attr{WaitObj: WAIT_FD}, size: DefaultSize, format: FORMAT_CONTEXT, wait: WAIT_FD},
		{name: "WAIT_POLLFD", attr: Attr{WaitObj: WAIT_POLLFD}, size: DefaultSize, format: FORMAT_CONTEXT, wait: WAIT_POLLFD},
		{name: "WAIT_MUTEX_COND", attr: Attr{WaitObj: WAIT_MUTEX_COND}, size: DefaultSize, format: FORMAT_CONTEXT, wait: WAIT_MUTEX_COND},
		{name: "WAIT_YIELD", attr: Attr{WaitObj: WAIT_YIELD}, size: DefaultSize, format: FORMAT_CONTEXT, wait: WAIT_YIELD},
		{name: "WAIT_SET with a set", attr: Attr{WaitObj: WAIT_SET, WaitSet: set}, size: DefaultSize, format: FORMAT_CONTEXT, wait: WAIT_SET},
		{name: "WAIT_SET without a set", attr: Attr{WaitObj: WAIT_SET}, want: fi.EINVAL},
		{name: "WAIT_SET with a closed set", attr: Attr{WaitObj: WAIT_SET, WaitSet: closedSet}, want: fi.EINVAL},
		{name: "wait set ignored without WAIT_SET", attr: Attr{WaitObj: WAIT_FD, WaitSet: closedSet}, size: DefaultSize, format: FORMAT_CONTEXT, wait: WAIT_FD},
		{name: "wait object 7", attr: Attr{WaitObj: 7}, want: fi.EINVAL},
		{name: "wait object -1", attr: Attr{WaitObj: -1}, want: fi.EINVAL},

		{name: "COND_THRESHOLD", attr: Attr{WaitObj: WAIT_FD, WaitCond: COND_THRESHOLD, Threshold: 8}, size: DefaultSize, format: FORMAT_CONTEXT, wait: WAIT_FD},
		{name: "COND_THRESHOLD ignored under WAIT_NONE", attr: Attr{WaitCond: COND_THRESHOLD, Threshold: 8}, size: DefaultSize, format: FORMAT_CONTEXT},
		{name: "negative threshold", attr: Attr{WaitObj: WAIT_FD, WaitCond: COND_THRESHOLD, Threshold: -1}, want: fi.EINVAL},
		{name: "threshold without COND_THRESHOLD", attr: Attr{WaitObj: WAIT_FD, Threshold: 8}, want: fi.EINVAL},
		{name: "wait cond 2", attr: Attr{WaitCond: 2}, want: fi.EINVAL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := Open(tt.attr)
			if tt.want != 0 {
				if !errors.Is(err, tt.want) || q != nil {
					t.Fatalf("Open = %v, %v; want nil, %s", q, err, tt.want.Name())
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer q.Close()
			a := q.Attr()
			if a.Size != tt.size || a.Format != tt.format || a.WaitObj != tt.wait {
				t.Errorf("Attr() size %d format %s wait %s; want %d %s %s",
					a.Size, a.Format, a.WaitObj, tt.size, tt.format, tt.wait)
			}
			if st := q.Stats(); st.Capacity != tt.size || st.Depth != 0 {
				t.Errorf("Stats() = %+v", st)
			}
		})
	}
}

// fabtests cq_open_close_sizes: sizes 0 and 1<<0 .. 1<<16.
func TestOpenCloseSizes(t *testing.T) {
	sizes := []int{0}
	for i := 0; i <= 16; i++ {
		sizes = append(sizes, 1<<i)
	}
	for _, size := range sizes {
		for _, w := range []WaitObj{WAIT_NONE, WAIT_FD} {
			q, err := Open(Attr{Size: size, WaitObj: w})
			if err != nil {
				t.Fatalf("Open(size %d, %s): %v", size, w, err)
			}
			if got := q.Attr().Size; got < size || got&(got-1) != 0 {
				t.Errorf("size %d: capacity %d", size, got)
			}
			if err := q.Close(); err != nil {
				t.Fatalf("Close(size %d): %v", size, err)
			}
		}
	}
}

// fabtests cq_open_close_simultaneous: many CQs open at once, then all closed.
func TestOpenCloseSimultaneous(t *testing.T) {
	const n = 1024
	qs := make([]*CQ, 0, n)
	for i := range n {
		attr := Attr{Size: 64}
		if i%4 == 0 {
			attr.WaitObj = WAIT_FD // 256 eventfd pairs as well
		}
		q, err := Open(attr)
		if err != nil {
			t.Fatalf("Open #%d: %v", i, err)
		}
		qs = append(qs, q)
	}
	for i, q := range qs {
		if err := q.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i, err)
		}
	}
}

// Constants keep libfabric's values (SEMANTICS.md "Constants").
func TestConstantValues(t *testing.T) {
	tests := []struct {
		name      string
		got, want int
	}{
		{"FI_CQ_FORMAT_UNSPEC", int(FORMAT_UNSPEC), 0},
		{"FI_CQ_FORMAT_CONTEXT", int(FORMAT_CONTEXT), 1},
		{"FI_CQ_FORMAT_MSG", int(FORMAT_MSG), 2},
		{"FI_CQ_FORMAT_DATA", int(FORMAT_DATA), 3},
		{"FI_CQ_FORMAT_TAGGED", int(FORMAT_TAGGED), 4},
		{"FI_WAIT_NONE", int(WAIT_NONE), 0},
		{"FI_WAIT_UNSPEC", int(WAIT_UNSPEC), 1},
		{"FI_WAIT_SET", int(WAIT_SET), 2},
		{"FI_WAIT_FD", int(WAIT_FD), 3},
		{"FI_WAIT_MUTEX_COND", int(WAIT_MUTEX_COND), 4},
		{"FI_WAIT_YIELD", int(WAIT_YIELD), 5},
		{"FI_WAIT_POLLFD", int(WAIT_POLLFD), 6},
		{"FI_CQ_COND_NONE", int(COND_NONE), 0},
		{"FI_CQ_COND_THRESHOLD", int(COND_THRESHOLD), 1},
		{"FI_GETWAIT", int(GETWAIT), 5},
		{"FI_GETWAITOBJ", int(GETWAITOBJ), 16},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %d, want %d", tt.name, tt.got, tt.want)
		}
	}
	for _, s := range []interface{ String() string }{FORMAT_TAGGED, WAIT_MUTEX_COND, COND_THRESHOLD, GETWAIT} {
		if s.String()[:3] != "FI_" {
			t.Errorf("String() = %q, want libfabric's name", s.String())
		}
	}
}
