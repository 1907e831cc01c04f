//go:build !linux

package loader

// waitReaders: no XDP off Linux (Load fails there), nothing to wait for.
func waitReaders() {}
