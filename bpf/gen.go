package bpf

// The flags are pinned so regeneration is byte-for-byte reproducible (.ci/run
// checks it). clang-14 is Debian 12's; -I for asm/types.h (docs/platform.md).
// -mcpu=v3 (32-bit jumps and ALU, Linux 5.1 and later), which overrides
// bpf2go's default v1: 2 ns less per packet (docs/platform.md#bpf2go).
//
// bpf2go generates the maps' key and value structs; -type adds the nested
// address and the two enums. Its identifier, kern, prefixes every generated
// name (struct av_key becomes kernAvKey, enum counter's STAT_RX
// kernCounterSTAT_RX); types.go gives them their exported names. stringer
// then writes Counter's String from the line comments there.
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip -no-strip=false -target bpfel -go-package bpf -output-stem xdpfab -type udp_addr -type counter -type policy -type av_key -type av_val -type av_slot -type av_aux -type av_hdr kern av_map.c -- -O2 -mcpu=v3 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu -I.
//go:generate go tool stringer -type Counter -linecomment -output counter_string.go
