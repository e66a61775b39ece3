-- lease: charge one budget of one partition up to `want` units at once,
-- for an instance to spend locally (see lease.go). It evaluates with
-- algorithms.lua's eval, so a lease of n units is exactly a take of cost
-- n: the units are charged when leased, before anyone spends them.
--
-- KEYS[1]  the partition's record key
-- ARGV[1]  the call, one string: flags (B, 0), then struct
--          '<sBi8i8i8i8i8i8i8': the budget's record name,
--          algorithm (fixed window, sliding window or token bucket),
--          window µs, quota, burst, cost (what the request that asks for
--          the lease spends, 0 for none), want (the lease's size, at least
--          cost), share, ttl µs
--
-- The grant n is the least of want (what the instance spends in ttl),
-- what is left (a cost-0 evaluation's remaining, which is the most one
-- charge can take) divided by share, and the part of want it spends
-- before the lease must end: the end of the
-- window for the window algorithms; for a token bucket the theoretical
-- arrival time before the charge, since units charged early and spent
-- later are what an exact bucket would have admitted only while its
-- backlog covers them (a bucket that refilled meanwhile would admit
-- them twice). When that leaves no unit above cost, or no time, n is
-- cost: a plain take. When what is left is below cost, the request is
-- denied and nothing is charged.
--
-- Returns '<i8' integers: now (µs), allowed (1 or 0), n (units charged,
-- 0 when denied), remaining (after the charge; when denied, the cost's
-- evaluation's), reset µs, wait µs (the retry-after of a denial, else 0),
-- and valid µs (how long after now the units may be spent; 0 when n is a
-- plain take).

local LITEM = '<sBi8i8i8i8i8i8i8'

local function lease_run(KEYS, ARGV)
  init()
  local blob = ARGV[1]
  if sbyte(blob, 1) ~= 0 then
    return redis.error_reply('quotagate: lease: malformed call')
  end
  local now, pos = servertime(), 2
  local name, alg, w, q, burst, cost, want, share, ttl
  name, alg, w, q, burst, cost, want, share, ttl, pos = sunpack(LITEM, blob, pos)
  if pos ~= #blob + 1 or #KEYS ~= 1 or not (alg == FIXED or alg == SLIDING or alg == TOKEN) or w < 1000 or w > 1125899906842624 or
    q < 1 or cost < 0 or want < cost or share < 1 or ttl < 0 or (alg == TOKEN and burst < 1) then
    return redis.error_reply('quotagate: lease: bad call')
  end
  reset()
  local key = KEYS[1]
  local P = part(key)
  local a, b, c, g = state(key, P, name, alg, w, false, now)
  local _, left = eval(alg, w, q, burst, 0, 0, now, a, b, c, g)
  local valid
  if alg == FIXED then
    valid = fixed_start(now, w) + w - now
  elseif alg == SLIDING then
    local _, wm, ws = sliding_window(now, w)
    valid = (ws + wm) * 1000 - now
  else
    valid = 0
    if g and a > now then valid = a - now end
  end
  if valid > ttl then valid = ttl end
  local n = fdiv(left, share)
  if n > want then n = want end
  -- want is what the instance spends in a TTL: a lease that must end
  -- sooner (its window ends) gets the share of it it can spend.
  if valid < ttl and ttl > 0 then
    local part = floor(want * valid / ttl)
    if part < n then n = part end
  end
  if valid <= 0 or n <= cost then n, valid = cost, 0 end
  local al, rm, rs, ry, _, na, nb, nc = eval(alg, w, q, burst, 0, n, now, a, b, c, g)
  if not al then
    if n > cost then
      return redis.error_reply('quotagate: lease: grant does not fit')
    end
    return struct.pack('<i8i8i8i8i8i8i8', now, 0, 0, rm, rs, ry, 0)
  end
  if n > 0 then
    commit(key, P, name, false, alg, w, n, now, na, nb, nc, g)
    flush(now)
  end
  return struct.pack('<i8i8i8i8i8i8i8', now, 1, n, rm, rs, 0, valid)
end
