package cq

import "strconv"

// Format selects the completion entry layout (enum fi_cq_format). Read fills
// the fields of Entry that the format's libfabric struct has and zeroes the
// rest.
type Format int

// Completion formats, with libfabric's values.
const (
	// FORMAT_UNSPEC lets the CQ choose; it picks FORMAT_CONTEXT, as
	// libfabric's util CQ does, and Attr reports the choice.
	FORMAT_UNSPEC Format = 0
	// FORMAT_CONTEXT is struct fi_cq_entry: OpContext.
	FORMAT_CONTEXT Format = 1
	// FORMAT_MSG is struct fi_cq_msg_entry: OpContext, Flags, Len.
	FORMAT_MSG Format = 2
	// FORMAT_DATA is struct fi_cq_data_entry: FORMAT_MSG plus Buf, Data.
	FORMAT_DATA Format = 3
	// FORMAT_TAGGED is struct fi_cq_tagged_entry: FORMAT_DATA plus Tag.
	FORMAT_TAGGED Format = 4
)

func (f Format) String() string {
	switch f {
	case FORMAT_UNSPEC:
		return "FI_CQ_FORMAT_UNSPEC"
	case FORMAT_CONTEXT:
		return "FI_CQ_FORMAT_CONTEXT"
	case FORMAT_MSG:
		return "FI_CQ_FORMAT_MSG"
	case FORMAT_DATA:
		return "FI_CQ_FORMAT_DATA"
	case FORMAT_TAGGED:
		return "FI_CQ_FORMAT_TAGGED"
	}
	return "format(" + strconv.Itoa(int(f)) + ")"
}

// WaitObj is the kind of object a blocking read waits on (enum fi_wait_obj).
type WaitObj int

// Wait objects, with libfabric's values.
const (
	// WAIT_NONE: the application never blocks; SRead and Signal fail with
	// EINVAL.
	WAIT_NONE WaitObj = 0
	// WAIT_UNSPEC: the CQ chooses; it picks WAIT_MUTEX_COND (Go runtime
	// wake-ups, no system call) and Attr reports the choice.
	WAIT_UNSPEC WaitObj = 1
	// WAIT_SET: the CQ signals the WaitSet given in Attr.WaitSet; the
	// application waits on the set. SRead fails with EINVAL.
	WAIT_SET WaitObj = 2
	// WAIT_FD: an eventfd, usable in poll, select and epoll (see
	// Control(GETWAIT) and TryWait).
	WAIT_FD WaitObj = 3
	// WAIT_MUTEX_COND: a mutex and condition variable (sync.Mutex and
	// sync.Cond).
	WAIT_MUTEX_COND WaitObj = 4
	// WAIT_YIELD: no object; SRead spins with runtime.Gosched.
	WAIT_YIELD WaitObj = 5
	// WAIT_POLLFD: like WAIT_FD, but Control(GETWAIT) returns a poll set
	// ([]unix.PollFd).
	WAIT_POLLFD WaitObj = 6
)

func (w WaitObj) String() string {
	switch w {
	case WAIT_NONE:
		return "FI_WAIT_NONE"
	case WAIT_UNSPEC:
		return "FI_WAIT_UNSPEC"
	case WAIT_SET:
		return "FI_WAIT_SET"
	case WAIT_FD:
		return "FI_WAIT_FD"
	case WAIT_MUTEX_COND:
		return "FI_WAIT_MUTEX_COND"
	case WAIT_YIELD:
		return "FI_WAIT_YIELD"
	case WAIT_POLLFD:
		return "FI_WAIT_POLLFD"
	}
	return "wait(" + strconv.Itoa(int(w)) + ")"
}

// WaitCond says when a blocking read's wait is satisfied (enum
// fi_cq_wait_cond).
type WaitCond int

// Wait conditions, with libfabric's values.
const (
	// COND_NONE: any new entry satisfies the wait.
	COND_NONE WaitCond = 0
	// COND_THRESHOLD: the wait is satisfied once Attr.Threshold entries
	// are queued (or an error entry is, or the CQ is overrun).
	COND_THRESHOLD WaitCond = 1
)

func (c WaitCond) String() string {
	switch c {
	case COND_NONE:
		return "FI_CQ_COND_NONE"
	case COND_THRESHOLD:
		return "FI_CQ_COND_THRESHOLD"
	}
	return "cond(" + strconv.Itoa(int(c)) + ")"
}

// Command is a control command (the anonymous enum in libfabric's fabric.h:
// FI_GETFIDFLAG = 0, ..., FI_ALIAS = 4, FI_GETWAIT = 5, ..., FI_GETWAITOBJ = 16).
type Command int

// Control commands a CQ or WaitSet accepts, with libfabric's values.
const (
	// GETWAIT retrieves the wait object: arg is an *int for WAIT_FD, a
	// *[]unix.PollFd for WAIT_POLLFD, a *MutexCond for WAIT_MUTEX_COND.
	GETWAIT Command = 5
	// GETWAITOBJ retrieves the wait object's kind: arg is a *WaitObj.
	GETWAITOBJ Command = 16
)

func (c Command) String() string {
	switch c {
	case GETWAIT:
		return "FI_GETWAIT"
	case GETWAITOBJ:
		return "FI_GETWAITOBJ"
	}
	return "command(" + strconv.Itoa(int(c)) + ")"
}
