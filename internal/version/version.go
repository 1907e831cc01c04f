// Package version describes the running build: the module version and VCS
// commit the Go toolchain recorded (runtime/debug.ReadBuildInfo), the
// embedded BPF object's hash, and the kernel it runs on. `xdpfab version`,
// the agent's handshake and its xdpfab_build_info metric report it.
package version

import (
	"runtime"
	"runtime/debug"
	"strings"
	"sync"

	"github.com/xdpfab/xdpfab/bpf"
	"golang.org/x/sys/unix"
)

// Info is what a build knows about itself.
type Info struct {
	// Module is the main module's path, Version its version as the
	// toolchain recorded it: a tag for `go install ...@v1.2.3`, "(devel)"
	// for a build from a work tree.
	Module, Version string
	// Commit is the VCS revision the build was made from and Modified
	// whether the work tree had uncommitted changes; Commit is "" when the
	// build was not stamped (-buildvcs=false, or no git at build time).
	Commit   string
	Modified bool
	// CommitTime is the commit's time (RFC 3339), "" when not stamped.
	CommitTime string
	// GoVersion is the toolchain that built the binary.
	GoVersion string
	// BPFObject is the hex SHA-256 of the embedded BPF object.
	BPFObject string
}

// Get returns the running binary's build information.
var Get = sync.OnceValue(func() Info {
	in := Info{Module: "github.com/xdpfab/xdpfab", Version: "unknown", GoVersion: runtime.Version(), BPFObject: bpf.ObjectSHA256()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return in
	}
	if bi.Main.Path != "" {
		in.Module = bi.Main.Path
	}
	if bi.Main.Version != "" {
		in.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Commit = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		case "vcs.time":
			in.CommitTime = s.Value
		}
	}
	return in
})

// Short is "VERSION (COMMIT[+dirty])", for logs and the handshake.
func (i Info) Short() string {
	c := i.Commit
	if c == "" {
		c = "commit unknown"
	} else if len(c) > 12 {
		c = c[:12]
	}
	if i.Modified {
		c += "+dirty"
	}
	return i.Version + " (" + c + ")"
}

// Kernel is the release of the running kernel (uname -r), "" if unknown.
func Kernel() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return strings.TrimRight(string(u.Release[:]), "\x00")
}
