-- quotagate algorithms for Redis. This file mirrors core/algorithms.go:
-- eval, commit, refund and expiry compute the same integers, so a decision
-- taken here and one taken by the memory store agree exactly.
--
-- Numbers are Lua doubles. Every value the algorithms form stays below 2^53
-- (core validates limits for that), so sums, differences and products are
-- exact; divisions go through fdiv, which corrects the rounded quotient to
-- the exact floor. Integers cross the script boundary as little-endian
-- 8-byte integers (struct '<i8'), never as floats or decimal text.
--
-- State lives in one key per (budget, partition):
--   fixed_window, sliding_window, token_bucket, leaky_bucket: a 40-byte
--     string of five '<i8' integers: algorithm, window (µs), and the a, b, c
--     fields of core's state;
--   sliding_log: a hash with fields t ("<algorithm>:<window µs>"), s (sum of
--     the entries), l (index of the oldest entry), h (one past the newest),
--     and one field per entry, named by its index, holding "<ts> <n>".
-- The stored algorithm and window make a changed algorithm or window start
-- from an empty state, as the memory store does. Every write sets the key's
-- TTL to the time until the state is equivalent to an empty one (ceil to
-- ms), or deletes the key when that time has already come.

local FIXED, SLIDING, LOG, TOKEN, LEAKY = 0, 1, 2, 3, 4
local floor = math.floor
local fmt = string.format
local smatch = string.match

-- fdiv returns floor(a/b) for b > 0, exactly: the double quotient is off by
-- at most one, which the remainder check corrects.
local function fdiv(a, b)
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then
    q = q - 1
  elseif r >= b then
    q = q + 1
  end
  return q
end

local function cdiv(a, b)
  return -fdiv(-a, b)
end

local function max(a, b)
  if a > b then return a end
  return b
end

local function min(a, b)
  if a < b then return a end
  return b
end

-- minttl is a floor (ms) for TTLs, 0 unless a test injects it with the
-- time (see clock).
local minttl = 0

-- clock returns now in µs: the server's TIME when arg is '', otherwise the
-- injected "<now µs>" or "<now µs>,<TTL floor ms>" of a test clock.
local function clock(arg)
  if arg == '' then
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  local now, floor_ms = smatch(arg, '^(%-?%d+),?(%d*)$')
  if now == nil then
    error('quotagate: bad time argument')
  end
  if floor_ms ~= '' then minttl = tonumber(floor_ms) end
  return tonumber(now)
end

-- ttl_ms returns the TTL (ms) of a state equivalent to an empty one from
-- exp (µs): ceil((exp-now)/1000), or 0 when that time has come.
local function ttl_ms(exp, now)
  local ttl = cdiv(exp - now, 1000)
  if ttl > 0 and ttl < minttl then ttl = minttl end
  return ttl
end

---------------------------------------------------------------------------
-- Sliding log storage: a ring of entries in a hash, oldest at index l.

local function log_entry(g, i)
  local e = g.cache[i]
  if e == nil then
    local v = redis.call('HGET', g.key, fmt('%d', i))
    local ts, n = smatch(v, '^(%-?%d+) (%d+)$')
    e = {tonumber(ts), tonumber(n)}
    g.cache[i] = e
  end
  return e[1], e[2]
end

local function log_set(g, i, ts, n)
  g.cache[i] = {ts, n}
  redis.call('HSET', g.key, fmt('%d', i), fmt('%d %d', ts, n))
end

-- log_read returns the log stored at key under tag, or nil when the key
-- holds nothing (or another algorithm's or window's state).
local function log_read(key, tag)
  local v = redis.pcall('HMGET', key, 't', 's', 'l', 'h')
  if type(v) == 'table' and v[1] == tag then
    return {key = key, sum = tonumber(v[2]), l = tonumber(v[3]), h = tonumber(v[4]), cache = {}}
  end
  return nil
end

local function log_save_meta(g)
  redis.call('HSET', g.key, 's', fmt('%d', g.sum), 'l', fmt('%d', g.l), 'h', fmt('%d', g.h))
end

-- log_prune drops entries that left the window ending at now: an entry at
-- ts counts while ts > now-window.
local function log_prune(g, now, w)
  local pruned = false
  while g.h > g.l do
    local ts, n = log_entry(g, g.l)
    if ts > now - w then break end
    redis.call('HDEL', g.key, fmt('%d', g.l))
    g.cache[g.l] = nil
    g.sum = g.sum - n
    g.l = g.l + 1
    pruned = true
  end
  if pruned then log_save_meta(g) end
end

-- log_newest returns the newest entry's timestamp, or nil.
local function log_newest(g)
  if g == nil or g.h <= g.l then return nil end
  local ts = log_entry(g, g.h - 1)
  return ts
end

---------------------------------------------------------------------------
-- State of the counter algorithms: a, b, c as in core's state.

local STATE = '<i8i8i8i8i8'

-- counter_read returns the state at key, or an empty one when the key
-- holds nothing (or another algorithm's or window's state).
local function counter_read(key, alg, w)
  local v = redis.pcall('GET', key)
  if type(v) == 'string' and #v == 40 then
    local salg, sw, a, b, c = struct.unpack(STATE, v)
    if salg == alg and sw == w then
      return a, b, c
    end
  end
  return 0, 0, 0
end

-- counter_write stores a, b, c until exp (µs), or deletes the key when the
-- state is already equivalent to an empty one.
local function counter_write(key, alg, w, a, b, c, exp, now)
  local ttl = ttl_ms(exp, now)
  if ttl > 0 then
    redis.call('SET', key, struct.pack(STATE, alg, w, a, b, c), 'PX', fmt('%d', ttl))
  else
    redis.call('DEL', key)
  end
end

-- log_tag is the algorithm and window a sliding log's hash is stored with.
local function log_tag(alg, w)
  return fmt('%d:%d', alg, w)
end

local function expiry(alg, w, a)
  if alg == FIXED then
    return a + w
  elseif alg == SLIDING then
    return (a + 2 * fdiv(w, 1000)) * 1000
  end
  return a -- token and leaky bucket
end

---------------------------------------------------------------------------
-- eval computes the outcome of spending cost at now from the state (a, b,
-- c, or the log g for a sliding log): allowed, remaining, reset, retry,
-- delay (µs), and the state after that charge, na, nb, nc. It mirrors
-- core's eval.

local function eval(alg, w, q, burst, maxwait, cost, now, a, b, c, g)
  local allowed, remaining, reset, retry, delay = false, 0, 0, 0, 0
  local na, nb, nc = 0, 0, 0

  if alg == FIXED then
    local ws, count
    if a <= now and now < a + w then
      ws, count = a, b -- still in the stored window
    else
      ws, count = fdiv(now, w) * w, 0
    end
    local rst = ws + w - now
    reset = rst
    if count + cost <= q then
      allowed = true
      remaining = q - count - cost
      na, nb = ws, count + cost
    else
      remaining = max(0, q - count)
      retry = rst
    end

  elseif alg == SLIDING then
    local nowMS = fdiv(now, 1000)
    local wm = fdiv(w, 1000)
    local ws = fdiv(nowMS, wm) * wm
    local curr, prev = 0, 0
    if a == ws then
      curr, prev = b, c
    elseif a == ws - wm then
      prev = b
    end
    local rem = ws + wm - nowMS
    if prev * rem + (curr + cost) * wm <= q * wm then
      allowed = true
      curr = curr + cost
      remaining = max(0, fdiv(q * wm - prev * rem, wm) - curr)
      na, nb, nc = ws, curr, prev
    else
      remaining = max(0, fdiv(q * wm - prev * rem, wm) - curr)
      local wait
      local need = (q - curr - cost) * wm
      if need >= 0 and prev > 0 and fdiv(need, prev) > 0 then
        wait = rem - fdiv(need, prev)
      else
        wait = rem
        if curr > 0 then
          wait = wait + max(0, wm - fdiv((q - cost) * wm, curr))
        end
      end
      retry = wait * 1000
    end
    if curr > 0 then
      reset = (rem + wm) * 1000
    elseif prev > 0 then
      reset = rem * 1000
    end

  elseif alg == TOKEN or alg == LEAKY then
    local t = cdiv(w, q)
    local bw = burst * t
    local tat = max(a, now)
    local newTAT = tat + cost * t
    local allowAt = newTAT - bw
    if allowAt <= now then
      allowed = true
    elseif alg == LEAKY and allowAt - now <= maxwait then
      allowed = true
      delay = allowAt - now
    end
    if allowed then
      local d = newTAT - now
      -- Go's (bw-d)/t truncates; clamped at 0 it equals the floor.
      if bw - d > 0 then remaining = fdiv(bw - d, t) end
      reset = d
      na = newTAT
    else
      if bw - (tat - now) > 0 then remaining = fdiv(bw - (tat - now), t) end
      reset = tat - now
      local wait = allowAt - now
      if alg == LEAKY then wait = wait - maxwait end
      retry = wait
    end

  elseif alg == LOG then
    local used = 0
    if g ~= nil then
      log_prune(g, now, w)
      used = g.sum
    end
    if used + cost <= q then
      allowed = true
      remaining = q - used - cost
      reset = w -- the entry just added is the newest
    else
      remaining = max(0, q - used)
      local newest = log_newest(g)
      if newest ~= nil then
        reset = newest + w - now
        -- Wait until enough of the oldest entries leave the window.
        local excess = used + cost - q
        local i = g.l
        while i < g.h do
          local ts, n = log_entry(g, i)
          excess = excess - n
          if excess <= 0 then
            retry = ts + w - now
            break
          end
          i = i + 1
        end
      end
    end

  end
  return allowed, remaining, reset, retry, delay, na, nb, nc
end

-- load reads the state of one item: a, b, c, or the log g.
local function load(key, alg, w)
  if alg == LOG then
    return 0, 0, 0, log_read(key, log_tag(alg, w))
  end
  local a, b, c = counter_read(key, alg, w)
  return a, b, c, nil
end

-- log_write stores g's metadata with the TTL of core's expiry, or deletes
-- the key when the log is empty.
local function log_write(g, alg, w, now)
  local newest = log_newest(g)
  local ttl = 0
  if newest ~= nil then ttl = ttl_ms(newest + w, now) end
  if ttl > 0 then
    redis.call('HSET', g.key, 't', log_tag(alg, w), 's', fmt('%d', g.sum), 'l', fmt('%d', g.l), 'h', fmt('%d', g.h))
    redis.call('PEXPIRE', g.key, fmt('%d', ttl))
  else
    redis.call('DEL', g.key)
  end
end

-- commit stores the state after charging cost at now (na, nb, nc from
-- eval; g, the log eval saw), with the TTL of core's expiry. It mirrors
-- core's commit, and returns 1 when it added a sliding log entry (rather
-- than adding to the newest one), 0 otherwise.
local function commit(key, alg, w, cost, now, na, nb, nc, g)
  if alg ~= LOG then
    counter_write(key, alg, w, na, nb, nc, expiry(alg, w, na), now)
    return 0
  end
  if g == nil then
    redis.call('DEL', key) -- another algorithm's state, or nothing
    g = {key = key, sum = 0, l = 0, h = 0, cache = {}}
  end
  local merged = true
  if cost > 0 then
    merged = false
    if g.h > g.l then
      local ts, n = log_entry(g, g.h - 1)
      if ts == now then
        log_set(g, g.h - 1, ts, n + cost)
        merged = true
      end
    end
    if not merged then
      log_set(g, g.h, now, cost)
      g.h = g.h + 1
    end
    g.sum = g.sum + cost
  end
  log_write(g, alg, w, now)
  if merged then return 0 end
  return 1
end

-- refund gives back cost charged at stamp (µs), as core's refund does. It
-- never creates a key.
--
-- undo is 1 to take back a sliding log entry that the take added (commit
-- returned 1) when it is still the newest and holds only this charge,
-- instead of leaving it with a count of 0: the Store undoes a cluster
-- take's charges this way when another group of the take denied, so that
-- the log is as if the take had never happened.
local function refund(key, alg, w, q, cost, stamp, now, undo)
  if alg == LOG then
    local g = log_read(key, log_tag(alg, w))
    if g == nil then return end
    -- Search from the newest entry; entries are in time order, so stop at
    -- the first older than stamp.
    local i = g.h - 1
    while i >= g.l do
      local ts, n = log_entry(g, i)
      if ts == stamp then
        local take = min(cost, n)
        g.sum = g.sum - take
        if undo == 1 and i == g.h - 1 and n == cost then
          redis.call('HDEL', key, fmt('%d', i))
          g.cache[i] = nil
          g.h = i
          log_write(g, alg, w, now)
        else
          log_set(g, i, ts, n - take)
          redis.call('HSET', key, 's', fmt('%d', g.sum))
        end
        return
      end
      if ts < stamp then return end
      i = i - 1
    end
    return
  end
  local v = redis.pcall('GET', key)
  if type(v) ~= 'string' or #v ~= 40 then return end
  local salg, sw, a, b, c = struct.unpack(STATE, v)
  if salg ~= alg or sw ~= w then return end
  if alg == FIXED then
    if fdiv(stamp, w) * w ~= a then return end
    b = max(0, b - cost)
  elseif alg == SLIDING then
    local wm = fdiv(w, 1000)
    local ws = fdiv(fdiv(stamp, 1000), wm) * wm
    if ws == a then
      b = max(0, b - cost)
    elseif ws == a - wm then
      c = max(0, c - cost)
    else
      return
    end
  else
    a = a - cost * cdiv(w, q)
  end
  counter_write(key, alg, w, a, b, c, expiry(alg, w, a), now)
end
