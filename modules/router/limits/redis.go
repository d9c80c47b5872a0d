package limits

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is the multi-instance Limiter. Per workspace it keeps, under one hash
// tag so every key of a workspace lands in one cluster slot:
//
//	<prefix>{ws}:leases         ZSET call id → lease expiry (ms, Redis clock)
//	<prefix>{ws}:cost           HASH call id → reserved cents
//	<prefix>{ws}:credits        STRING credit balance in cents (no expiry)
//	<prefix>{ws}:rate:<n>:<ms>  ZSET admission → admission time, per window
//	<prefix>{ws}:settled:<id>   STRING guard against a double debit (15 min)
//
// Every operation is one Lua script, so reaping, checking and reserving are
// atomic. Scripts read the clock with redis.call('TIME'): all gateways share
// the server's clock, so their own skew cannot stretch or shrink a lease.
// The lease and cost keys carry a PEXPIRE of 2×TTL refreshed on every
// admission and heartbeat, so an idle workspace leaves nothing behind.
// Admission sums the cost HASH (HVALS), O(calls in flight): bounded by
// MaxInFlight in practice.
type Redis struct {
	client redis.UniversalClient
	owned  bool
	prefix string
	ttl    time.Duration
}

var _ Limiter = (*Redis)(nil)

// OpenRedis builds a limiter on a new client for a redis:// or rediss:// URL
// and owns it (Close closes it). It does not dial. Keys start with prefix,
// for example "comfygate:limits:". ttl 0 means DefaultLeaseTTL.
func OpenRedis(url, prefix string, ttl time.Duration) (*Redis, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		// ParseURL's errors do not echo the URL, so no password leaks.
		return nil, fmt.Errorf("limits: parse redis url: %w", err)
	}
	l, err := NewRedis(redis.NewClient(opts), prefix, ttl)
	if err != nil {
		return nil, err
	}
	l.owned = true
	return l, nil
}

// NewRedis builds a limiter on a shared client; Close leaves it open.
func NewRedis(client redis.UniversalClient, prefix string, ttl time.Duration) (*Redis, error) {
	ttl, err := normalizeTTL(ttl)
	if err != nil {
		return nil, err
	}
	return &Redis{client: client, prefix: prefix, ttl: ttl}, nil
}

// Close closes the client if OpenRedis created it.
func (r *Redis) Close() error {
	if !r.owned {
		return nil
	}
	if err := r.client.Close(); err != nil {
		return fmt.Errorf("limits: close redis: %w", err)
	}
	return nil
}

// plainWorkspace is what may go into a key verbatim; anything else (braces
// would break the hash tag, colons could collide with key suffixes) is hashed.
var plainWorkspace = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// key returns <prefix>{ws}:suffix.
func (r *Redis) key(workspace, suffix string) string {
	tag := workspace
	if !plainWorkspace.MatchString(workspace) {
		sum := sha256.Sum256([]byte(workspace))
		tag = "h-" + hex.EncodeToString(sum[:16])
	}
	return r.prefix + "{" + tag + "}:" + suffix
}

func rateSuffix(w Window) string {
	return "rate:" + w.Name + ":" + strconv.FormatInt(w.Period.Milliseconds(), 10)
}

// luaNow is the Redis clock in milliseconds.
const luaNow = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// luaReap drops leases whose expiry is at or before now, with their cents.
const luaReap = `local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for _, m in ipairs(expired) do redis.call('HDEL', KEYS[2], m) end
if #expired > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) end
`

// admitScript: KEYS = leases, cost, credits, rate keys...;
// ARGV = id, ttl_ms, max_in_flight, cents, ceiling, require_credits,
// then name, period_ms, max per window.
// Returns {code, reason, limit, current, retry_ms, window, count, committed}
// with code 1 admitted, 0 refused, -1 duplicate id.
var admitScript = redis.NewScript(luaNow + luaReap + `
local id = ARGV[1]
local ttl = tonumber(ARGV[2])
local maxIn = tonumber(ARGV[3])
local cents = tonumber(ARGV[4])
local ceiling = tonumber(ARGV[5])
if redis.call('ZSCORE', KEYS[1], id) then return {-1, '', 0, 0, 0, '', 0, 0} end
local count = redis.call('ZCARD', KEYS[1])
local committed = 0
for _, v in ipairs(redis.call('HVALS', KEYS[2])) do committed = committed + tonumber(v) end
if maxIn > 0 and count >= maxIn then return {0, 'in_flight', maxIn, count, 0, '', count, committed} end
if ceiling > 0 and committed + cents > ceiling then return {0, 'spend', ceiling, committed, 0, '', count, committed} end
local nw = (#ARGV - 6) / 3
for i = 1, nw do
  local key = KEYS[3 + i]
  local name = ARGV[4 + 3 * i]
  local period = tonumber(ARGV[5 + 3 * i])
  local wmax = tonumber(ARGV[6 + 3 * i])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - period)
  local n = redis.call('ZCARD', key)
  if n >= wmax then
    local oldest = redis.call('ZRANGE', key, n - wmax, n - wmax, 'WITHSCORES')
    return {0, 'rate', wmax, n, tonumber(oldest[2]) + period - now, name, count, committed}
  end
end
if ARGV[6] == '1' then
  local bal = tonumber(redis.call('GET', KEYS[3]) or '0')
  if bal - committed < cents then return {0, 'credits', bal, committed, 0, '', count, committed} end
end
redis.call('ZADD', KEYS[1], now + ttl, id)
redis.call('HSET', KEYS[2], id, cents)
redis.call('PEXPIRE', KEYS[1], 2 * ttl)
redis.call('PEXPIRE', KEYS[2], 2 * ttl)
local member = id .. '@' .. t[1] .. '.' .. t[2]
for i = 1, nw do
  local period = tonumber(ARGV[5 + 3 * i])
  redis.call('ZADD', KEYS[3 + i], now, member)
  redis.call('PEXPIRE', KEYS[3 + i], period)
end
return {1, '', 0, 0, 0, '', count + 1, committed + cents}
`)

// heartbeatScript: KEYS = leases, cost; ARGV = id, ttl_ms. Returns 1 if the
// lease was extended, 0 if it was gone or already past its expiry (then it
// is reaped here, exactly as the next admission would).
var heartbeatScript = redis.NewScript(luaNow + `
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then return 0 end
if tonumber(s) <= now then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
  return 0
end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], 'XX', now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[1], 2 * ttl)
redis.call('PEXPIRE', KEYS[2], 2 * ttl)
return 1
`)

// settleScript: KEYS = leases, cost, credits, settled guard;
// ARGV = id, charged cents, guard ttl ms. The debit happens at most once per
// call id within the guard's lifetime.
var settleScript = redis.NewScript(`
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
local charged = tonumber(ARGV[2])
if charged > 0 and redis.call('SET', KEYS[4], '1', 'NX', 'PX', ARGV[3]) then
  redis.call('DECRBY', KEYS[3], charged)
end
return 1
`)

// inspectScript: KEYS = leases, cost. Read-only: counts unexpired leases.
var inspectScript = redis.NewScript(luaNow + `
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
local cents = 0
for _, m in ipairs(ids) do cents = cents + tonumber(redis.call('HGET', KEYS[2], m) or '0') end
return {#ids, cents}
`)

func unavailable(op string, err error) error {
	return fmt.Errorf("limits: %s: %w: %w", op, ErrUnavailable, err)
}

// Admit implements Limiter with one round trip.
func (r *Redis) Admit(ctx context.Context, workspace string, call Call, lim Limits) (*Lease, error) {
	if err := validate(workspace, call, lim); err != nil {
		return nil, err
	}
	keys := make([]string, 0, 3+len(lim.Rate))
	keys = append(keys, r.key(workspace, "leases"), r.key(workspace, "cost"), r.key(workspace, "credits"))
	requireCredits := "0"
	if lim.RequireCredits {
		requireCredits = "1"
	}
	args := make([]any, 0, 6+3*len(lim.Rate))
	args = append(args, call.ID, r.ttl.Milliseconds(), lim.MaxInFlight, call.Cents, lim.SpendCeilingCents, requireCredits)
	for _, w := range lim.Rate {
		keys = append(keys, r.key(workspace, rateSuffix(w)))
		args = append(args, w.Name, w.Period.Milliseconds(), w.Max)
	}
	res, err := admitScript.Run(ctx, r.client, keys, args...).Slice()
	if err != nil {
		return nil, unavailable("admit", err)
	}
	if len(res) != 8 {
		return nil, unavailable("admit", fmt.Errorf("unexpected reply %v", res))
	}
	code, _ := res[0].(int64)
	reason, _ := res[1].(string)
	limit, _ := res[2].(int64)
	current, _ := res[3].(int64)
	retryMS, _ := res[4].(int64)
	window, _ := res[5].(string)
	count, _ := res[6].(int64)
	committed, _ := res[7].(int64)
	switch code {
	case -1:
		return nil, fmt.Errorf("%w: %s", ErrDuplicateCall, call.ID)
	case 0:
		return nil, newRefusal(Reason(reason), limit, current, window, time.Duration(retryMS)*time.Millisecond)
	}
	return &Lease{
		ID: call.ID, Workspace: workspace, Cents: call.Cents,
		InFlight: int(count), CommittedCents: committed, TTL: r.ttl,
		store: r, credits: lim.RequireCredits,
	}, nil
}

// newRefusal fills Remaining from Limit and Current as the contract defines it.
func newRefusal(reason Reason, limit, current int64, window string, retry time.Duration) *Refusal {
	ref := &Refusal{Reason: reason, Limit: limit, Current: current, Window: window, RetryAfter: retry}
	if reason == ReasonSpend || reason == ReasonCredits {
		ref.Remaining = max(0, limit-current)
	}
	return ref
}

func (r *Redis) heartbeat(ctx context.Context, l *Lease) error {
	keys := []string{r.key(l.Workspace, "leases"), r.key(l.Workspace, "cost")}
	ok, err := heartbeatScript.Run(ctx, r.client, keys, l.ID, r.ttl.Milliseconds()).Int64()
	if err != nil {
		return unavailable("heartbeat", err)
	}
	if ok != 1 {
		return fmt.Errorf("%w: call %s expired", ErrLeaseLost, l.ID)
	}
	return nil
}

func (r *Redis) settle(ctx context.Context, l *Lease, charged int64) error {
	keys := []string{
		r.key(l.Workspace, "leases"), r.key(l.Workspace, "cost"),
		r.key(l.Workspace, "credits"), r.key(l.Workspace, "settled:"+l.ID),
	}
	if err := settleScript.Run(ctx, r.client, keys, l.ID, charged, settleGuardTTL.Milliseconds()).Err(); err != nil {
		return unavailable("settle", err)
	}
	return nil
}

// Inspect implements Limiter.
func (r *Redis) Inspect(ctx context.Context, workspace string) (int, int64, error) {
	if err := validateWorkspace(workspace); err != nil {
		return 0, 0, err
	}
	keys := []string{r.key(workspace, "leases"), r.key(workspace, "cost")}
	res, err := inspectScript.Run(ctx, r.client, keys).Int64Slice()
	if err != nil {
		return 0, 0, unavailable("inspect", err)
	}
	if len(res) != 2 {
		return 0, 0, unavailable("inspect", fmt.Errorf("unexpected reply %v", res))
	}
	return int(res[0]), res[1], nil
}

// Balance implements Limiter.
func (r *Redis) Balance(ctx context.Context, workspace string) (int64, error) {
	if err := validateWorkspace(workspace); err != nil {
		return 0, err
	}
	v, err := r.client.Get(ctx, r.key(workspace, "credits")).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, unavailable("balance", err)
	}
	return v, nil
}

// AddCredits implements Limiter.
func (r *Redis) AddCredits(ctx context.Context, workspace string, cents int64) (int64, error) {
	if err := validateWorkspace(workspace); err != nil {
		return 0, err
	}
	if cents < -MaxCents || cents > MaxCents {
		return 0, fmt.Errorf("%w: credit change %d out of range", ErrInvalid, cents)
	}
	v, err := r.client.IncrBy(ctx, r.key(workspace, "credits"), cents).Result()
	if err != nil {
		return 0, unavailable("add credits", err)
	}
	return v, nil
}
