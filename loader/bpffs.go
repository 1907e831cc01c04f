package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/xdpfab/xdpfab/fi"
	"golang.org/x/sys/unix"
)

const bpffsMagic = 0xcafe4a11

// SysFSBPF is the conventional bpffs mount point.
const SysFSBPF = "/sys/fs/bpf"

// IsBPFFS reports whether dir is on a bpffs mount.
func IsBPFFS(dir string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false, err
	}
	return uint32(st.Type) == bpffsMagic, nil
}

// ensureBPFFS makes dir exist on bpffs, mounting a bpffs instance on it
// when it is on another file system. Each bpffs mount is its own instance:
// processes share pins only if they see the same mount.
func ensureBPFFS(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		// A fresh machine has /sys/fs/bpf on sysfs, where nothing can be
		// created: mount bpffs there first, as systemd would.
		if filepath.Dir(dir) != SysFSBPF {
			return fmt.Errorf("create pin root %s: %w", dir, err)
		}
		if err := mountBPFFS(SysFSBPF); err != nil {
			return err
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("create pin root %s: %w", dir, err)
		}
	}
	ok, err := IsBPFFS(dir)
	if err != nil {
		return fmt.Errorf("stat pin root %s: %w", dir, err)
	}
	if ok {
		return nil
	}
	return mountBPFFS(dir)
}

func mountBPFFS(dir string) error {
	if ok, err := IsBPFFS(dir); err == nil && ok {
		return nil
	}
	if err := mount(dir); err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("pin root %s is not on bpffs and mounting one needs root (CAP_SYS_ADMIN): %w", dir, fi.EPERM)
		}
		if errors.Is(err, unix.ENODEV) {
			return fmt.Errorf("pin root %s: this kernel has no bpf file system: %w", dir, fi.ENOSYS)
		}
		return fmt.Errorf("mount bpffs on %s: %w", dir, err)
	}
	return nil
}

// UnmountBPFFS unmounts a bpffs that Load mounted on dir. Pins on it are
// gone afterwards (objects live while referenced).
func UnmountBPFFS(dir string) error {
	ok, err := IsBPFFS(dir)
	if err != nil || !ok {
		return err
	}
	return unmount(dir)
}
