package cq

import (
	"errors"
	"runtime"
	"testing"

	"github.com/xdpfab/xdpfab/fi"
)

// fi_cq_open, struct fi_cq_attr and docs/semantics.md#cq-open.
func TestOpenAttr(t *testing.T) {
	set, err := OpenWaitSet(WaitUnspec)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close() // after the CQs below (deferred Close in mustOpen runs first)
	closedSet, err := OpenWaitSet(WaitMutexCond)
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
		{name: "zero value takes the defaults", attr: Attr{}, size: DefaultSize, format: FormatContext, wait: WaitNone},
		{name: "size 1", attr: Attr{Size: 1}, size: 1, format: FormatContext},
		{name: "size 3 rounds up to 4", attr: Attr{Size: 3}, size: 4, format: FormatContext},
		{name: "size 1000 rounds up to 1024", attr: Attr{Size: 1000}, size: 1024, format: FormatContext},
		{name: "size 65536", attr: Attr{Size: 65536}, size: 65536, format: FormatContext},
		{name: "size MaxSize", attr: Attr{Size: MaxSize}, size: MaxSize, format: FormatContext},
		{name: "negative size", attr: Attr{Size: -1}, want: fi.EINVAL},
		{name: "size above MaxSize", attr: Attr{Size: MaxSize + 1}, want: fi.EINVAL},

		{name: "FI_AFFINITY with a valid vector", attr: Attr{Flags: fi.Affinity, SignalingVector: runtime.NumCPU() - 1}, size: DefaultSize, format: FormatContext},
		{name: "FI_AFFINITY with a negative vector", attr: Attr{Flags: fi.Affinity, SignalingVector: -1}, want: fi.EINVAL},
		{name: "FI_AFFINITY with a vector past the CPUs", attr: Attr{Flags: fi.Affinity, SignalingVector: runtime.NumCPU()}, want: fi.EINVAL},
		{name: "vector ignored without FI_AFFINITY", attr: Attr{SignalingVector: 1 << 20}, size: DefaultSize, format: FormatContext},
		{name: "unknown flag", attr: Attr{Flags: fi.Send}, want: fi.EINVAL},

		{name: "FORMAT_UNSPEC picks CONTEXT", attr: Attr{Format: FormatUnspec}, size: DefaultSize, format: FormatContext},
		{name: "FORMAT_MSG", attr: Attr{Format: FormatMsg}, size: DefaultSize, format: FormatMsg},
		{name: "FORMAT_DATA", attr: Attr{Format: FormatData}, size: DefaultSize, format: FormatData},
		{name: "FORMAT_TAGGED", attr: Attr{Format: FormatTagged}, size: DefaultSize, format: FormatTagged},
		{name: "format 5", attr: Attr{Format: 5}, want: fi.EINVAL},
		{name: "format -1", attr: Attr{Format: -1}, want: fi.EINVAL},

		{name: "WAIT_UNSPEC picks MUTEX_COND", attr: Attr{WaitObj: WaitUnspec}, size: DefaultSize, format: FormatContext, wait: WaitMutexCond},
		{name: "WAIT_FD", attr: Attr{WaitObj: WaitFD}, size: DefaultSize, format: FormatContext, wait: WaitFD},
		{name: "WAIT_POLLFD", attr: Attr{WaitObj: WaitPollFD}, size: DefaultSize, format: FormatContext, wait: WaitPollFD},
		{name: "WAIT_MUTEX_COND", attr: Attr{WaitObj: WaitMutexCond}, size: DefaultSize, format: FormatContext, wait: WaitMutexCond},
		{name: "WAIT_YIELD", attr: Attr{WaitObj: WaitYield}, size: DefaultSize, format: FormatContext, wait: WaitYield},
		{name: "WAIT_SET with a set", attr: Attr{WaitObj: WaitSetObj, WaitSet: set}, size: DefaultSize, format: FormatContext, wait: WaitSetObj},
		{name: "WAIT_SET without a set", attr: Attr{WaitObj: WaitSetObj}, want: fi.EINVAL},
		{name: "WAIT_SET with a closed set", attr: Attr{WaitObj: WaitSetObj, WaitSet: closedSet}, want: fi.EINVAL},
		{name: "wait set ignored without WAIT_SET", attr: Attr{WaitObj: WaitFD, WaitSet: closedSet}, size: DefaultSize, format: FormatContext, wait: WaitFD},
		{name: "wait object 7", attr: Attr{WaitObj: 7}, want: fi.EINVAL},
		{name: "wait object -1", attr: Attr{WaitObj: -1}, want: fi.EINVAL},

		{name: "COND_THRESHOLD", attr: Attr{WaitObj: WaitFD, WaitCond: CondThreshold, Threshold: 8}, size: DefaultSize, format: FormatContext, wait: WaitFD},
		{name: "COND_THRESHOLD ignored under WAIT_NONE", attr: Attr{WaitCond: CondThreshold, Threshold: 8}, size: DefaultSize, format: FormatContext},
		{name: "negative threshold", attr: Attr{WaitObj: WaitFD, WaitCond: CondThreshold, Threshold: -1}, want: fi.EINVAL},
		{name: "threshold without COND_THRESHOLD", attr: Attr{WaitObj: WaitFD, Threshold: 8}, want: fi.EINVAL},
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
		for _, w := range []WaitObj{WaitNone, WaitFD} {
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
			attr.WaitObj = WaitFD // 256 eventfd pairs as well
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

// Constants keep libfabric's values (docs/semantics.md#enumerations).
func TestConstantValues(t *testing.T) {
	tests := []struct {
		name      string
		got, want int
	}{
		{"FI_CQ_FORMAT_UNSPEC", int(FormatUnspec), 0},
		{"FI_CQ_FORMAT_CONTEXT", int(FormatContext), 1},
		{"FI_CQ_FORMAT_MSG", int(FormatMsg), 2},
		{"FI_CQ_FORMAT_DATA", int(FormatData), 3},
		{"FI_CQ_FORMAT_TAGGED", int(FormatTagged), 4},
		{"FI_WAIT_NONE", int(WaitNone), 0},
		{"FI_WAIT_UNSPEC", int(WaitUnspec), 1},
		{"FI_WAIT_SET", int(WaitSetObj), 2},
		{"FI_WAIT_FD", int(WaitFD), 3},
		{"FI_WAIT_MUTEX_COND", int(WaitMutexCond), 4},
		{"FI_WAIT_YIELD", int(WaitYield), 5},
		{"FI_WAIT_POLLFD", int(WaitPollFD), 6},
		{"FI_CQ_COND_NONE", int(CondNone), 0},
		{"FI_CQ_COND_THRESHOLD", int(CondThreshold), 1},
		{"FI_GETWAIT", int(GetWait), 5},
		{"FI_GETWAITOBJ", int(GetWaitObj), 16},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %d, want %d", tt.name, tt.got, tt.want)
		}
	}
	for _, s := range []interface{ String() string }{FormatTagged, WaitMutexCond, CondThreshold, GetWait} {
		if s.String()[:3] != "FI_" {
			t.Errorf("String() = %q, want libfabric's name", s.String())
		}
	}
}
