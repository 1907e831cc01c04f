package cq

// The String methods print libfabric's names (the line comments); unknown
// values print as Format(7).
//go:generate go tool stringer -type Format,WaitObj,WaitCond,Command -linecomment -output consts_string.go

// Format selects the completion entry layout (enum fi_cq_format). Read fills
// the fields of Entry that the format's libfabric struct has and zeroes the
// rest.
type Format int

// Completion formats, with libfabric's values.
const (
	// FormatUnspec lets the CQ choose; it picks FormatContext, as
	// libfabric's util CQ does, and Attr reports the choice.
	FormatUnspec Format = 0 // FI_CQ_FORMAT_UNSPEC
	// FormatContext is struct fi_cq_entry: OpContext.
	FormatContext Format = 1 // FI_CQ_FORMAT_CONTEXT
	// FormatMsg is struct fi_cq_msg_entry: OpContext, Flags, Len.
	FormatMsg Format = 2 // FI_CQ_FORMAT_MSG
	// FormatData is struct fi_cq_data_entry: FormatMsg plus Buf, Data.
	FormatData Format = 3 // FI_CQ_FORMAT_DATA
	// FormatTagged is struct fi_cq_tagged_entry: FormatData plus Tag.
	FormatTagged Format = 4 // FI_CQ_FORMAT_TAGGED
)

// WaitObj is the kind of object a blocking read waits on (enum fi_wait_obj).
type WaitObj int

// Wait objects, with libfabric's values.
const (
	// WaitNone: the application never blocks; SRead and Signal fail with
	// EINVAL.
	WaitNone WaitObj = 0 // FI_WAIT_NONE
	// WaitUnspec: the CQ chooses; it picks WaitMutexCond (Go runtime
	// wake-ups, no system call) and Attr reports the choice.
	WaitUnspec WaitObj = 1 // FI_WAIT_UNSPEC
	// WaitSetObj: the CQ signals the WaitSet given in Attr.WaitSet; the
	// application waits on the set. SRead fails with EINVAL.
	WaitSetObj WaitObj = 2 // FI_WAIT_SET
	// WaitFD: an eventfd (off Linux, the read end of a pipe), usable in
	// poll, select and epoll or kqueue (see Control(GetWait) and TryWait).
	WaitFD WaitObj = 3 // FI_WAIT_FD
	// WaitMutexCond: a mutex and condition variable (sync.Mutex and
	// sync.Cond).
	WaitMutexCond WaitObj = 4 // FI_WAIT_MUTEX_COND
	// WaitYield: no object; SRead spins with runtime.Gosched.
	WaitYield WaitObj = 5 // FI_WAIT_YIELD
	// WaitPollFD: like WaitFD, but Control(GetWait) returns a poll set
	// ([]unix.PollFd).
	WaitPollFD WaitObj = 6 // FI_WAIT_POLLFD
)

// WaitCond says when a blocking read's wait is satisfied (enum
// fi_cq_wait_cond).
type WaitCond int

// Wait conditions, with libfabric's values.
const (
	// CondNone: any new entry satisfies the wait.
	CondNone WaitCond = 0 // FI_CQ_COND_NONE
	// CondThreshold: the wait is satisfied once Attr.Threshold entries
	// are queued (or an error entry is, or the CQ is overrun).
	CondThreshold WaitCond = 1 // FI_CQ_COND_THRESHOLD
)

// Command is a control command (the anonymous enum in libfabric's fabric.h:
// FI_GETFIDFLAG = 0, ..., FI_ALIAS = 4, FI_GETWAIT = 5, ..., FI_GETWAITOBJ = 16).
type Command int

// Control commands a CQ or WaitSet accepts, with libfabric's values.
const (
	// GetWait retrieves the wait object: arg is an *int for WaitFD, a
	// *[]unix.PollFd for WaitPollFD, a *MutexCond for WaitMutexCond.
	GetWait Command = 5 // FI_GETWAIT
	// GetWaitObj retrieves the wait object's kind: arg is a *WaitObj.
	GetWaitObj Command = 16 // FI_GETWAITOBJ
)
