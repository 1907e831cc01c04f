//go:build !linux

package fi

import "strconv"

// sysText is Linux's text for e: this system numbers errors differently,
// and libfabric's numbers are Linux's.
func sysText(e Errno) string {
	if s, ok := linuxText[e]; ok {
		return s
	}
	return "errno " + strconv.Itoa(int(e))
}
