// Package agent is the xdpfab node agent: the one privileged process of a
// node that owns the XDP attachment and the pinned maps, serves
// unprivileged applications over a Unix control socket, and exports
// Prometheus metrics.
//
// The agent keeps no state of its own that the pinned maps do not hold:
// address vectors, endpoints and the XDP link live under the pin root, so
// an agent that restarts (even after SIGKILL) re-adopts them, and traffic
// keeps flowing while no agent runs. On SIGTERM it leaves the link attached
// unless told to detach.
//
// The control protocol is package ctl; its Go client is package client.
package agent
