package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/xdpfab/xdpfab/internal/version"
)

type versionDoc struct {
	docHeader
	Module     string  `json:"module"`
	Version    string  `json:"version"`
	Commit     *string `json:"commit"`
	CommitTime *string `json:"commit_time"`
	Modified   bool    `json:"modified"`
	GoVersion  string  `json:"go"`
	BPFObject  string  `json:"bpf_object_sha256"`
	Kernel     string  `json:"kernel"`
}

func versionCommand(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "version",
		Short: "the build: module version, commit, BPF object hash, kernel",
		Long: `Prints the module version and VCS commit the Go toolchain recorded in the
binary (a build with -buildvcs=false has no commit: make build stamps it), the
Go version, the SHA-256 of the embedded BPF object (what XDP program and map
layout this build loads: sha256sum bpf/xdpfab_bpfel.o in its source tree) and
the running kernel's release. xdpfab --version prints the same.`,
		Args: noArgs,
	}
	outputFlag(c, e)
	c.RunE = runE(func(*cobra.Command, []string) error {
		if err := e.checkOutput(); err != nil {
			return err
		}
		return printVersion(e)
	})
	return c
}

func printVersion(e *env) error {
	v := version.Get()
	d := versionDoc{docHeader: header(kindVersion), Module: v.Module, Version: v.Version, Modified: v.Modified,
		GoVersion: v.GoVersion, BPFObject: v.BPFObject, Kernel: version.Kernel()}
	if v.Commit != "" {
		d.Commit = &v.Commit
	}
	if v.CommitTime != "" {
		d.CommitTime = &v.CommitTime
	}
	e.emit(d, func(w io.Writer) {
		fmt.Fprintf(w, "xdpfab %s\n", v.Version)
		fmt.Fprintf(w, "module\t%s\n", v.Module)
		commit := "unknown (built without VCS stamping)"
		if v.Commit != "" {
			commit = v.Commit
			if v.CommitTime != "" {
				commit += " (" + v.CommitTime + ")"
			}
			if v.Modified {
				commit += ", modified work tree"
			}
		}
		fmt.Fprintf(w, "commit\t%s\n", commit)
		fmt.Fprintf(w, "go\t%s\n", v.GoVersion)
		fmt.Fprintf(w, "bpf object\tsha256:%s\n", v.BPFObject)
		fmt.Fprintf(w, "kernel\t%s\n", d.Kernel)
	})
	return nil
}
