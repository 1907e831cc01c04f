//go:build linux

package client

// checkOS: the agent, and its SOCK_SEQPACKET control socket, are Linux's.
func checkOS() error { return nil }
