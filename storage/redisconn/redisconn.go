// Package redisconn turns the one string that names comfygate's Redis into
// a go-redis client: a single server, a Sentinel-managed primary, or a
// Cluster. Every Redis user in the gateway (idempotency claims, the event
// bus, the router's limits) opens its client here, so all three forms work
// everywhere and every caller holds a redis.UniversalClient.
//
// The forms (one string, so it fits a Caddyfile argument, a JSON field and
// an environment variable alike):
//
//	redis://[[user]:password@]host[:port][/db][?option=value…]
//	rediss://…                         (TLS; also unix://, as go-redis's ParseURL)
//	redis-sentinel://[[user]:password@]host[:port][,host[:port]…]/master[/db][?option=value…]
//	rediss-sentinel://…                (TLS to the sentinels and the primary)
//	redis-cluster://[[user]:password@]host[:port][,host[:port]…][?option=value…]
//	rediss-cluster://…                 (TLS)
//
// For Sentinel the hosts are the sentinels (port 26379 by default), master
// is the name the sentinels monitor, and the user and password are those of
// the Redis primary and replicas; the sentinels' own credentials, when they
// have any, go in the sentinel_username and sentinel_password options. For
// a Cluster the hosts are seed nodes (port 6379 by default): the client
// learns the rest from CLUSTER SLOTS. Other options are go-redis's own
// (dial_timeout, read_timeout, pool_size, max_retries, …; see its
// ParseURL, ParseFailoverURL and ParseClusterURL); unknown ones are an
// error. Passwords with reserved characters must be percent-encoded.
//
// Nothing here dials: a client connects on its first command, so a
// configuration can be checked offline. Errors never echo the string, which
// may hold a password.
package redisconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Kind says which topology a Config names.
type Kind int

const (
	// Single is one Redis server (redis://, rediss://, unix://).
	Single Kind = iota
	// Sentinel is a primary found through Redis Sentinel.
	Sentinel
	// Cluster is a Redis Cluster.
	Cluster
)

func (k Kind) String() string {
	switch k {
	case Sentinel:
		return "sentinel"
	case Cluster:
		return "cluster"
	}
	return "single"
}

// Config is a parsed Redis address. Exactly one of the option pointers,
// the one Kind names, is set.
type Config struct {
	Kind     Kind
	Single   *redis.Options
	Failover *redis.FailoverOptions
	Cluster  *redis.ClusterOptions
}

// Default ports of the multi-host forms.
const (
	sentinelPort = "26379"
	clusterPort  = "6379"
)

// Parse reads a Redis address in one of the package's forms.
func Parse(raw string) (*Config, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return nil, errors.New("redis: address must start with redis://, rediss://, unix://, redis-sentinel://, rediss-sentinel://, redis-cluster:// or rediss-cluster://")
	}
	switch scheme {
	case "redis", "rediss", "unix":
		o, err := redis.ParseURL(raw)
		if err != nil {
			return nil, clean(err)
		}
		return &Config{Kind: Single, Single: o}, nil
	case "redis-sentinel", "rediss-sentinel":
		return parseSentinel(strings.TrimSuffix(scheme, "-sentinel"), rest)
	case "redis-cluster", "rediss-cluster":
		return parseCluster(strings.TrimSuffix(scheme, "-cluster"), rest)
	}
	return nil, fmt.Errorf("redis: unknown scheme %q (want redis, rediss, unix, redis-sentinel, rediss-sentinel, redis-cluster or rediss-cluster)", scheme)
}

// multi is the parts of a multi-host address.
type multi struct {
	user  *url.Userinfo
	hosts []string // host:port, default port filled in
	path  string
	query url.Values
}

// splitMulti parses rest (what follows "scheme://") with a comma-separated
// host list, which net/url does not accept.
func splitMulti(rest, defaultPort string) (*multi, error) {
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	userinfo, hostlist := "", authority
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		userinfo, hostlist = authority[:i+1], authority[i+1:]
	}
	// net/url decodes the userinfo, path and query; the host list is
	// replaced by a placeholder it accepts.
	u, err := url.Parse("redis://" + userinfo + "h" + tail)
	if err != nil {
		return nil, clean(err)
	}
	if u.Fragment != "" {
		return nil, errors.New("redis: address must not have a fragment")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, clean(err)
	}
	m := &multi{user: u.User, path: u.Path, query: q}
	for _, h := range strings.Split(hostlist, ",") {
		addr, err := hostPort(h, defaultPort)
		if err != nil {
			return nil, err
		}
		m.hosts = append(m.hosts, addr)
	}
	return m, nil
}

// hostPort checks one host of a list and fills in the default port.
func hostPort(h, defaultPort string) (string, error) {
	if h == "" {
		return "", errors.New("redis: empty host in address list")
	}
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		// No port: a bare name or a bracketed IPv6 literal.
		host, port = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), defaultPort
		if strings.ContainsAny(host, "[]") || strings.Contains(host, ":") && !strings.HasPrefix(h, "[") {
			return "", fmt.Errorf("redis: bad host %q", h)
		}
	}
	if host == "" || port == "" || strings.ContainsAny(host, " /@") {
		return "", fmt.Errorf("redis: bad host %q", h)
	}
	for _, c := range port {
		if c < '0' || c > '9' {
			return "", fmt.Errorf("redis: bad port in %q", h)
		}
	}
	return net.JoinHostPort(host, port), nil
}

// goRedisURL builds the single-host URL go-redis's parsers read: the first
// host, the others as addr options.
func (m *multi) goRedisURL(scheme string, user *url.Userinfo, path string, q url.Values) string {
	for _, h := range m.hosts[1:] {
		q.Add("addr", h)
	}
	u := url.URL{Scheme: scheme, User: user, Host: m.hosts[0], Path: path, RawQuery: q.Encode()}
	return u.String()
}

func parseSentinel(scheme, rest string) (*Config, error) {
	m, err := splitMulti(rest, sentinelPort)
	if err != nil {
		return nil, err
	}
	segs := strings.FieldsFunc(m.path, func(r rune) bool { return r == '/' })
	if len(segs) == 0 || len(segs) > 2 {
		return nil, errors.New("redis: a sentinel address needs /<master name>[/<db>] after its hosts")
	}
	q := m.query
	for _, k := range []string{"master_name", "addr", "username", "password"} {
		if q.Has(k) {
			return nil, fmt.Errorf("redis: option %s is not allowed in a sentinel address (the master name is its path, the hosts its host list, the credentials its user info)", k)
		}
	}
	q.Set("master_name", segs[0])
	if len(segs) == 2 {
		if q.Has("db") {
			return nil, errors.New("redis: db given twice")
		}
		q.Set("db", segs[1])
	}
	// The address's user info is the data nodes'; go-redis reads the
	// sentinels' from the user info and the nodes' from options.
	if m.user != nil {
		if name := m.user.Username(); name != "" {
			q.Set("username", name)
		}
		if pw, ok := m.user.Password(); ok {
			q.Set("password", pw)
		}
	}
	var sentinelUser *url.Userinfo
	su, sp := q.Get("sentinel_username"), q.Get("sentinel_password")
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	switch {
	case sp != "":
		sentinelUser = url.UserPassword(su, sp)
	case su != "":
		sentinelUser = url.User(su)
	}
	o, err := redis.ParseFailoverURL(m.goRedisURL(scheme, sentinelUser, "", q))
	if err != nil {
		return nil, clean(err)
	}
	return &Config{Kind: Sentinel, Failover: o}, nil
}

func parseCluster(scheme, rest string) (*Config, error) {
	m, err := splitMulti(rest, clusterPort)
	if err != nil {
		return nil, err
	}
	if strings.Trim(m.path, "/") != "" {
		return nil, errors.New("redis: a cluster address has no path (a Cluster has only database 0)")
	}
	if m.query.Has("addr") {
		return nil, errors.New("redis: option addr is not allowed in a cluster address (list the hosts, comma-separated)")
	}
	o, err := redis.ParseClusterURL(m.goRedisURL(scheme, m.user, "", m.query))
	if err != nil {
		return nil, clean(err)
	}
	return &Config{Kind: Cluster, Cluster: o}, nil
}

// clean drops the address that net/url puts in its errors: it may hold a
// password.
func clean(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("redis: bad address: %w", ue.Err)
	}
	return err
}

// SetDefaultProtocol sets the RESP version when the address left it open.
func (c *Config) SetDefaultProtocol(p int) {
	switch c.Kind {
	case Single:
		if c.Single.Protocol == 0 {
			c.Single.Protocol = p
		}
	case Sentinel:
		if c.Failover.Protocol == 0 {
			c.Failover.Protocol = p
		}
	case Cluster:
		if c.Cluster.Protocol == 0 {
			c.Cluster.Protocol = p
		}
	}
}

// Addrs lists the addresses the client starts from: the server, the
// sentinels or the seed nodes.
func (c *Config) Addrs() []string {
	switch c.Kind {
	case Sentinel:
		return c.Failover.SentinelAddrs
	case Cluster:
		return c.Cluster.Addrs
	}
	return []string{c.Single.Addr}
}

// NewClient builds the client for c without dialing: redis.NewClient,
// redis.NewFailoverClient or redis.NewClusterClient.
func (c *Config) NewClient() redis.UniversalClient {
	switch c.Kind {
	case Sentinel:
		return redis.NewFailoverClient(c.Failover)
	case Cluster:
		cl := redis.NewClusterClient(c.Cluster)
		h := reloadOnFailure{cl}
		cl.AddHook(h)
		// Each node's dials too: a refused dial starts the reload at once,
		// not after the command's retries have run out.
		cl.OnNewNode(func(node *redis.Client) { node.AddHook(h) })
		return cl
	}
	return redis.NewClient(c.Single)
}

// reloadOnFailure makes a Cluster client re-read the slot map (CLUSTER
// SLOTS from a live node) when a command fails without a reply from Redis:
// its node may be gone. go-redis re-reads it only on a MOVED or ASK reply
// and once a minute (ClusterStateReloadInterval) otherwise, so after a
// primary is killed the client kept dialing the dead node for its slots
// for up to a minute after its replica had taken them over (seen in
// tests/chaos TestRedisClusterPrimaryKilled). Reloads are lazy and at most
// one per 200 ms (go-redis's own cooldown), so a storm of failures costs
// a few CLUSTER SLOTS.
type reloadOnFailure struct{ c *redis.ClusterClient }

// nodeFailure reports whether err is no answer from a node (a dial, read
// or write error, or a timeout), as opposed to Redis's own error reply or
// the caller giving up.
func nodeFailure(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var rerr redis.Error
	return !errors.As(err, &rerr)
}

func (h reloadOnFailure) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if nodeFailure(err) {
			h.c.ReloadState(ctx)
		}
		return conn, err
	}
}

func (h reloadOnFailure) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if nodeFailure(err) {
			h.c.ReloadState(ctx)
		}
		return err
	}
}

func (h reloadOnFailure) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		failed := nodeFailure(err)
		for _, c := range cmds {
			failed = failed || nodeFailure(c.Err())
		}
		if failed {
			h.c.ReloadState(ctx)
		}
		return err
	}
}

// Open parses raw and builds its client. It does not dial.
func Open(raw string) (redis.UniversalClient, error) {
	c, err := Parse(raw)
	if err != nil {
		return nil, err
	}
	return c.NewClient(), nil
}
