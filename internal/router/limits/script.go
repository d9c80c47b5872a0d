package limits

// opsScript runs a sequence of limiter operations on one workspace, in
// order, as one atomic script. Each operation does exactly what it would do
// alone; running several in one call only saves what they would repeat:
// the script call itself (several µs of Redis time each, more than the
// commands inside), the clock read, the reap of expired leases, the sum of
// committed cents (O(calls in flight)) and the key expiry refresh. All
// operations of one call see one server time.
//
// KEYS: 1 leases ZSET, 2 cost HASH, then any rate-window keys the
// operations refer to by index.
//
// ARGV: the operations one after another, each a kind and its fields:
//
//	A id ttl_ms max_in_flight cents ceiling n_windows
//	  then per window: key_index name period_ms max
//	S id reserved_cents(-1: unknown)
//	H id ttl_ms
//	I
//
// The reply has one element per operation:
//
//	A {code, reason, limit, current, retry_ms, window, count, committed}
//	  code 1 admitted, 0 refused, -1 id already in flight
//	S 1
//	H 1 extended, 0 lease gone or past its expiry (then reaped here)
//	I {count, cents} of unexpired leases (read only)
//
// A script error (a key of the wrong type, say) fails every operation of the
// call, and the operations before the failing one have taken effect: as
// with a lost reply, an admission's lease then expires within one TTL and a
// settle is retried (it is idempotent).
const opsScriptSrc = `
local now, t
-- clock reads the server's time once per call: all operations share it.
local function clock()
  if not now then
    t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
end
local reaped = false
-- count (ZCARD of leases) and committed (sum of cost) are read once, by the
-- first admission, and kept current by every later change.
local count, committed
-- set by a successful admission or heartbeat: the lease and cost keys'
-- expiry is refreshed to 2*ttl once, at the end.
local refresh
local out = {}
local n = #ARGV
local i = 1
while i <= n do
  local kind, id = ARGV[i], ARGV[i + 1]
  if kind == 'A' then
    local ttl = tonumber(ARGV[i + 2])
    local maxIn = tonumber(ARGV[i + 3])
    local cents = tonumber(ARGV[i + 4])
    local ceiling = tonumber(ARGV[i + 5])
    local nw = tonumber(ARGV[i + 6])
    local r
    if not reaped then
      -- Leases at or past their expiry go, with their cents, before the
      -- first admission; later ones would find nothing more: the clock
      -- does not move within a call.
      reaped = true
      clock()
      local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
      for _, m in ipairs(expired) do redis.call('HDEL', KEYS[2], m) end
      if #expired > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) end
    end
    if not count then
      count = redis.call('ZCARD', KEYS[1])
      committed = 0
      for _, v in ipairs(redis.call('HVALS', KEYS[2])) do committed = committed + tonumber(v) end
    end
    if maxIn > 0 and count >= maxIn then
      r = {0, 'in_flight', maxIn, count, 0, '', count, committed}
    elseif ceiling > 0 and committed + cents > ceiling then
      r = {0, 'spend', ceiling, committed, 0, '', count, committed}
    end
    for w = 0, nw - 1 do
      if r then break end
      local b = i + 7 + 4 * w
      local key = KEYS[tonumber(ARGV[b])]
      local period = tonumber(ARGV[b + 2])
      local wmax = tonumber(ARGV[b + 3])
      redis.call('ZREMRANGEBYSCORE', key, '-inf', now - period)
      local k = redis.call('ZCARD', key)
      if k >= wmax then
        local oldest = redis.call('ZRANGE', key, k - wmax, k - wmax, 'WITHSCORES')
        r = {0, 'rate', wmax, k, tonumber(oldest[2]) + period - now, ARGV[b + 1], count, committed}
      end
    end
    -- A call id already in flight is refused before anything else, as a
    -- programming error: checked here on refusals, and by ZADD NX below
    -- (nothing has changed yet when it reports the id present).
    if r then
      if redis.call('ZSCORE', KEYS[1], id) then r = {-1, '', 0, 0, 0, '', 0, 0} end
    elseif redis.call('ZADD', KEYS[1], 'NX', now + ttl, id) == 0 then
      r = {-1, '', 0, 0, 0, '', 0, 0}
    else
      redis.call('HSET', KEYS[2], id, cents)
      refresh = ttl
      local member = id .. '@' .. t[1] .. '.' .. t[2] .. '.' .. i
      for w = 0, nw - 1 do
        local b = i + 7 + 4 * w
        local key = KEYS[tonumber(ARGV[b])]
        redis.call('ZADD', key, now, member)
        redis.call('PEXPIRE', key, tonumber(ARGV[b + 2]))
      end
      count = count + 1
      committed = committed + cents
      r = {1, '', 0, 0, 0, '', count, committed}
    end
    out[#out + 1] = r
    i = i + 7 + 4 * nw
  elseif kind == 'S' then
    -- cents is what the lease reserved (-1: unknown, read it).
    local cents = tonumber(ARGV[i + 2])
    local removed = redis.call('ZREM', KEYS[1], id)
    if count and cents < 0 then cents = tonumber(redis.call('HGET', KEYS[2], id) or '0') end
    if redis.call('HDEL', KEYS[2], id) == 1 and count then committed = committed - cents end
    if count then count = count - removed end
    out[#out + 1] = 1
    i = i + 3
  elseif kind == 'H' then
    clock()
    local s = redis.call('ZSCORE', KEYS[1], id)
    if not s then
      out[#out + 1] = 0
    elseif tonumber(s) <= now then
      -- past its expiry: reaped here, as the next admission would
      redis.call('ZREM', KEYS[1], id)
      local cents = tonumber(redis.call('HGET', KEYS[2], id) or '0')
      if redis.call('HDEL', KEYS[2], id) == 1 and count then committed = committed - cents end
      if count then count = count - 1 end
      out[#out + 1] = 0
    else
      local ttl = tonumber(ARGV[i + 2])
      redis.call('ZADD', KEYS[1], 'XX', now + ttl, id)
      refresh = ttl
      out[#out + 1] = 1
    end
    i = i + 3
  elseif kind == 'I' then
    clock()
    local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
    local cents = 0
    for _, m in ipairs(ids) do cents = cents + tonumber(redis.call('HGET', KEYS[2], m) or '0') end
    out[#out + 1] = {#ids, cents}
    i = i + 1
  else
    return redis.error_reply('ERR limiter: unknown operation ' .. tostring(kind))
  end
end
if refresh then
  redis.call('PEXPIRE', KEYS[1], 2 * refresh)
  redis.call('PEXPIRE', KEYS[2], 2 * refresh)
end
return out
`

var opsScript = newLuaScript(opsScriptSrc)
