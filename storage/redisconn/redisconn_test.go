package redisconn_test

import (
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage/redisconn"
	"github.com/comfygate/comfygate/storage/redistest"
)

func TestParse(t *testing.T) {
	type want struct {
		kind             redisconn.Kind
		addrs            []string
		master           string
		user, pw         string
		sentUser, sentPW string
		db               int
		tls              bool
		dial             time.Duration
	}
	for _, tc := range []struct {
		name, in string
		want     want
	}{
		{"single", "redis://127.0.0.1:6379/2", want{kind: redisconn.Single, addrs: []string{"127.0.0.1:6379"}, db: 2}},
		{"single tls password", "rediss://u:p%40ss@r.example:6380?dial_timeout=3s",
			want{kind: redisconn.Single, addrs: []string{"r.example:6380"}, user: "u", pw: "p@ss", tls: true, dial: 3 * time.Second}},
		{"single default port", "redis://r.example", want{kind: redisconn.Single, addrs: []string{"r.example:6379"}}},
		{"sentinel", "redis-sentinel://s1:26379,s2:26380,s3/mymaster",
			want{kind: redisconn.Sentinel, addrs: []string{"s1:26379", "s2:26380", "s3:26379"}, master: "mymaster"}},
		{"sentinel one host", "redis-sentinel://10.0.0.1/m",
			want{kind: redisconn.Sentinel, addrs: []string{"10.0.0.1:26379"}, master: "m"}},
		{"sentinel passwords db options", "redis-sentinel://:dataPW@s1,s2:1/mymaster/3?sentinel_password=sentPW&dial_timeout=2s",
			want{kind: redisconn.Sentinel, addrs: []string{"s1:26379", "s2:1"}, master: "mymaster", pw: "dataPW", sentPW: "sentPW", db: 3, dial: 2 * time.Second}},
		{"sentinel users", "redis-sentinel://app:pw@s1/m?sentinel_username=sen&sentinel_password=x%2Fy",
			want{kind: redisconn.Sentinel, addrs: []string{"s1:26379"}, master: "m", user: "app", pw: "pw", sentUser: "sen", sentPW: "x/y"}},
		{"sentinel db option", "redis-sentinel://s1/m?db=4", want{kind: redisconn.Sentinel, addrs: []string{"s1:26379"}, master: "m", db: 4}},
		{"sentinel tls ipv6", "rediss-sentinel://[::1]:26379,[::2]/m",
			want{kind: redisconn.Sentinel, addrs: []string{"[::1]:26379", "[::2]:26379"}, master: "m", tls: true}},
		{"cluster", "redis-cluster://n1:7000,n2:7001,n3",
			want{kind: redisconn.Cluster, addrs: []string{"n1:7000", "n2:7001", "n3:6379"}}},
		{"cluster password options", "rediss-cluster://:pw@n1:7000/?read_timeout=5s",
			want{kind: redisconn.Cluster, addrs: []string{"n1:7000"}, pw: "pw", tls: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := redisconn.Parse(tc.in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.in, err)
			}
			w := tc.want
			if c.Kind != w.kind {
				t.Fatalf("kind %v, want %v", c.Kind, w.kind)
			}
			if got := strings.Join(c.Addrs(), " "); got != strings.Join(w.addrs, " ") {
				t.Errorf("addrs %q, want %q", got, w.addrs)
			}
			var got want
			got.kind, got.addrs = c.Kind, w.addrs
			switch c.Kind {
			case redisconn.Single:
				o := c.Single
				got.user, got.pw, got.db, got.tls, got.dial = o.Username, o.Password, o.DB, o.TLSConfig != nil, o.DialTimeout
			case redisconn.Sentinel:
				o := c.Failover
				got.master, got.user, got.pw, got.sentUser, got.sentPW = o.MasterName, o.Username, o.Password, o.SentinelUsername, o.SentinelPassword
				got.db, got.tls, got.dial = o.DB, o.TLSConfig != nil, o.DialTimeout
			case redisconn.Cluster:
				o := c.Cluster
				got.user, got.pw, got.tls, got.dial = o.Username, o.Password, o.TLSConfig != nil, o.DialTimeout
			}
			if strings.Join(got.addrs, " ") != strings.Join(w.addrs, " ") || got.master != w.master || got.user != w.user ||
				got.pw != w.pw || got.sentUser != w.sentUser || got.sentPW != w.sentPW || got.db != w.db || got.tls != w.tls || got.dial != w.dial {
				t.Errorf("got %+v\nwant %+v", got, w)
			}
			cl := c.NewClient() // builds without dialing
			if err := cl.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct{ name, in, msg string }{
		{"no scheme", "127.0.0.1:6379", "must start with"},
		{"unknown scheme", "http://h", "unknown scheme"},
		{"sentinel no master", "redis-sentinel://s1,s2", "master name"},
		{"sentinel too many segments", "redis-sentinel://s1/m/0/x", "master name"},
		{"sentinel master_name option", "redis-sentinel://s1/m?master_name=x", "master_name"},
		{"sentinel password option", "redis-sentinel://s1/m?password=secret", "password"},
		{"sentinel db twice", "redis-sentinel://s1/m/1?db=2", "db given twice"},
		{"sentinel bad db", "redis-sentinel://s1/m/x", "database"},
		{"empty host", "redis-cluster://n1,,n2", "empty host"},
		{"bad port", "redis-cluster://n1:70a0", "bad port"},
		{"cluster path", "redis-cluster://n1/0", "no path"},
		{"cluster addr option", "redis-cluster://n1?addr=n2:1", "addr"},
		{"unknown option", "redis-cluster://n1?frobnicate=1", "unexpected option"},
		{"fragment", "redis-sentinel://s1/m#x", "fragment"},
		{"bad escape keeps password out", "redis-cluster://:hunter2@n1?x=%zz", "escape"},
		{"single bad url keeps password out", "redis://:hunter2@h:port/", "bad address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := redisconn.Parse(tc.in)
			if err == nil {
				t.Fatalf("Parse(%q) succeeded", tc.in)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not say %q", err, tc.msg)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q echoes the password", err)
			}
		})
	}
}

func TestMain(m *testing.M) { redistest.Main(m) }
