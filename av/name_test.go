//go:build linux

package av_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fi"
)

// AV names follow a strict grammar: the names an attacker tried (path
// traversal, a line break that forges status lines, a right-to-left
// override, invalid UTF-8 that broke every /metrics scrape) are refused.
func TestNameGrammar(t *testing.T) {
	for _, bad := range []string{
		"", "../x", "a/b", "line\nbreak", "rtl\u202eexe", "\xff\xfe", "sp ace", ".hidden", "-dash",
		strings.Repeat("a", av.MaxNameLen+1), "nul\x00", "tab\t", "é",
	} {
		if err := av.ValidName(bad); !errors.Is(err, fi.EINVAL) {
			t.Errorf("ValidName(%q) = %v, want EINVAL", bad, err)
		}
	}
	for _, good := range []string{"job42", "a", "Rank-0.world_1", strings.Repeat("z", av.MaxNameLen)} {
		if err := av.ValidName(good); err != nil {
			t.Errorf("ValidName(%q) = %v", good, err)
		}
	}
}

func TestOpenRefusesBadName(t *testing.T) {
	dp := newDP(t, 64)
	if _, err := av.Open(dp, &av.Attr{Name: "../etc"}); !errors.Is(err, fi.EINVAL) {
		t.Fatalf("Open with a bad name: %v, want EINVAL", err)
	}
}
