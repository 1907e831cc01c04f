package bpf

// The flags are pinned so regeneration is byte-for-byte reproducible (.ci/run
// checks it). clang-14 is Debian 12's; -I for asm/types.h (FINDINGS.md).
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip -no-strip=false -target bpfel -go-package bpf -output-stem xdpfab -type xdpfab_addr xdpfab av_map.c -- -O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu -I.
