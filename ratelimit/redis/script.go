package redislimit

import "github.com/redis/go-redis/v9"

// decideSrc is the script of every refund and of every admission by a
// limiter built by All (one-limit admissions run singleScripts, below): it
// reads Redis TIME, decides every limit of the request, and writes only when
// all of them admit.
//
// KEYS[i] is the state of limit i. ARGV[1] is the mode: "a" to admit, "r" to
// refund what an earlier admission took. Then four arguments per limit: the
// algorithm (g: GCRA, t: token bucket, f: fixed window, s: sliding window
// counter), its period parameter in microseconds (the emission interval, or
// the window), its quota (burst or limit) and the cost.
//
// The reply is one string of four integers per limit: allowed (0 or 1),
// remaining, reset and retry-after in microseconds. Numbers are Lua doubles
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
//
// Stored instants and window indexes only move forward: when TIME is behind
// them (a failover to a host whose clock lags), the stored value is kept.
const decideSrc = `
if not redis.REDIS_VERSION_NUM then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local floor, fmt = math.floor, string.format
local refund = ARGV[1] == 'r'
local n = #KEYS
local single = n == 1
local out, w1, w2, w3, wt
if not single then out, w1, w2, w3, wt = {}, {}, {}, {}, {} end
local s1, s2, s3, st, reply
local ok = true

for i = 1, n do
  local j = i * 4 - 2
  local alg, a, b, cost = ARGV[j], tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2]), tonumber(ARGV[j + 3])
  local key = KEYS[i]
  local allowed, remaining, reset, retry = 0, 0, 0, 0
  if alg == 'g' then
    local tat = tonumber(redis.call('GET', key)) or now
    if refund then
      if tat > now then
        local nt = tat - cost * a
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
    local v = redis.call('HMGET', key, 'k', 'l')
    local tokens, last = b, now
    if v[1] then tokens = tonumber(v[1]); last = tonumber(v[2]) end
    if now > last then
      local add = floor((now - last) / a)
      if add > 0 then tokens = tokens + add; last = last + add * a end
      if tokens >= b then tokens = b; last = now end
    end
    local el = now - last
    if el < 0 then el = 0 end
    if refund then
      if v[1] then
        tokens = tokens + cost
        if tokens > b then tokens = b end
        local full = (b - tokens) * a - el
        if full > 0 then
          redis.call('HSET', key, 'k', tokens, 'l', last)
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
      if single then s1, s2, st = tokens, last, reset else w1[i], w2[i], wt[i] = tokens, last, reset end
    else
      remaining = tokens
      reset = (b - tokens) * a - el
      retry = (cost - tokens) * a - el
    end
  elseif alg == 'f' then
    local v = redis.call('HMGET', key, 'w', 'n')
    local idx = floor(now / a)
    local cnt = 0
    if v[1] then
      local sw = tonumber(v[1])
      if sw >= idx then idx = sw; cnt = tonumber(v[2]) end
    end
    local left = (idx + 1) * a - now
    if refund then
      if cnt > 0 then
        cnt = cnt - cost
        if cnt < 0 then cnt = 0 end
        redis.call('HSET', key, 'n', cnt)
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
  else
    local v = redis.call('HMGET', key, 'w', 'c', 'p')
    local idx = floor(now / a)
    local c, p = 0, 0
    if v[1] then
      local sw = tonumber(v[1])
      if sw >= idx then
        idx = sw; c = tonumber(v[2]); p = tonumber(v[3])
      elseif sw == idx - 1 then
        p = tonumber(v[2])
      end
    end
    local e = now - idx * a
    if e < 0 then e = 0 end
    local used = p * (a - e) + c * a
    local cap = b * a
    if refund then
      if v[1] and tonumber(v[1]) >= idx - 1 then
        local sc = tonumber(v[2]) - cost
        if sc < 0 then sc = 0 end
        redis.call('HSET', key, 'c', sc)
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
  end
  if allowed == 0 then ok = false end
  reply = fmt('%d %d %d %d', allowed, remaining, reset, retry)
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
  else
    redis.call('HSET', key, 'w', s1, 'c', s2, 'p', s3)
    redis.call('PEXPIRE', key, ttl)
  end
  return reply
end
for i = 1, n do
  local alg, key = ARGV[i * 4 - 2], KEYS[i]
  local ttl = floor((wt[i] + 999) / 1000)
  if alg == 'g' then
    redis.call('SET', key, w1[i], 'PX', ttl)
  elseif alg == 't' then
    redis.call('HSET', key, 'k', w1[i], 'l', w2[i])
    redis.call('PEXPIRE', key, ttl)
  elseif alg == 'f' then
    redis.call('HSET', key, 'w', w1[i], 'n', w2[i])
    redis.call('PEXPIRE', key, ttl)
  else
    redis.call('HSET', key, 'w', w1[i], 'c', w2[i], 'p', w3[i])
    redis.call('PEXPIRE', key, ttl)
  end
end
return table.concat(out, ' ')
`

// decideScript is decideSrc as a go-redis Script: EVALSHA, with EVAL when
// the server answers NOSCRIPT (after a restart or SCRIPT FLUSH).
var decideScript = redis.NewScript(decideSrc)

// The admission of a limiter with one limit runs a script of its algorithm
// alone: the same decision as decideSrc's, without its loop over limits,
// its refund mode and its second pass to write. Redis spends about 4µs on
// the GCRA one against 5.6µs on decideSrc (Redis 7.0, INFO commandstats).
//
// KEYS[1] is the state; ARGV is the period parameter, the quota and the
// cost, as in decideSrc; the reply is decideSrc's for one limit.
const singlePrologue = `
if not redis.REDIS_VERSION_NUM then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local floor, fmt = math.floor, string.format
local a, b, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local key = KEYS[1]
`

var singleScripts = map[byte]*redis.Script{
	'g': redis.NewScript(singlePrologue + `
local tat = tonumber(redis.call('GET', key)) or now
if tat < now then tat = now end
local nt = tat + cost * a
local cap = b * a
if nt - cap > now then
  return fmt('0 %d %d %d', floor((cap - tat + now) / a), tat - now, nt - cap - now)
end
redis.call('SET', key, nt, 'PX', floor((nt - now + 999) / 1000))
return fmt('1 %d %d 0', floor((cap - nt + now) / a), nt - now)
`),
	't': redis.NewScript(singlePrologue + `
local v = redis.call('HMGET', key, 'k', 'l')
local tokens, last = b, now
if v[1] then tokens = tonumber(v[1]); last = tonumber(v[2]) end
if now > last then
  local add = floor((now - last) / a)
  if add > 0 then tokens = tokens + add; last = last + add * a end
  if tokens >= b then tokens = b; last = now end
end
local el = now - last
if el < 0 then el = 0 end
if tokens >= cost then
  tokens = tokens - cost
  local reset = (b - tokens) * a - el
  redis.call('HSET', key, 'k', tokens, 'l', last)
  redis.call('PEXPIRE', key, floor((reset + 999) / 1000))
  return fmt('1 %d %d 0', tokens, reset)
end
return fmt('0 %d %d %d', tokens, (b - tokens) * a - el, (cost - tokens) * a - el)
`),
	'f': redis.NewScript(singlePrologue + `
local v = redis.call('HMGET', key, 'w', 'n')
local idx = floor(now / a)
local cnt = 0
if v[1] then
  local sw = tonumber(v[1])
  if sw >= idx then idx = sw; cnt = tonumber(v[2]) end
end
local left = (idx + 1) * a - now
if cnt + cost <= b then
  cnt = cnt + cost
  redis.call('HSET', key, 'w', idx, 'n', cnt)
  redis.call('PEXPIRE', key, floor((left + 999) / 1000))
  return fmt('1 %d %d 0', b - cnt, left)
end
return fmt('0 %d %d %d', b - cnt, left, left)
`),
	's': redis.NewScript(singlePrologue + `
local v = redis.call('HMGET', key, 'w', 'c', 'p')
local idx = floor(now / a)
local c, p = 0, 0
if v[1] then
  local sw = tonumber(v[1])
  if sw >= idx then
    idx = sw; c = tonumber(v[2]); p = tonumber(v[3])
  elseif sw == idx - 1 then
    p = tonumber(v[2])
  end
end
local e = now - idx * a
if e < 0 then e = 0 end
local used = p * (a - e) + c * a
local cap = b * a
if used + cost * a <= cap then
  c = c + cost
  used = used + cost * a
  local reset = 2 * a - e
  redis.call('HSET', key, 'w', idx, 'c', c, 'p', p)
  redis.call('PEXPIRE', key, floor((reset + 999) / 1000))
  return fmt('1 %d %d 0', floor((cap - used) / a), reset)
end
local remaining, reset, retry = 0, a - e, 0
if cap > used then remaining = floor((cap - used) / a) end
if c > 0 then reset = 2 * a - e end
if c + cost <= b then
  retry = a - floor((b - c - cost) * a / p) - e
else
  retry = (a - e) + a - floor((b - cost) * a / c)
end
return fmt('0 %d %d %d', remaining, reset, retry)
`),
}
