//go:build !linux

package cq

// newWakeFD opens the descriptor of WaitFD and WaitPollFD: without eventfd,
// a pipe (see wakeFD).
func newWakeFD() (wakeFD, error) { return newPipeFD() }
