// Package redistest starts throwaway Redis topologies on loopback ports for
// tests: a Cluster of three primaries (each with a replica) and a Sentinel
// set (a primary, a replica and three sentinels), from the redis-server and
// redis-cli binaries on PATH (Redis 7).
//
// Cluster and Sentinel start one shared instance per test binary, on first
// use; tests that kill nodes start their own with NewCluster or
// NewSentinel. Every process is started with a parent-death signal, so it
// dies with the test binary even when nothing calls Stop; a package whose
// tests use the shared instances should also call Main from TestMain, which
// stops them and removes their files.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// MasterName is the name the sentinels monitor.
const MasterName = "comfygate"

// Timings of the test topologies: short, so failovers in tests are quick.
const (
	// NodeTimeout is the Cluster's cluster-node-timeout.
	NodeTimeout = 1000 * time.Millisecond
	// DownAfter is the sentinels' down-after-milliseconds.
	DownAfter = 1000 * time.Millisecond
	// FailoverTimeout is the sentinels' failover-timeout.
	FailoverTimeout = 5000 * time.Millisecond
)

const startTimeout = 60 * time.Second

// Node is one redis-server (or sentinel) process.
type Node struct {
	Port int
	Addr string // 127.0.0.1:port
	dir  string
	args []string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Kill stops the node with SIGKILL and waits for it to exit.
func (n *Node) Kill() {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Restart starts a killed node again with its configuration file (a Cluster
// node comes back as a replica of whoever took its slots).
func (n *Node) Restart() error { return n.start() }

func (n *Node) start() error {
	cmd := exec.Command("redis-server", n.args...)
	cmd.Dir = n.dir
	log, err := os.OpenFile(filepath.Join(n.dir, "log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := spawn(cmd); err != nil {
		log.Close()
		return fmt.Errorf("redistest: start redis-server on %d: %w", n.Port, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(done) }()
	n.mu.Lock()
	n.cmd, n.done = cmd, done
	n.mu.Unlock()
	return waitPing(n.Addr)
}

// starter is one goroutine, locked to its OS thread for the life of the
// process, that starts every child: the parent-death signal fires when the
// thread that forked a child exits, and this one never does.
var starter struct {
	once sync.Once
	reqs chan startReq
}

type startReq struct {
	cmd  *exec.Cmd
	errc chan error
}

func spawn(cmd *exec.Cmd) error {
	starter.once.Do(func() {
		starter.reqs = make(chan startReq)
		go func() {
			runtime.LockOSThread()
			for r := range starter.reqs {
				r.errc <- r.cmd.Start()
			}
		}()
	})
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	errc := make(chan error, 1)
	starter.reqs <- startReq{cmd, errc}
	return <-errc
}

func waitPing(addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: %s does not answer: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freePort returns a loopback port that is free, as is port+10000 (a
// Cluster node's bus port).
func freePort() (int, error) {
	for range 200 {
		p := 20000 + rand.IntN(25000)
		ok := true
		for _, q := range []int{p, p + 10000} {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(q))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return p, nil
		}
	}
	return 0, errors.New("redistest: no free port")
}

func newNode(root, name string, conf []string, sentinel bool) (*Node, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	lines := append([]string{
		"port " + strconv.Itoa(port),
		"bind 127.0.0.1",
		"dir " + dir,
		"save \"\"",
		"appendonly no",
		"protected-mode no",
	}, conf...)
	file := filepath.Join(dir, "redis.conf")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return nil, err
	}
	n := &Node{Port: port, Addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir, args: []string{file}}
	if sentinel {
		n.args = append(n.args, "--sentinel")
	}
	return n, n.start()
}

// Cluster is a Redis Cluster of three primaries, each with Replicas
// replicas.
type Cluster struct {
	Nodes []*Node
	dir   string
}

// URL is the Cluster's address in comfygate's form, every node a seed.
func (c *Cluster) URL() string { return "redis-cluster://" + joinAddrs(c.Nodes) }

// joinAddrs is nodes' addresses, comma-separated.
func joinAddrs(nodes []*Node) string {
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr
	}
	return strings.Join(addrs, ",")
}

// NewCluster starts a three-primary Cluster with replicas replicas per
// primary, waits until every slot is served and every replica in sync, and
// stops it when the test ends.
func NewCluster(t testing.TB, replicas int) *Cluster {
	t.Helper()
	c, err := startCluster(replicas)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// scratchDir checks that redis-server is installed and makes the directory
// a topology's nodes keep their files in.
func scratchDir(kind string) (string, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return "", fmt.Errorf("redistest: redis-server not on PATH (apt-get install redis-server): %w", err)
	}
	return os.MkdirTemp("", "redistest-"+kind+"-")
}

func startCluster(replicas int) (c *Cluster, err error) {
	dir, err := scratchDir("cluster")
	if err != nil {
		return nil, err
	}
	c = &Cluster{dir: dir}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	conf := []string{
		"cluster-enabled yes",
		"cluster-config-file nodes.conf",
		"cluster-node-timeout " + strconv.Itoa(int(NodeTimeout.Milliseconds())),
		"cluster-replica-validity-factor 0",
		"cluster-require-full-coverage yes",
	}
	total := 3 * (1 + replicas)
	for i := range total {
		n, err := newNode(dir, "n"+strconv.Itoa(i), conf, false)
		if err != nil {
			return c, err
		}
		c.Nodes = append(c.Nodes, n)
	}
	args := []string{"--cluster", "create"}
	for _, n := range c.Nodes {
		args = append(args, n.Addr)
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		return c, fmt.Errorf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	return c, c.WaitHealthy(startTimeout)
}

// WaitHealthy waits until every live node reports cluster_state:ok and
// every slot is served by a primary whose replicas are in sync.
func (c *Cluster) WaitHealthy(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if last = c.healthy(); last == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("redistest: cluster not healthy after %v: %w", timeout, last)
}

func (c *Cluster) healthy() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, n := range c.Nodes {
		if !n.alive() {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		info, err := cl.ClusterInfo(ctx).Result()
		repl, err2 := cl.Info(ctx, "replication").Result()
		cl.Close()
		if err != nil || err2 != nil {
			return errors.Join(err, err2)
		}
		if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_assigned:16384") {
			return fmt.Errorf("%s: %s", n.Addr, firstLine(info))
		}
		if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
			return fmt.Errorf("%s: replica not in sync", n.Addr)
		}
	}
	return nil
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}

func (n *Node) alive() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// PrimaryFor returns the live node that serves key's slot as primary.
func (c *Cluster) PrimaryFor(key string) (*Node, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, n := range c.Nodes {
		if !n.alive() {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		slot, err := cl.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			cl.Close()
			continue
		}
		shards, err := cl.ClusterShards(ctx).Result()
		cl.Close()
		if err != nil {
			continue
		}
		for _, sh := range shards {
			for _, r := range sh.Slots {
				if r.Start > slot || slot > r.End {
					continue
				}
				for _, sn := range sh.Nodes {
					if sn.Role != "master" || sn.Health != "online" {
						continue
					}
					for _, m := range c.Nodes {
						if m.Port == int(sn.Port) {
							return m, nil
						}
					}
				}
			}
		}
	}
	return nil, fmt.Errorf("redistest: no primary found for %q", key)
}

// Stop kills every node and removes the Cluster's files.
func (c *Cluster) Stop() {
	for _, n := range c.Nodes {
		n.Kill()
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
}

// Sentinel is a primary, its replica and three sentinels watching them.
type Sentinel struct {
	Primary, Replica *Node
	Sentinels        []*Node
	dir              string
}

// URL is the Sentinel set's address in comfygate's form.
func (s *Sentinel) URL() string {
	return "redis-sentinel://" + joinAddrs(s.Sentinels) + "/" + MasterName
}

// NewSentinel starts a Sentinel set, waits until every sentinel knows the
// replica and the other sentinels (so a failover can be agreed), and stops
// it when the test ends.
func NewSentinel(t testing.TB) *Sentinel {
	t.Helper()
	s, err := startSentinel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func startSentinel() (s *Sentinel, err error) {
	dir, err := scratchDir("sentinel")
	if err != nil {
		return nil, err
	}
	s = &Sentinel{dir: dir}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	if s.Primary, err = newNode(dir, "primary", nil, false); err != nil {
		return s, err
	}
	if s.Replica, err = newNode(dir, "replica", []string{"replicaof 127.0.0.1 " + strconv.Itoa(s.Primary.Port)}, false); err != nil {
		return s, err
	}
	conf := []string{
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2", MasterName, s.Primary.Port),
		fmt.Sprintf("sentinel down-after-milliseconds %s %d", MasterName, DownAfter.Milliseconds()),
		fmt.Sprintf("sentinel failover-timeout %s %d", MasterName, FailoverTimeout.Milliseconds()),
		fmt.Sprintf("sentinel parallel-syncs %s 1", MasterName),
	}
	for i := range 3 {
		n, err := newNode(dir, "sentinel"+strconv.Itoa(i), conf, true)
		if err != nil {
			return s, err
		}
		s.Sentinels = append(s.Sentinels, n)
	}
	return s, s.waitReady(startTimeout)
}

func (s *Sentinel) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		ready := true
		for _, n := range s.Sentinels {
			m, err := s.masterState(n)
			if err != nil || m["num-other-sentinels"] != "2" || m["num-slaves"] != "1" || m["flags"] != "master" {
				ready, last = false, fmt.Sprintf("%s: %v %v", n.Addr, m, err)
				break
			}
		}
		if ready {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("redistest: sentinels not ready after %v: %s", timeout, last)
}

func (s *Sentinel) masterState(n *Node) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c := redis.NewSentinelClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
	defer c.Close()
	return c.Master(ctx, MasterName).Result()
}

// MasterAddr is the primary's address as the first live sentinel reports it.
func (s *Sentinel) MasterAddr() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var err error
	for _, n := range s.Sentinels {
		if !n.alive() {
			continue
		}
		c := redis.NewSentinelClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		var hp []string
		hp, err = c.GetMasterAddrByName(ctx, MasterName).Result()
		c.Close()
		if err == nil && len(hp) == 2 {
			return net.JoinHostPort(hp[0], hp[1]), nil
		}
	}
	return "", fmt.Errorf("redistest: no sentinel names a primary: %v", err)
}

// Node returns the data node at addr.
func (s *Sentinel) Node(addr string) *Node {
	for _, n := range []*Node{s.Primary, s.Replica} {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// Stop kills every process and removes the files.
func (s *Sentinel) Stop() {
	for _, n := range append([]*Node{s.Primary, s.Replica}, s.Sentinels...) {
		if n != nil {
			n.Kill()
		}
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// Shared instances, one per test binary, both started (concurrently) on
// the first request for either: a package that uses one mostly uses both.
var shared struct {
	once        sync.Once
	ready       chan struct{}
	cluster     *Cluster
	clusterErr  error
	sentinel    *Sentinel
	sentinelErr error
}

func startShared() {
	shared.once.Do(func() {
		shared.ready = make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); shared.cluster, shared.clusterErr = startCluster(0) }()
		go func() { defer wg.Done(); shared.sentinel, shared.sentinelErr = startSentinel() }()
		go func() { wg.Wait(); close(shared.ready) }()
	})
	<-shared.ready
}

// ClusterURL returns the address of the test binary's shared Cluster
// (three primaries, no replicas), starting it on first use. Tests must not
// kill its nodes (use NewCluster) and should keep their keys under a unique
// prefix.
func ClusterURL(t testing.TB) string {
	t.Helper()
	startShared()
	if shared.clusterErr != nil {
		t.Fatal(shared.clusterErr)
	}
	return shared.cluster.URL()
}

// SentinelURL returns the address of the test binary's shared Sentinel
// set, starting it on first use. Tests must not kill its nodes (use
// NewSentinel).
func SentinelURL(t testing.TB) string {
	t.Helper()
	startShared()
	if shared.sentinelErr != nil {
		t.Fatal(shared.sentinelErr)
	}
	return shared.sentinel.URL()
}

// Main runs the tests and then stops the shared instances. Call it from
// TestMain: os.Exit(redistest.Main(m)) is not needed, Main exits.
func Main(m *testing.M) {
	code := m.Run()
	if shared.ready != nil {
		<-shared.ready
		if shared.cluster != nil {
			shared.cluster.Stop()
		}
		if shared.sentinel != nil {
			shared.sentinel.Stop()
		}
	}
	os.Exit(code)
}

// Topology is one way to reach Redis in a table test.
type Topology struct {
	Name string
	// URL returns the address (starting the topology on first use).
	URL func(testing.TB) string
}

// Topologies are the single server (given by the caller, normally
// pgtest.RedisURL), the shared Cluster and the shared Sentinel set.
func Topologies(single func(testing.TB) string) []Topology {
	return []Topology{{"single", single}, {"cluster", ClusterURL}, {"sentinel", SentinelURL}}
}
