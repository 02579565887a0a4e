package redislimit

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// decideSrc is the script of every refund and of every admission by a
// limiter built by All (one-limit admissions run singleScripts, below): it
// reads Redis TIME, decides every limit of the request, and writes only when
// all of them admit.
//
// KEYS[i] is the state of limit i. ARGV[1] is the mode: "a" to admit, "r" to
// refund what an earlier admission took. Then five arguments per limit: the
// algorithm (g: GCRA, t: token bucket, f: fixed window, s: weighted sliding
// window, b and a number: a ring of that many buckets), its period parameter
// in microseconds (the emission interval, the window, or a bucket's
// length), its quota (burst or limit), the cost, and, for a refund, the
// mark of the admission: its instant (Redis TIME, µs) for g and t, the index
// of the window it was counted in for f and s, of the bucket for b.
//
// A refund gives back what the admission took as far as it is still there:
// GCRA and the token bucket the cost less what could have come back since
// the admission (cost × interval − the time since, as their local twins
// do), the windows the cost to the window it was counted in, while the limit
// still counts that window.
//
// The reply is one string of five integers per limit: allowed (0 or 1),
// remaining, reset and retry-after in microseconds, and the admission's mark. Numbers are Lua doubles
// holding integers below 2^53 (the constructors keep them there), divided with
// math.floor only, so the arithmetic is exact; Redis writes a number argument
// of redis.call with 17 significant digits, so they are stored exactly.
//
// Redis 5 and later replicate scripts by their effects, which lets a script
// write after reading TIME; on older servers the script asks for it with
// redis.replicate_commands.
//
// State layout, one key per limit and user key:
//
//	g: string, the theoretical arrival time (µs)
//	t: hash k (tokens) and l (time of the last whole refill, µs)
//	f: hash w (window index) and n (count)
//	s: hash w (current window index), c (its count) and p (the previous one's)
//	b: string, the newest bucket's index and the counts of the ring (bucket.go)
//
// State a script cannot read (a field missing or not a number, nan, inf or
// past 2^53, a key of another type) reads as none, and the admission writes it afresh: one
// key's bad state is neither a Redis failure nor a key never limited.
//
// An admission moves stored instants and window indexes only forward: when
// TIME is behind them (a failover to a host whose clock lags), the stored
// value is kept, and the waits answered include the lag. A refund moves back
// what it gives back: a GCRA's TAT, a token bucket's last refill by the part
// of a token it returns.
const decideSrc = `
if not redis.REDIS_VERSION_NUM then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local floor, fmt = math.floor, string.format
local big = 9007199254740992 -- 2^53: a stored number past it, nan or inf, is no state
local refund = ARGV[1] == 'r'
local n = #KEYS
local single = n == 1
local out, w1, w2, w3, wt
if not single then out, w1, w2, w3, wt = {}, {}, {}, {}, {} end
local s1, s2, s3, st, reply
local ok = true

for i = 1, n do
  local j = i * 5 - 3
  local alg, a, b, cost = ARGV[j], tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2]), tonumber(ARGV[j + 3])
  local key = KEYS[i]
  local allowed, remaining, reset, retry, mark = 0, 0, 0, 0, now
  -- A refund's credit: the cost less the time since the admission.
  local since = 0
  if refund then
    since = now - tonumber(ARGV[j + 4])
    if since < 0 then since = 0 end
  end
  if alg == 'g' then
    local tat = tonumber(redis.pcall('GET', key))
    if not (tat and tat == tat and tat < big and tat > -big) then tat = now end
    if refund then
      local credit = cost * a - since
      if credit > 0 and tat > now then
        local nt = tat - credit
        if nt > now then
          redis.call('SET', key, nt, 'PX', floor((nt - now + 999) / 1000))
        else
          redis.call('DEL', key)
        end
      end
    else
      if tat < now then tat = now end
      local nt = tat + cost * a
      local cap = b * a
      if nt - cap > now then
        remaining = floor((cap - tat + now) / a)
        reset = tat - now
        retry = nt - cap - now
      else
        allowed = 1
        remaining = floor((cap - nt + now) / a)
        reset = nt - now
        if single then s1, st = nt, reset else w1[i], wt[i] = nt, reset end
      end
    end
  elseif alg == 't' then
    local v = redis.pcall('HMGET', key, 'k', 'l')
    if v.err then redis.call('DEL', key); v = {} end
    local sk, sl = tonumber(v[1]), tonumber(v[2])
    if not (sk and sl and sk == sk and sk < big and sk > -big and sl == sl and sl < big and sl > -big) then sk = nil end
    local tokens, last = b, now
    if sk and sl then tokens = b - sk; last = sl end
    if now > last then
      local add = floor((now - last) / a)
      if add > 0 then tokens = tokens + add; last = last + add * a end
      if tokens >= b then tokens = b; last = now end
    end
    -- Negative while TIME lags the stored refill: the wait includes the lag.
    local el = now - last
    if refund then
      local credit = cost * a - since
      if sk and sl and credit > 0 then
        -- Whole tokens back, and the rest of the credit as refill time.
        local whole = floor(credit / a)
        tokens = tokens + whole
        last = last - (credit - whole * a)
        local full = (b - tokens) * a - (now - last)
        if tokens < b and full > 0 then
          redis.call('HSET', key, 'k', b - tokens, 'l', last)
          redis.call('PEXPIRE', key, floor((full + 999) / 1000))
        else
          redis.call('DEL', key)
        end
      end
    elseif tokens >= cost then
      allowed = 1
      tokens = tokens - cost
      remaining = tokens
      reset = (b - tokens) * a - el
      if single then s1, s2, st = b - tokens, last, reset else w1[i], w2[i], wt[i] = b - tokens, last, reset end
    else
      remaining = tokens
      reset = (b - tokens) * a - el
      retry = (cost - tokens) * a - el
    end
  elseif alg == 'f' then
    local v = redis.pcall('HMGET', key, 'w', 'n')
    if v.err then redis.call('DEL', key); v = {} end
    local sw, sn = tonumber(v[1]), tonumber(v[2])
    if not (sw and sn and sw == sw and sw < big and sw > -big and sn == sn and sn < big and sn > -big) then sw = nil end
    local idx = floor(now / a)
    local cnt = 0
    if sw and sn and sw >= idx then idx = sw; cnt = sn end
    local left = (idx + 1) * a - now
    mark = idx
    if refund then
      -- Only while the window the admission was counted in is current.
      if sw and sn and sw == tonumber(ARGV[j + 4]) then
        local sc = sn - cost
        if sc < 0 then sc = 0 end
        redis.call('HSET', key, 'n', sc)
      end
    elseif cnt + cost <= b then
      allowed = 1
      cnt = cnt + cost
      remaining = b - cnt
      reset = left
      if single then s1, s2, st = idx, cnt, left else w1[i], w2[i], wt[i] = idx, cnt, left end
    else
      remaining = b - cnt
      reset = left
      retry = left
    end
  elseif alg == 's' then
    local v = redis.pcall('HMGET', key, 'w', 'c', 'p')
    if v.err then redis.call('DEL', key); v = {} end
    local sw, sc, sp = tonumber(v[1]), tonumber(v[2]), tonumber(v[3])
    if not (sw and sc and sp and sw == sw and sw < big and sw > -big and sc == sc and sc < big and sc > -big and sp == sp and sp < big and sp > -big) then sw = nil end
    local idx = floor(now / a)
    local c, p = 0, 0
    if sw and sc and sp then
      if sw >= idx then
        idx = sw; c = sc; p = sp
      elseif sw == idx - 1 then
        p = sc
      end
    end
    -- e is negative while TIME lags the stored window: the waits include
    -- the lag, and the previous window weighs in whole.
    local e = now - idx * a
    local ew = e
    if ew < 0 then ew = 0 end
    local used = p * (a - ew) + c * a
    local cap = b * a
    mark = idx
    if refund then
      -- To the window the admission was counted in: the current one, or
      -- the previous one since.
      if sw and sc and sp then
        local aw = tonumber(ARGV[j + 4])
        if sw == aw then
          redis.call('HSET', key, 'c', math.max(sc - cost, 0))
        elseif sw == aw + 1 then
          redis.call('HSET', key, 'p', math.max(sp - cost, 0))
        end
      end
    elseif used + cost * a <= cap then
      allowed = 1
      c = c + cost
      used = used + cost * a
      remaining = floor((cap - used) / a)
      reset = 2 * a - e
      if single then s1, s2, s3, st = idx, c, p, reset else w1[i], w2[i], w3[i], wt[i] = idx, c, p, reset end
    else
      if cap > used then remaining = floor((cap - used) / a) end
      if c > 0 then reset = 2 * a - e else reset = a - e end
      if c + cost <= b then
        retry = a - floor((b - c - cost) * a / p) - e
      else
        retry = (a - e) + a - floor((b - cost) * a / c)
      end
    end
  else
    local nb = tonumber(string.sub(alg, 2))` + loadRing + `
    mark = head
    if refund then
      -- To the bucket the admission was counted in, while it is in the
      -- window.
      local k = tonumber(ARGV[j + 4])
      if v and k <= head and head - k < nb and cnt[k % nb] > 0 then
        local give = cnt[k % nb]
        if give > cost then give = cost end
        cnt[k % nb] = cnt[k % nb] - give` + saveRing + `
      end
    elseif total + cost <= b then
      allowed = 1
      cnt[head % nb] = cnt[head % nb] + cost
      total = total + cost
      remaining = b - total` + packRing + `
      reset = life
      if single then s1, st = packed, life else w1[i], wt[i] = packed, life end
    else
      remaining = b - total` + waitRing + `
    end
  end
  if allowed == 0 then ok = false end
  reply = fmt('%d %d %d %d %d', allowed, remaining, reset, retry, mark)
  if not single then out[i] = reply end
end

if refund then return '' end
if not ok then
  if single then return reply end
  return table.concat(out, ' ')
end
if single then
  local alg, key = ARGV[2], KEYS[1]
  local ttl = floor((st + 999) / 1000)
  if alg == 'g' then
    redis.call('SET', key, s1, 'PX', ttl)
  elseif alg == 't' then
    redis.call('HSET', key, 'k', s1, 'l', s2)
    redis.call('PEXPIRE', key, ttl)
  elseif alg == 'f' then
    redis.call('HSET', key, 'w', s1, 'n', s2)
    redis.call('PEXPIRE', key, ttl)
  elseif alg == 's' then
    redis.call('HSET', key, 'w', s1, 'c', s2, 'p', s3)
    redis.call('PEXPIRE', key, ttl)
  else
    redis.call('SET', key, s1, 'PX', ttl)
  end
  return reply
end
for i = 1, n do
  local alg, key = ARGV[i * 5 - 3], KEYS[i]
  local ttl = floor((wt[i] + 999) / 1000)
  if alg == 'g' then
    redis.call('SET', key, w1[i], 'PX', ttl)
  elseif alg == 't' then
    redis.call('HSET', key, 'k', w1[i], 'l', w2[i])
    redis.call('PEXPIRE', key, ttl)
  elseif alg == 'f' then
    redis.call('HSET', key, 'w', w1[i], 'n', w2[i])
    redis.call('PEXPIRE', key, ttl)
  elseif alg == 's' then
    redis.call('HSET', key, 'w', w1[i], 'c', w2[i], 'p', w3[i])
    redis.call('PEXPIRE', key, ttl)
  else
    redis.call('SET', key, w1[i], 'PX', ttl)
  end
end
return table.concat(out, ' ')
`

// decideScript is decideSrc, run by runScript.
var decideScript = newScript(decideSrc)

// The admission of a limiter with one limit runs a script of its algorithm
// alone: the same decision as decideSrc's, without its loop over limits,
// its refund mode and its second pass to write. Redis spends about 4µs on
// the GCRA one against 5.6µs on decideSrc (Redis 7.0, INFO commandstats).
//
// KEYS[1] is the state; ARGV is the period parameter, the quota and the
// cost, as in decideSrc; the reply is decideSrc's for one limit, the
// admission's mark included.
const singlePrologue = `
if not redis.REDIS_VERSION_NUM then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local floor, fmt = math.floor, string.format
local big = 9007199254740992 -- 2^53: a stored number past it, nan or inf, is no state
local a, b, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local key = KEYS[1]
`

// The fragments that read a limit's state in the scripts of one algorithm,
// from key, on Redis's clock (now), with the period parameter a and the
// quota b.
const (
	loadTAT = `
local tat = tonumber(redis.pcall('GET', key))
if not (tat and tat == tat and tat < big and tat > -big) then tat = now end
if tat < now then tat = now end
`
	loadTokens = `
local v = redis.pcall('HMGET', key, 'k', 'l')
if v.err then redis.call('DEL', key); v = {} end
local sk, sl = tonumber(v[1]), tonumber(v[2])
if not (sk and sl and sk == sk and sk < big and sk > -big and sl == sl and sl < big and sl > -big) then sk = nil end
local tokens, last = b, now
if sk and sl then tokens = b - sk; last = sl end
if now > last then
  local add = floor((now - last) / a)
  if add > 0 then tokens = tokens + add; last = last + add * a end
  if tokens >= b then tokens = b; last = now end
end
local el = now - last -- negative while TIME lags the stored refill
`
	loadFixed = `
local v = redis.pcall('HMGET', key, 'w', 'n')
if v.err then redis.call('DEL', key); v = {} end
local sw, sn = tonumber(v[1]), tonumber(v[2])
if not (sw and sn and sw == sw and sw < big and sw > -big and sn == sn and sn < big and sn > -big) then sw = nil end
local idx = floor(now / a)
local cnt = 0
if sw and sn and sw >= idx then idx = sw; cnt = sn end
local left = (idx + 1) * a - now
`
	loadSliding = `
local v = redis.pcall('HMGET', key, 'w', 'c', 'p')
if v.err then redis.call('DEL', key); v = {} end
local sw, sc, sp = tonumber(v[1]), tonumber(v[2]), tonumber(v[3])
if not (sw and sc and sp and sw == sw and sw < big and sw > -big and sc == sc and sc < big and sc > -big and sp == sp and sp < big and sp > -big) then sw = nil end
local idx = floor(now / a)
local c, p = 0, 0
if sw and sc and sp then
  if sw >= idx then
    idx = sw; c = sc; p = sp
  elseif sw == idx - 1 then
    p = sc
  end
end
local e = now - idx * a -- negative while TIME lags the stored window
local ew = e
if ew < 0 then ew = 0 end
`
	// rejectSliding, within a script of the sliding window after
	// loadSliding, makes rejection the reply to a request of cost that the
	// weighted count used leaves no room for under cap. It is text put in
	// place, not a Lua function: a closure made on every call costs Redis
	// about 1 µs.
	rejectSliding = `
local remaining, reset, retry = 0, a - e, 0
if cap > used then remaining = floor((cap - used) / a) end
if c > 0 then reset = 2 * a - e end
if c + cost <= b then
  retry = a - floor((b - c - cost) * a / p) - e
else
  retry = (a - e) + a - floor((b - cost) * a / c)
end
local rejection = fmt('0 %d %d %d %d', remaining, reset, retry, idx)
`
)

var singleScripts = map[byte]*script{
	'g': newScript(singlePrologue + loadTAT + `
local nt = tat + cost * a
local cap = b * a
if nt - cap > now then
  return fmt('0 %d %d %d %d', floor((cap - tat + now) / a), tat - now, nt - cap - now, now)
end
redis.call('SET', key, nt, 'PX', floor((nt - now + 999) / 1000))
return fmt('1 %d %d 0 %d', floor((cap - nt + now) / a), nt - now, now)
`),
	't': newScript(singlePrologue + loadTokens + `
if tokens >= cost then
  tokens = tokens - cost
  local reset = (b - tokens) * a - el
  redis.call('HSET', key, 'k', b - tokens, 'l', last)
  redis.call('PEXPIRE', key, floor((reset + 999) / 1000))
  return fmt('1 %d %d 0 %d', tokens, reset, now)
end
return fmt('0 %d %d %d %d', tokens, (b - tokens) * a - el, (cost - tokens) * a - el, now)
`),
	'f': newScript(singlePrologue + loadFixed + `
if cnt + cost <= b then
  cnt = cnt + cost
  redis.call('HSET', key, 'w', idx, 'n', cnt)
  redis.call('PEXPIRE', key, floor((left + 999) / 1000))
  return fmt('1 %d %d 0 %d', b - cnt, left, idx)
end
return fmt('0 %d %d %d %d', b - cnt, left, left, idx)
`),
	's': newScript(singlePrologue + loadSliding + `
local used = p * (a - ew) + c * a
local cap = b * a
if used + cost * a <= cap then
  c = c + cost
  used = used + cost * a
  local reset = 2 * a - e
  redis.call('HSET', key, 'w', idx, 'c', c, 'p', p)
  redis.call('PEXPIRE', key, floor((reset + 999) / 1000))
  return fmt('1 %d %d 0 %d', floor((cap - used) / a), reset, idx)
end` + rejectSliding + `
return rejection
`),
}

// The admissions of one key that queued while a call for it was in flight
// (see coalesce.go) go to Redis together, in the batch script of their
// algorithm: it reads the state and TIME once, decides the requests in the
// order they queued as that many calls of the one-limit script would at
// that instant, and writes once, when one of them was admitted.
//
// KEYS[1] is the state; ARGV is the period parameter and the quota, then the
// cost of each request; the reply is the one-limit script's five integers
// for each request, in order.
const batchPrologue = `
if not redis.REDIS_VERSION_NUM then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local floor, fmt = math.floor, string.format
local big = 9007199254740992 -- 2^53: a stored number past it, nan or inf, is no state
local a, b = tonumber(ARGV[1]), tonumber(ARGV[2])
local key = KEYS[1]
local out, wrote = {}, false
`

var batchScripts = map[byte]*script{
	'g': newScript(batchPrologue + loadTAT + `
local cap = b * a
for i = 3, #ARGV do
  local nt = tat + tonumber(ARGV[i]) * a
  if nt - cap > now then
    out[i - 2] = fmt('0 %d %d %d %d', floor((cap - tat + now) / a), tat - now, nt - cap - now, now)
  else
    tat, wrote = nt, true
    out[i - 2] = fmt('1 %d %d 0 %d', floor((cap - nt + now) / a), nt - now, now)
  end
end
if wrote then redis.call('SET', key, tat, 'PX', floor((tat - now + 999) / 1000)) end
return table.concat(out, ' ')
`),
	't': newScript(batchPrologue + loadTokens + `
for i = 3, #ARGV do
  local cost = tonumber(ARGV[i])
  if tokens >= cost then
    tokens, wrote = tokens - cost, true
    out[i - 2] = fmt('1 %d %d 0 %d', tokens, (b - tokens) * a - el, now)
  else
    out[i - 2] = fmt('0 %d %d %d %d', tokens, (b - tokens) * a - el, (cost - tokens) * a - el, now)
  end
end
if wrote then
  redis.call('HSET', key, 'k', b - tokens, 'l', last)
  redis.call('PEXPIRE', key, floor(((b - tokens) * a - el + 999) / 1000))
end
return table.concat(out, ' ')
`),
	'f': newScript(batchPrologue + loadFixed + `
for i = 3, #ARGV do
  local cost = tonumber(ARGV[i])
  if cnt + cost <= b then
    cnt, wrote = cnt + cost, true
    out[i - 2] = fmt('1 %d %d 0 %d', b - cnt, left, idx)
  else
    out[i - 2] = fmt('0 %d %d %d %d', b - cnt, left, left, idx)
  end
end
if wrote then
  redis.call('HSET', key, 'w', idx, 'n', cnt)
  redis.call('PEXPIRE', key, floor((left + 999) / 1000))
end
return table.concat(out, ' ')
`),
	's': newScript(batchPrologue + loadSliding + `
local cap = b * a
for i = 3, #ARGV do
  local cost = tonumber(ARGV[i])
  local used = p * (a - ew) + c * a
  if used + cost * a <= cap then
    c, wrote = c + cost, true
    out[i - 2] = fmt('1 %d %d 0 %d', floor((cap - used - cost * a) / a), 2 * a - e, idx)
  else` + rejectSliding + `
    out[i - 2] = rejection
  end
end
if wrote then
  redis.call('HSET', key, 'w', idx, 'c', c, 'p', p)
  redis.call('PEXPIRE', key, floor((2 * a - e + 999) / 1000))
end
return table.concat(out, ' ')
`),
}

// script is a Lua script of the limiters: its source and its SHA-1.
type script struct {
	src, hash string
}

func newScript(src string) *script {
	return &script{src: src, hash: redis.NewScript(src).Hash()}
}

// Run runs the script as EVALSHA, and as EVAL when the server does not know
// it (after a restart or SCRIPT FLUSH), each as a command that go-redis never
// sends twice (onceCmd): a script that ran before its connection broke must
// not run again and charge the request twice, whatever the client's
// MaxRetries and, for a Cluster, MaxRedirects. A Cluster's MOVED and ASK
// redirects, which come before the script runs, are still followed.
func (s *script) Run(ctx context.Context, c redis.UniversalClient, keys []string, args ...any) *redis.Cmd {
	cmd := s.cmd(ctx, "evalsha", s.hash, keys, args)
	_ = c.Process(ctx, onceCmd{cmd})
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd = s.cmd(ctx, "eval", s.src, keys, args)
		_ = c.Process(ctx, onceCmd{cmd})
	}
	return cmd
}

func (s *script) cmd(ctx context.Context, verb, body string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 3+len(keys)+len(args))
	a[0], a[1], a[2] = verb, body, len(keys)
	for i, k := range keys {
		a[3+i] = k
	}
	copy(a[3+len(keys):], args)
	return redis.NewCmd(ctx, a...)
}

// onceCmd is a command that go-redis must not send again after a failure
// that may have come after Redis ran it (a broken connection, a timeout).
type onceCmd struct{ *redis.Cmd }

// NoRetry reports true: go-redis retries the command only when it never
// reached the wire.
func (onceCmd) NoRetry() bool { return true }

// Clone keeps the clone a onceCmd.
func (c onceCmd) Clone() redis.Cmder { return onceCmd{c.Cmd.Clone().(*redis.Cmd)} }
