// Package cq implements libfabric's completion queues (fi_cq(3)) for
// xdpfab: the queue through which the dataplane's endpoints report finished
// sends and receives to the application.
//
// A CQ is a bounded ring of entries stored by value. The application opens
// one with Open and reads it with Read, ReadFrom (with each entry's source),
// ReadErr (error completions), and the blocking SRead and SReadFrom. An
// endpoint binds with Bind and writes through the Producer it gets back:
// Reserve, Write and Commit when it can be back-pressured (a receive path
// reserves room before it takes frames from its socket ring, so a full CQ
// leaves packets in the ring), or Push when it cannot (a full CQ then enters
// libfabric's fatal overrun state and the completion is counted as lost).
// Nothing is dropped without a count: see Stats.
//
// # Mapping from libfabric
//
//	fi_cq_open, struct fi_cq_attr     Open, Attr
//	fi_close                          CQ.Close (fi.EBUSY while bound)
//	fi_control(FI_GETWAIT)            CQ.Control(GetWait, &obj)
//	fi_trywait                        CQ.TryWait, WaitSet.TryWait
//	fi_cq_read, fi_cq_readfrom        CQ.Read, CQ.ReadFrom
//	fi_cq_readerr                     CQ.ReadErr
//	fi_cq_sread, fi_cq_sreadfrom      CQ.SRead, CQ.SReadFrom (time.Duration)
//	fi_cq_signal, fi_cq_strerror      CQ.Signal, CQ.StrError
//	fi_wait_open, fi_wait             OpenWaitSet, WaitSet.Wait
//	struct fi_cq_*_entry              Entry (the format decides the fields)
//	struct fi_cq_err_entry            ErrEntry
//
// Constants keep libfabric's names without the FI_ or FI_CQ_ prefix and its
// numeric values (FormatTagged = 4, WaitFD = 3, CondThreshold = 1,
// GetWait = 5), as package fi does for flags and errno values. Errors wrap
// fi.Errno values; test them with errors.Is(err, fi.EAGAIN).
//
// Nil and zero values never panic. A CQ, Producer or WaitSet that is nil,
// or that did not come from Open, Bind or OpenWaitSet (its zero value),
// makes every method with an error result fail with fi.EINVAL; a closed CQ
// or WaitSet keeps failing with fi.EBADF, as fi_cq(3) has it. Methods
// without an error result return zero values (Attr, Stats, CQ, WaitObj)
// or do nothing (Commit returns 0). Close and Unbind on a nil or zero
// value return nil: there is nothing to release.
//
// Read copies into a caller-provided []Entry. Entry has the fields of
// fi_cq_tagged_entry in order; the smaller formats are its prefixes, and
// Read fills only the format's fields. One type for all formats keeps the
// read path free of interfaces and generics; the format still decides what
// is reported and how much is copied.
//
// # Progress
//
// With automatic progress an endpoint's goroutine writes completions and
// readers block in SRead on the CQ's wait object. With manual progress the
// endpoint binds with a Progress function, which every read call runs
// first: the application's own reads poll the socket ring, the low-latency
// mode.
//
// # Concurrency and cost
//
// Producers and readers may run on any number of goroutines. Entries move
// through atomic head and tail indices; producers serialize among
// themselves with a lock held per Reserve..Commit batch or Push, readers
// with a lock held per read call. Attr.SingleProducer and
// Attr.SingleConsumer remove those locks, leaving a lock-free
// single-producer, single-consumer ring. Reads and writes never allocate
// or make a system call: producers wake a wait object only when someone
// waits on it. A reader blocked in SRead parks its goroutine, whatever the
// wait object (a thread blocked in poll(2) wakes far more slowly); the
// eventfd of WaitFD is written only for an external waiter armed by
// TryWait, once per wake-up.
//
// The package is portable: off Linux, where there is no eventfd, WaitFD
// and WaitPollFD use a pipe, and everything else is the same.
//
// # What this package is not
//
// It does not move packets, hold address vectors or decide sources: the
// dataplane gives each completion its source (fi_addr or user ID, chosen by
// the address vector's FI_AV_USER_ID setting) and raw sender address, and
// the CQ applies FI_SOURCE and FI_SOURCE_ERR. It implements no event queues
// or counters, and a WaitSet holds CQs only.
package cq
