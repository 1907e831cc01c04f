//go:build linux

package fi

import (
	"syscall"
	"testing"
)

// The texts StrError uses off Linux are Linux's, for every code named.
func TestLinuxText(t *testing.T) {
	for e, name := range names {
		if e >= EOTHER {
			continue
		}
		if got, want := linuxText[e], syscall.Errno(e).Error(); got != want {
			t.Errorf("linuxText[%s] = %q, want %q", name, got, want)
		}
	}
	for e := range linuxText {
		if _, ok := names[e]; !ok {
			t.Errorf("linuxText has %d, which has no name", int(e))
		}
	}
}
