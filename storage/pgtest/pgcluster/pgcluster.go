// Package pgcluster starts a throwaway Postgres primary and a streaming
// standby on free loopback ports, for tests of failover: the primary is
// initdb'd in a temporary directory, the standby is a pg_basebackup -R of it
// (streaming replication, synchronous or asynchronous), and a test can stop
// the primary and promote the standby. Everything is stopped and removed
// when the test ends.
//
// The servers are the machine's Postgres binaries (PG_BINDIR, else the
// newest /usr/lib/postgresql/<n>/bin, else PATH). initdb and pg_ctl refuse
// to run as root, so when the test runs as root the servers run as the
// "postgres" user (uid/gid switched on the child processes only).
package pgcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BinDirEnv names a directory holding initdb, pg_ctl and pg_basebackup.
const BinDirEnv = "PG_BINDIR"

// Options shape Start.
type Options struct {
	// Sync makes the standby synchronous: the primary runs with
	// synchronous_standby_names = '*' (and synchronous_commit on), so a
	// commit is acknowledged only once the standby has flushed it.
	Sync bool
	// Via, when set, is called with the primary's address (127.0.0.1:port)
	// before the standby is built and returns the address the standby
	// replicates from (a proxy in front of the primary, to delay or cut
	// replication). Nil: the standby connects to the primary directly.
	Via func(primary string) string
}

// Node is one server of the cluster.
type Node struct {
	Name string
	Dir  string
	Port int

	c       *Cluster
	extra   []string
	running bool
}

// Cluster is a primary and its standby.
type Cluster struct {
	Primary, Standby *Node

	root string
	bin  string
	cred *syscall.Credential
	t    testing.TB
}

// Start builds and starts the cluster, or fails the test saying what is
// missing. The standby has caught up with the primary when Start returns.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	bin, err := binDir()
	if err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
	c := &Cluster{bin: bin, t: t}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("pgcluster: running as root and there is no postgres user to run the servers as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	// Not t.TempDir: its parents are 0700 root, which the postgres user
	// cannot traverse.
	root, err := os.MkdirTemp("", "pgcluster-")
	if err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
	c.root = root
	if c.cred != nil {
		if err := os.Chown(root, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			t.Fatalf("pgcluster: %v", err)
		}
	}
	t.Cleanup(c.cleanup)

	c.Primary = &Node{Name: "primary", Dir: filepath.Join(root, "primary"), Port: freePort(t), c: c}
	c.Standby = &Node{Name: "standby", Dir: filepath.Join(root, "standby"), Port: freePort(t), c: c}
	if out, err := c.run("initdb", "-D", c.Primary.Dir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
		t.Fatalf("pgcluster: initdb: %v\n%s", err, out)
	}
	conf := "listen_addresses = '127.0.0.1'\n" +
		"unix_socket_directories = ''\n" +
		"max_connections = 200\n" +
		"shared_buffers = 16MB\n" +
		// The test servers may lose their files on a machine crash: what
		// the failover tests measure is replication, not the disk.
		"fsync = off\n" +
		"full_page_writes = off\n" +
		"wal_level = replica\n" +
		"max_wal_senders = 5\n" +
		"wal_keep_size = 256MB\n" +
		"hot_standby = on\n" +
		"wal_receiver_status_interval = 1s\n" +
		"wal_retrieve_retry_interval = 200ms\n"
	if err := appendFile(filepath.Join(c.Primary.Dir, "postgresql.conf"), conf); err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
	if opts.Sync {
		// On the command line, not in postgresql.conf: pg_basebackup copies
		// the file, and a promoted standby waiting for a standby of its own
		// would block every commit.
		c.Primary.extra = []string{"-c", "synchronous_standby_names=*"}
	}
	if err := c.Primary.firstStart(t); err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
	from := c.Primary.Addr()
	if opts.Via != nil {
		from = opts.Via(from)
	}
	host, port, err := net.SplitHostPort(from)
	if err != nil {
		t.Fatalf("pgcluster: replication address %q: %v", from, err)
	}
	if out, err := c.run("pg_basebackup", "-h", host, "-p", port, "-U", "postgres", "-D", c.Standby.Dir,
		"-R", "-X", "stream", "-c", "fast", "--no-sync"); err != nil {
		t.Fatalf("pgcluster: pg_basebackup: %v\n%s", err, out)
	}
	if err := c.Standby.firstStart(t); err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
	if err := c.WaitStreaming(30 * time.Second); err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
	return c
}

// Addr is the node's 127.0.0.1:port.
func (n *Node) Addr() string { return fmt.Sprintf("127.0.0.1:%d", n.Port) }

// DSN reaches this node only, database postgres.
func (n *Node) DSN() string {
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", n.Addr())
}

// DSN names both nodes with target_session_attrs=read-write, so that a
// client reaches whichever of them is the primary (pgx's multi-host form,
// keyword/value: host=a,b port=p,q).
func (c *Cluster) DSN() string {
	return fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres dbname=postgres sslmode=disable "+
		"target_session_attrs=read-write connect_timeout=2", c.Primary.Port, c.Standby.Port)
}

// Start starts the node and waits until it accepts connections.
func (n *Node) Start() error {
	args := []string{"-D", n.Dir, "-l", filepath.Join(n.c.root, n.Name+".log"), "-w", "-t", "60",
		"-o", shellJoin(append([]string{"-p", strconv.Itoa(n.Port)}, n.extra...)), "start"}
	if out, err := n.c.run("pg_ctl", args...); err != nil {
		return fmt.Errorf("start %s: %v\n%s\n%s", n.Name, err, out, n.Log())
	}
	n.running = true
	return nil
}

// firstStart starts the node for the first time, on another free port
// when its own was taken meanwhile (freePort's port is free only when it
// is picked: another test's server can bind it before this one starts).
func (n *Node) firstStart(t testing.TB) error {
	var err error
	for range 5 {
		if err = n.Start(); err == nil || !strings.Contains(err.Error(), "Address already in use") {
			return err
		}
		n.Port = freePort(t)
	}
	return err
}

// Stop stops the node with pg_ctl's mode: "fast" (clients cut, a clean
// shutdown that sends every WAL record to the standby first) or
// "immediate" (a crash: what was not yet streamed stays behind).
func (n *Node) Stop(mode string) error {
	if !n.running {
		return nil
	}
	if out, err := n.c.run("pg_ctl", "-D", n.Dir, "-m", mode, "-w", "-t", "60", "stop"); err != nil {
		return fmt.Errorf("stop %s: %v\n%s", n.Name, err, out)
	}
	n.running = false
	return nil
}

// Log is the node's server log, for failure messages.
func (n *Node) Log() string {
	b, _ := os.ReadFile(filepath.Join(n.c.root, n.Name+".log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Promote promotes the standby (pg_ctl promote, waiting until it accepts
// writes).
func (c *Cluster) Promote() error {
	if out, err := c.run("pg_ctl", "-D", c.Standby.Dir, "-w", "-t", "60", "promote"); err != nil {
		return fmt.Errorf("promote: %v\n%s", err, out)
	}
	return nil
}

// Failover stops the primary with mode and promotes the standby.
func (c *Cluster) Failover(mode string) error {
	if err := c.Primary.Stop(mode); err != nil {
		return err
	}
	return c.Promote()
}

// WaitStreaming waits until the primary reports the standby streaming and
// caught up (its replay position at the primary's current WAL position).
func (c *Cluster) WaitStreaming(within time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		last = func() error {
			conn, err := pgx.Connect(ctx, c.Primary.DSN())
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			var ok bool
			err = conn.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_replication
				WHERE state = 'streaming' AND replay_lsn >= pg_current_wal_lsn()`).Scan(&ok)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("standby not streaming or behind")
			}
			return nil
		}()
		if last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("standby did not catch up within %s: %v\n%s", within, last, c.Standby.Log())
}

func (c *Cluster) cleanup() {
	for _, n := range []*Node{c.Standby, c.Primary} {
		if n != nil {
			if err := n.Stop("immediate"); err != nil {
				c.t.Logf("pgcluster: %v", err)
			}
		}
	}
	if c.t.Failed() {
		for _, n := range []*Node{c.Primary, c.Standby} {
			if n != nil {
				c.t.Logf("pgcluster: %s log (tail):\n%s", n.Name, n.Log())
			}
		}
	}
	_ = os.RemoveAll(c.root)
}

// run runs one of the Postgres programs, as the postgres user when the test
// is root.
func (c *Cluster) run(prog string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, prog), args...)
	cmd.Dir = c.root
	cmd.Env = append(os.Environ(), "LC_ALL=C", "PGCONNECT_TIMEOUT=5")
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
		cmd.Env = append(cmd.Env, "HOME="+c.root)
	}
	return cmd.CombinedOutput()
}

// binDir finds the Postgres server programs.
func binDir() (string, error) {
	if d := os.Getenv(BinDirEnv); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("no Postgres server programs (initdb, pg_ctl, pg_basebackup): install postgresql or set %s", BinDirEnv)
}

func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pgcluster: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func appendFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(s); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// shellJoin quotes args for pg_ctl -o, which passes them through a shell.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}
