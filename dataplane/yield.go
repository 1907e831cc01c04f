package dataplane

import "runtime"

// procYield gives way briefly while spinning on a lock another process
// holds for a few hundred nanoseconds.
func procYield() { runtime.Gosched() }
