package redislimit

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluice-go/sluice"
	"github.com/sluice-go/sluice/ratelimit"
)

// maxRingBuckets bounds the buckets of a NewSlidingWindow: a decision walks
// the ring in Redis.
const maxRingBuckets = 256

// NewSlidingWindow returns a limiter that admits up to limit cost units per
// key in any buckets consecutive buckets of window/buckets each, a window
// sliding one bucket at a time, aligned on Redis time: per key, a ring of
// buckets counters. Its decisions (Remaining, Reset, RetryAfter) are those
// of ratelimit.NewSlidingWindow(limit, window, buckets) at Redis's instant.
// A unit counted at t leaves the window at the start of its bucket plus
// window. NewSlidingWindowWeighted keeps three numbers per key instead, and
// estimates.
//
// buckets is 1 to 256 (1 makes a fixed window); window is a whole number of
// microseconds that buckets divides into whole microseconds.
func NewSlidingWindow(client redis.UniversalClient, limit int64, window time.Duration, buckets int, opts ...Option) (*Limiter, error) {
	l, err := buildRing(client, limit, window, buckets, opts)
	if err == nil {
		l.limits[0].remake = func(n int64, w time.Duration) (*Limiter, error) {
			return buildRing(client, n, w, buckets, opts)
		}
	}
	return l, err
}

func buildRing(client redis.UniversalClient, limit int64, window time.Duration, buckets int, opts []Option) (*Limiter, error) {
	const algorithm = "sliding-window"
	switch {
	case limit < 1 || limit > maxExact:
		return nil, fmt.Errorf("redislimit: %s: limit %d must be 1 to 2^52", algorithm, limit)
	case buckets < 1 || buckets > maxRingBuckets:
		return nil, fmt.Errorf("redislimit: %s: %d buckets, want 1 to %d", algorithm, buckets, maxRingBuckets)
	case window < time.Microsecond || window%(time.Duration(buckets)*time.Microsecond) != 0:
		return nil, fmt.Errorf("redislimit: %s: window %v must be a positive whole number of microseconds that %d buckets divide into whole microseconds", algorithm, window, buckets)
	case int64(window/time.Microsecond) > maxExact/4:
		return nil, fmt.Errorf("redislimit: %s: window %v is longer than 2^50µs", algorithm, window)
	}
	cfg := defaultConfig(algorithm)
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	share := func() (sluice.Policy, error) {
		return ratelimit.NewSlidingWindow(max(limit/cfg.instances, 1), window, buckets, ratelimit.WithName(cfg.name+":local"))
	}
	bucket := int64(window/time.Microsecond) / int64(buckets)
	alg := "b" + strconv.Itoa(buckets)
	return build(client, cfg, alg, bucket, limit, windowOf(alg, bucket), share)
}

// The state of a ring of buckets is one string per key: the index of the
// newest bucket (Redis time in µs divided by the bucket's length a), then
// the counts of the nb buckets, bucket k at position k mod nb. The fragments
// below are text put in place in the scripts (see rejectSliding).
const (
	// loadRing reads the ring of key and moves it forward to the bucket of
	// now, emptying the buckets that left the window, as
	// ratelimit.SlidingWindow does; while TIME lags the stored bucket, the
	// newest bucket counts. It sets v (the stored state; false for none, or
	// a key of another type, read as none), head, cnt (0-based) and total.
	loadRing = `
local cnt, total = {}, 0
local head = floor(now / a)
for i = 0, nb - 1 do cnt[i] = 0 end
local v = redis.pcall('GET', key)
if type(v) ~= 'string' then v = false end -- none, or a key of another type
if v then
  local i, sh = -1, 0
  for x in string.gmatch(v, '%d+') do
    if i < 0 then sh = tonumber(x) elseif i < nb then cnt[i] = tonumber(x) end
    i = i + 1
  end
  if sh >= big then sh = head - nb end -- no bucket of this era: none
  if head <= sh then
    head = sh
  elseif head - sh >= nb then
    for i = 0, nb - 1 do cnt[i] = 0 end
  else
    for k = sh + 1, head do cnt[k % nb] = 0 end
  end
  for i = 0, nb - 1 do total = total + cnt[i] end
end
`
	// waitRing sets reset, the time until every counted unit has left the
	// window, and retry, until enough have left for cost more.
	waitRing = `
reset, retry = 0, 0
for k = head, head - nb + 1, -1 do
  if cnt[k % nb] > 0 then reset = (k + nb) * a - now; break end
end
local need, freed = total + cost - b, 0
for k = head - nb + 1, head do
  freed = freed + cnt[k % nb]
  if freed >= need then retry = (k + nb) * a - now; break end
end
`
	// packRing sets packed, the ring as stored, and life, the time until
	// its newest bucket leaves the window (µs).
	packRing = `
local parts = {fmt('%d', head)}
for i = 0, nb - 1 do parts[i + 2] = fmt('%d', cnt[i]) end
local packed, life = table.concat(parts, ' '), (head + nb) * a - now
`
	saveRing = packRing + `
redis.call('SET', key, packed, 'PX', floor((life + 999) / 1000))
`
)

// ringScripts are the one-limit and batch scripts of a ring, by its number
// of buckets.
var ringScripts sync.Map // string → [2]*script

// bucketScripts returns the one-limit and batch scripts of a ring of n
// buckets (n in decimal).
func bucketScripts(n string) (single, batch *script) {
	if s, ok := ringScripts.Load(n); ok {
		p := s.([2]*script)
		return p[0], p[1]
	}
	nb := "local nb = " + n + "\n"
	single = newScript(singlePrologue + nb + loadRing + `
if total + cost <= b then
  cnt[head % nb] = cnt[head % nb] + cost
  total = total + cost` + saveRing + `
  return fmt('1 %d %d 0 %d', b - total, life, head)
end
local reset, retry` + waitRing + `
return fmt('0 %d %d %d %d', b - total, reset, retry, head)
`)
	batch = newScript(batchPrologue + nb + loadRing + `
for i = 3, #ARGV do
  local cost = tonumber(ARGV[i])
  if total + cost <= b then
    cnt[head % nb] = cnt[head % nb] + cost
    total, wrote = total + cost, true
    out[i - 2] = fmt('1 %d %d 0 %d', b - total, (head + nb) * a - now, head)
  else
    local reset, retry` + waitRing + `
    out[i - 2] = fmt('0 %d %d %d %d', b - total, reset, retry, head)
  end
end
if wrote then` + saveRing + `end
return table.concat(out, ' ')
`)
	p, _ := ringScripts.LoadOrStore(n, [2]*script{single, batch})
	s := p.([2]*script)
	return s[0], s[1]
}
