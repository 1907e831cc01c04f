package agent

// SetRefuseRights makes the agents started from now on ask the kernel to
// refuse the descriptors clients send (SO_PASSRIGHTS), or not, as on a
// kernel without it; it returns the previous setting.
func SetRefuseRights(on bool) bool {
	was := askRefusal
	askRefusal = on
	return was
}

// StraysPending is how many descriptors clients sent wait to be closed or
// are being closed.
func StraysPending() int {
	queued, workers := strays.pending()
	return queued + workers
}
