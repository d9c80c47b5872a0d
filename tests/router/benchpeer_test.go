package router

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
	"github.com/comfygate/comfygate/tests/peers/partner"
)

// The router benchmark's peer runs in a process of its own, as a partner
// always does: a client that calls the peer directly then crosses a process
// boundary both ways, like any direct call to a partner, instead of handing
// its request to a goroutine of its own runtime. (The in-process peer is
// measured too, for comparison with earlier tables.)

// peerProcessEnv names the address TestRouterBenchPeerProcess serves on.
const peerProcessEnv = "ROUTER_BENCH_PEER_ADDR"

// TestRouterBenchPeerProcess is not a test: startPeerProcess runs this test
// binary again with only it selected, to serve a constant peer until its
// standard input closes.
func TestRouterBenchPeerProcess(t *testing.T) {
	addr := os.Getenv(peerProcessEnv)
	if addr == "" {
		t.Skip("the router benchmark's peer process, started by TestRouterOverheadBenchmark")
	}
	p, err := partner.StartStandalone(addr, partner.KindConstant)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, _ = io.Copy(io.Discard, os.Stdin) // until the benchmark ends or dies
}

// startPeerProcess starts the constant peer in its own process and returns
// its base URL and pid once it accepts connections.
func startPeerProcess(t *testing.T) (url string, pid int) {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", gateway.FreePort(t))
	cmd := exec.Command(os.Args[0], "-test.run=^TestRouterBenchPeerProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), peerProcessEnv+"="+addr)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("peer process: %v", err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	eventually(t, 30*time.Second, "the peer process listening on "+addr, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return "http://" + addr, cmd.Process.Pid
}
