//go:build linux

package av_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fi"
)

// A writer opening a named AV with another type is refused, naming the
// type the AV has; UNSPEC and readers take the stored type.
func TestNamedAVOtherType(t *testing.T) {
	dp, _ := pinnedDP(t)
	a, err := av.Open(dp, &av.Attr{Name: "typed", Type: av.TypeTable})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	_, err = av.Open(dp, &av.Attr{Name: "typed", Type: av.TypeMap})
	if !errors.Is(err, fi.EINVAL) || !strings.Contains(err.Error(), "exists with type FI_AV_TABLE") {
		t.Errorf("open a table as FI_AV_MAP: %v, want EINVAL naming FI_AV_TABLE", err)
	}
	for _, attr := range []av.Attr{{Name: "typed"}, {Name: "typed", Type: av.TypeMap, Flags: fi.Read}} {
		b, err := av.Open(dp, &attr)
		if err != nil {
			t.Errorf("open %+v: %v", attr, err)
			continue
		}
		if attr.Type != av.TypeTable {
			t.Errorf("open %+v reports type %v", attr, attr.Type)
		}
		b.Close()
	}
}
