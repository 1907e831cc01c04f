// Package stack opens what one endpoint needs in one call: a private
// address vector, a transmit and a receive completion queue, and the
// endpoint bound to them; Close tears them down in the reverse order. It is
// the common shape of a small xdpfab application (the demo, `xdpfab
// pingpong`, the benchmarks); an application that shares an AV or a CQ
// between endpoints opens them itself.
//
// Attaching the XDP program to the interface is not part of a Stack: an
// agent's program is attached already, a private one is the caller's to
// attach and detach (see loader.Objects.Attach).
//
// Open given a nil or unloaded (zero) *loader.Objects fails with
// fi.EINVAL; Close on a nil or zero Stack returns nil (nothing to
// release).
package stack

import (
	"errors"
	"fmt"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/loader"
)

// Attr describes a Stack.
type Attr struct {
	// AV is the address vector's attributes (nil: a table AV with the
	// defaults av.Open gives).
	AV *av.Attr
	// TxCQ and RxCQ are the completion queues' attributes.
	TxCQ, RxCQ cq.Attr
	// EP is the endpoint's attributes; Open sets its AV, TxCQ and RxCQ.
	EP ep.Attr
	// Do, when set, runs the endpoint's opening, e.g. on a thread inside a
	// network namespace (netlab's Host.Do); nil runs it directly.
	Do func(func() error) error
}

// Stack is an endpoint with its AV and CQs.
type Stack struct {
	AV         *av.AV
	TxCQ, RxCQ *cq.CQ
	EP         *ep.Endpoint
}

// Open opens the AV, the CQs and the endpoint on objs, in that order. On
// failure it closes whatever it opened and returns the first error.
func Open(objs *loader.Objects, attr Attr) (*Stack, error) {
	if objs == nil {
		return nil, fmt.Errorf("stack: no loader objects: %w", fi.EINVAL)
	}
	s := &Stack{}
	avAttr := attr.AV
	if avAttr == nil {
		avAttr = &av.Attr{}
	}
	var err error
	if s.AV, err = av.Open(objs, avAttr); err != nil {
		return nil, fmt.Errorf("stack: address vector: %w", err)
	}
	if s.TxCQ, err = cq.Open(attr.TxCQ); err != nil {
		s.Close()
		return nil, fmt.Errorf("stack: transmit CQ: %w", err)
	}
	if s.RxCQ, err = cq.Open(attr.RxCQ); err != nil {
		s.Close()
		return nil, fmt.Errorf("stack: receive CQ: %w", err)
	}
	epAttr := attr.EP
	epAttr.AV, epAttr.TxCQ, epAttr.RxCQ = s.AV, s.TxCQ, s.RxCQ
	open := func() (err error) {
		s.EP, err = ep.Open(objs, epAttr)
		return err
	}
	if attr.Do != nil {
		err = attr.Do(open)
		if err == nil && s.EP == nil {
			err = fmt.Errorf("Attr.Do returned without opening it: %w", fi.EINVAL)
		}
	} else {
		err = open()
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("stack: endpoint: %w", err)
	}
	return s, nil
}

// Close closes the endpoint, then the CQs, then the AV, and returns the
// errors joined. Closing a closed or partly opened Stack is safe.
func (s *Stack) Close() error {
	if s == nil {
		return nil
	}
	var errs []error
	if s.EP != nil {
		errs = append(errs, s.EP.Close())
		s.EP = nil
	}
	for _, q := range []**cq.CQ{&s.TxCQ, &s.RxCQ} {
		if *q != nil {
			errs = append(errs, (*q).Close())
			*q = nil
		}
	}
	if s.AV != nil {
		errs = append(errs, s.AV.Close())
		s.AV = nil
	}
	return errors.Join(errs...)
}
