package cq

import (
	"reflect"
	"testing"

	"github.com/xdpfab/xdpfab/fi"
)

// docs/semantics.md#entry-layouts: the entries keep libfabric's fields, in
// order: context; msg (+flags, len); data (+buf, data); tagged (+tag); the
// error entry adds olen, err, prov_errno, err_data(+size) and src_addr.
func TestEntryLayout(t *testing.T) {
	fields := func(v any) []string {
		var names []string
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			names = append(names, rt.Field(i).Name)
		}
		return names
	}
	want := []string{"OpContext", "Flags", "Len", "Buf", "Data", "Tag"}
	if got := fields(Entry{}); !reflect.DeepEqual(got, want) {
		t.Errorf("Entry fields %v, want %v", got, want)
	}
	want = append(want, "OLen", "Err", "ProvErrno", "ErrData", "SrcAddr")
	if got := fields(ErrEntry{}); !reflect.DeepEqual(got, want) {
		t.Errorf("ErrEntry fields %v, want %v", got, want)
	}
}

// docs/semantics.md#constants as the CQ reports them: NOTAVAIL is all ones;
// errors carry libfabric's positive errno values, wrapped with context.
func TestErrnoValues(t *testing.T) {
	if uint64(fi.AddrNotAvail) != ^uint64(0) {
		t.Fatalf("fi.AddrNotAvail = %#x", uint64(fi.AddrNotAvail))
	}
	q := mustOpen(t, Attr{Size: 1, WaitObj: WaitFD})
	p := mustBind(t, q, BindAttr{})
	none := mustOpen(t, Attr{})

	_, errAgain := q.Read(make([]Entry, 1))
	errBusy := q.Close()
	mustPush(t, p, Completion{Err: fi.EIO})
	_, errAvail := q.Read(make([]Entry, 1))
	errOverrun := p.Push(&Completion{})
	_, errInval := Open(Attr{Format: 7})
	errNoData := none.Control(GetWait, new(int))
	errNoSys := q.Control(99, nil)

	tests := []struct {
		name string
		err  error
		want int
	}{
		{"EAGAIN", errAgain, 11},
		{"EBUSY", errBusy, 16},
		{"EINVAL", errInval, 22},
		{"ENOSYS", errNoSys, 38},
		{"ENODATA", errNoData, 61},
		{"EAVAIL", errAvail, 259},
		{"EOVERRUN", errOverrun, 268},
	}
	for _, tt := range tests {
		if got := int(fi.Code(tt.err)); got != tt.want {
			t.Errorf("%s: error %v has code %d, want %d", tt.name, tt.err, got, tt.want)
		}
		// An empty CQ's EAGAIN is the bare errno (a poll's usual answer,
		// matched at errors.Is's first comparison); the rest say more.
		if bare := tt.err.Error() == fi.Errno(tt.want).Error(); bare != (tt.name == "EAGAIN") {
			t.Errorf("%s: error %q: bare errno %v, want %v", tt.name, tt.err, bare, tt.name == "EAGAIN")
		}
	}
}
