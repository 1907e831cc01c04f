module github.com/xdpfab/xdpfab/bench

go 1.26.0

replace github.com/xdpfab/xdpfab => ../

require (
	github.com/asavie/xdp v0.3.3
	github.com/cilium/ebpf v0.22.0
	github.com/vishvananda/netlink v1.3.1
	github.com/vishvananda/netns v0.0.5
	github.com/xdpfab/xdpfab v0.0.0-00010101000000-000000000000
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.49.0
)

require golang.org/x/sync v0.24.0 // indirect
