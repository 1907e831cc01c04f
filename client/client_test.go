//go:build linux

package client_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
)

// fakeAgent answers the first request of every connection with answer.
func fakeAgent(t *testing.T, answer func(req ctl.Request) *ctl.Response) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			var req ctl.Request
			if _, err := ctl.ReadMsg(c, &req); err == nil {
				ctl.WriteMsg(c, answer(req), nil)
			}
			c.Close()
		}
	}()
	return path
}

// A client refuses an agent of another protocol version, with a message
// that names both.
func TestDialRefusesOtherVersion(t *testing.T) {
	var sent ctl.HelloArgs
	path := fakeAgent(t, func(req ctl.Request) *ctl.Response {
		json.Unmarshal(req.Args, &sent)
		res, _ := json.Marshal(ctl.HelloResult{Version: ctl.Version + 1})
		return &ctl.Response{ID: req.ID, Result: res}
	})
	_, err := client.Dial(path)
	if !errors.Is(err, fi.ENOPROTOOPT) || !strings.Contains(err.Error(), fmt.Sprint("version ", ctl.Version+1)) {
		t.Fatalf("Dial = %v, want ENOPROTOOPT naming version %d", err, ctl.Version+1)
	}
	if sent.Version != ctl.Version {
		t.Errorf("client announced version %d, want %d", sent.Version, ctl.Version)
	}
}

// An agent from before the handshake answers "unknown operation".
func TestDialRefusesAgentWithoutHandshake(t *testing.T) {
	path := fakeAgent(t, func(req ctl.Request) *ctl.Response {
		return ctl.ErrorResponse(req.ID, fmt.Errorf("unknown operation %q: %w", req.Op, fi.ENOSYS))
	})
	_, err := client.Dial(path)
	if !errors.Is(err, fi.ENOPROTOOPT) || !strings.Contains(err.Error(), "predates") {
		t.Fatalf("Dial = %v, want ENOPROTOOPT (agent predates the handshake)", err)
	}
}

func TestDialAcceptsSameVersion(t *testing.T) {
	path := fakeAgent(t, func(req ctl.Request) *ctl.Response {
		res, _ := json.Marshal(ctl.HelloResult{Version: ctl.Version, Agent: "test"})
		return &ctl.Response{ID: req.ID, Result: res}
	})
	c, err := client.Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Agent().Agent != "test" {
		t.Errorf("Agent() = %+v", c.Agent())
	}
}

func TestDialNoAgent(t *testing.T) {
	_, err := client.Dial(filepath.Join(t.TempDir(), "none.sock"))
	if !errors.Is(err, fi.ENOENT) {
		t.Fatalf("Dial = %v, want ENOENT", err)
	}
}

// Mismatched user IDs are refused before anything is sent.
func TestAVInsertUserIDCount(t *testing.T) {
	path := fakeAgent(t, func(req ctl.Request) *ctl.Response {
		res, _ := json.Marshal(ctl.HelloResult{Version: ctl.Version})
		return &ctl.Response{ID: req.ID, Result: res}
	})
	c, err := client.Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.AVInsert(ctl.AVInsertArgs{Name: "a", Addrs: []string{"198.18.0.1:1", "198.18.0.2:1"}, UserIDs: []fi.Addr{1}})
	if !errors.Is(err, fi.EINVAL) {
		t.Fatalf("AVInsert = %v, want EINVAL", err)
	}
}
