//go:build !linux

package avtab

func adviseHuge([]byte) {}
