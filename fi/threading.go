package fi

import "strconv"

// Threading is fi_domain(3)'s threading model: which calls the application
// serializes, and so which the provider need not guard with locks.
// Values are libfabric's (enum fi_threading). A provider may provide a
// stricter model than the one asked for (ThreadSafe serves any request);
// xdpfab's endpoints report the one they provide.
type Threading int

// Threading models (fi_domain.h).
const (
	// ThreadUnspec asks for the default: ThreadSafe.
	ThreadUnspec Threading = 0
	// ThreadSafe: any call from any goroutine at any time.
	ThreadSafe Threading = 1
	// ThreadFID: the application serializes calls on each object.
	ThreadFID Threading = 2
	// ThreadDomain: the application serializes every call on the objects
	// of a domain.
	ThreadDomain Threading = 3
	// ThreadCompletion: calls on the objects that share a completion
	// structure are serialized.
	ThreadCompletion Threading = 4
	// ThreadEndpoint: calls on each endpoint and its contexts are
	// serialized.
	ThreadEndpoint Threading = 5
)

// String returns libfabric's name of the model (FI_THREAD_DOMAIN, ...).
func (t Threading) String() string {
	switch t {
	case ThreadUnspec:
		return "FI_THREAD_UNSPEC"
	case ThreadSafe:
		return "FI_THREAD_SAFE"
	case ThreadFID:
		return "FI_THREAD_FID"
	case ThreadDomain:
		return "FI_THREAD_DOMAIN"
	case ThreadCompletion:
		return "FI_THREAD_COMPLETION"
	case ThreadEndpoint:
		return "FI_THREAD_ENDPOINT"
	}
	return "Threading(" + strconv.Itoa(int(t)) + ")"
}
