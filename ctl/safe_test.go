//go:build linux

package ctl_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
	"golang.org/x/sys/unix"
)

// What a peer sends reaches a message only cut and escaped: an honest
// name as it is, a hostile one as its first MaxQuoted bytes, escaped, and
// its length.
func TestClean(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"job-7", "job-7"},
		{"", ""},
		{"a\nb\x00\u202ec\xff", `a\nb\x00\u202ec\xff`},
		{`say "hi"`, `say \"hi\"`},
		{strings.Repeat("x", ctl.MaxQuoted), strings.Repeat("x", ctl.MaxQuoted)},
		{strings.Repeat("x", 200000), strings.Repeat("x", ctl.MaxQuoted) + "...(200000 bytes)"},
		// Never half a character: 63 bytes of x and a 2-byte é.
		{strings.Repeat("x", ctl.MaxQuoted-1) + "éé", strings.Repeat("x", ctl.MaxQuoted-1) + "...(67 bytes)"},
	} {
		if got := ctl.Clean(c.in); got != c.want {
			t.Errorf("Clean(%.40q) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := ctl.Quote("job"); got != `"job"` {
		t.Errorf("Quote(job) = %s", got)
	}
	for _, in := range []string{strings.Repeat("\x00", 100000), strings.Repeat("\u202e", 100000)} {
		if got := ctl.Clean(in); len(got) > 4*ctl.MaxQuoted+32 || !utf8.ValidString(got) {
			t.Errorf("Clean of %d hostile bytes: %d bytes", len(in), len(got))
		}
	}
}

// An error message is cut and its unprintable characters escaped, its
// quotes kept: ErrorResponse's, whatever the error quoted.
func TestClipText(t *testing.T) {
	if got := ctl.ClipText(`av create "job": exists`, 100); got != `av create "job": exists` {
		t.Errorf("an honest message: %q", got)
	}
	if got := ctl.ClipText("line\nbreak\u202e", 100); got != `line\nbreak\u202e` {
		t.Errorf("control characters: %q", got)
	}
	long := fmt.Errorf("unknown field %s: %w", strings.Repeat("x", 300000), fi.EINVAL)
	r := ctl.ErrorResponse(1, long)
	if len(r.Error) > ctl.MaxErrorText+32 || !strings.HasSuffix(r.Error, fmt.Sprintf("(%d bytes)", len(long.Error()))) || r.Errno != int(fi.EINVAL) {
		t.Errorf("a 300 KB error: %d bytes, errno %d, ends %q", len(r.Error), r.Errno, r.Error[max(0, len(r.Error)-20):])
	}
	var args ctl.AVCreateArgs
	err := ctl.Decode(json.RawMessage(fmt.Sprintf(`{"%s":1}`, strings.Repeat("y", 300000))), &args)
	if !errors.Is(err, fi.EINVAL) || len(err.Error()) > 2*ctl.MaxQuoted+64 {
		t.Errorf("an unknown field of 300 KB: %d bytes: %.100v", len(err.Error()), err)
	}
}

// ReadMsgKeepFDs returns what a bad message carried, for the caller to
// close in its own time; ReadMsg closes it.
func TestReadMsgKeepFDs(t *testing.T) {
	a, b := pair(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if _, _, err := a.WriteMsgUnix([]byte("{"), unix.UnixRights(int(w.Fd())), nil); err != nil {
		t.Fatal(err)
	}
	var req ctl.Request
	fds, err := ctl.ReadMsgKeepFDs(b, &req)
	if !errors.Is(err, fi.EINVAL) || len(fds) != 1 {
		t.Fatalf("a bad message with a descriptor: %v %v", fds, err)
	}
	os.NewFile(uintptr(fds[0]), "kept").Close()
	if _, _, err := a.WriteMsgUnix([]byte("{"), unix.UnixRights(int(w.Fd())), nil); err != nil {
		t.Fatal(err)
	}
	if fds, err := ctl.ReadMsg(b, &req); !errors.Is(err, fi.EINVAL) || fds != nil {
		t.Fatalf("ReadMsg of a bad message with a descriptor: %v %v", fds, err)
	}
}
