//go:build !linux

package ep

import "github.com/xdpfab/xdpfab/loader"

// watchLocal has nothing to watch off Linux, where no endpoint opens.
func watchLocal(*loader.Objects) (release func(), err error) { return func() {}, nil }
