//go:build linux

package bpf_test

import (
	"time"

	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/internal/xdptest"
)

type dataplaneDesc = dataplane.Desc

func receive(x *xdptest.XSK, d []dataplane.Desc) int {
	if n := x.Receive(d); n > 0 {
		return n
	}
	x.Poll(10 * time.Millisecond)
	return x.Receive(d)
}
