-- quotagate algorithms for Redis. This file mirrors core/algorithms.go:
-- eval, commit and expiry (refund is in refund.lua) compute the same
-- integers, so a decision taken here and one taken by the memory store
-- agree exactly. take.lua and refund.lua are appended to it to make the
-- two scripts.
--
-- Numbers are Lua doubles. Every value the algorithms form stays below 2^53
-- (core validates limits for that), so sums, differences and products are
-- exact; divisions go through fdiv, which corrects the rounded quotient to
-- the exact floor. Integers cross the script boundary as little-endian
-- 8-byte integers (struct '<i8'), never as floats or decimal text.
--
-- State lives in one key per partition, <prefix>{<partition>}: a string
-- holding one record per budget (see records): its name, algorithm,
-- window (µs) and the a, b, c fields of core's state. A sliding log keeps
-- its entries in a hash of its own, <prefix>{<partition>}:<budget>, with
-- fields t ("<algorithm>:<window µs>"), s (sum of the entries), l (index of
-- the oldest entry), h (one past the newest), and one field per entry,
-- named by its index, holding "<ts> <n>"; its record in the partition's
-- key holds its expiry. The stored algorithm and window make a changed
-- algorithm or window start from an empty state, as the memory store does.
-- Every write sets a key's TTL to the time until its state is equivalent
-- to an empty one (for a partition's key: until the last of its records
-- is; ceil to ms), or keeps the key's TTL when that time is unchanged (see
-- flush), or deletes the key when that time has already come.
--
-- Every function defined here is created again on each run of the script,
-- so the sliding log's functions, which most decisions do not need, are
-- built on first use (sliding_log).

local FIXED, SLIDING, LOG, TOKEN, LEAKY = 0, 1, 2, 3, 4
local floor, max, min, fmt = math.floor, math.max, math.min, string.format

-- fdiv returns floor(a/b) for b > 0, exactly: the double quotient is off by
-- at most one, which the remainder check corrects. ceil(a/b) is
-- -fdiv(-a, b).
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
  local now, floor_ms = string.match(arg, '^(%-?%d+),?(%d*)$')
  if now == nil then
    error('quotagate: bad time argument')
  end
  if floor_ms ~= '' then minttl = tonumber(floor_ms) end
  return tonumber(now)
end

-- The TTL (ms) of a state that is equivalent to an empty one from exp (µs)
-- on is ceil((exp-now)/1000) = -fdiv(now-exp, 1000), or none when that time
-- has come (flush and the sliding log's write).

---------------------------------------------------------------------------
-- The sliding log: a ring of entries in a hash, oldest at index l. Its
-- functions are built by sliding_log() on first use.

local LOGLIB

local function sliding_log()
  if LOGLIB then return LOGLIB end
  local L = {}

  -- tag is the algorithm and window a log is stored with.
  function L.tag(w)
    return fmt('%d:%d', LOG, w)
  end

  -- entry returns the timestamp and units of entry i.
  function L.entry(g, i)
    local e = g.cache[i]
    if e == nil then
      local v = redis.call('HGET', g.key, i)
      local ts, n = string.match(v, '^(%-?%d+) (%d+)$')
      e = {tonumber(ts), tonumber(n)}
      g.cache[i] = e
    end
    return e[1], e[2]
  end

  function L.set(g, i, ts, n)
    g.cache[i] = {ts, n}
    redis.call('HSET', g.key, i, fmt('%d %d', ts, n))
  end

  -- read returns the log stored at key for window w, or nil when the key
  -- holds nothing (or another algorithm's or window's state).
  function L.read(key, w)
    local v = redis.pcall('HMGET', key, 't', 's', 'l', 'h')
    if type(v) == 'table' and v[1] == L.tag(w) then
      return {key = key, sum = tonumber(v[2]), l = tonumber(v[3]), h = tonumber(v[4]), cache = {}}
    end
    return nil
  end

  -- newest returns the newest entry's timestamp, or nil.
  function L.newest(g)
    if g == nil or g.h <= g.l then return nil end
    local ts = L.entry(g, g.h - 1)
    return ts
  end

  -- prune drops entries that left the window ending at now: an entry at
  -- ts counts while ts > now-window.
  function L.prune(g, now, w)
    local pruned = false
    while g.h > g.l do
      local ts, n = L.entry(g, g.l)
      if ts > now - w then break end
      redis.call('HDEL', g.key, g.l)
      g.cache[g.l] = nil
      g.sum = g.sum - n
      g.l = g.l + 1
      pruned = true
    end
    if pruned then
      redis.call('HSET', g.key, 's', g.sum, 'l', g.l, 'h', g.h)
    end
  end

  -- write stores g's metadata with the TTL of core's expiry (the newest
  -- entry's time plus the window), or deletes the key when g is empty.
  function L.write(g, w, now)
    local newest = L.newest(g)
    local ttl = 0
    if newest ~= nil then ttl = -fdiv(now - newest - w, 1000) end
    if ttl > 0 then
      if ttl < minttl then ttl = minttl end
      redis.call('HSET', g.key, 't', L.tag(w), 's', g.sum, 'l', g.l, 'h', g.h)
      redis.call('PEXPIRE', g.key, ttl)
    else
      redis.call('DEL', g.key)
    end
  end

  -- push records cost units charged at now, adding them to the newest
  -- entry when it has the same time (core's slidingLog.push), and returns
  -- 1 when it added an entry.
  function L.push(g, now, cost)
    if g.h > g.l then
      local ts, n = L.entry(g, g.h - 1)
      if ts == now then
        L.set(g, g.h - 1, ts, n + cost)
        g.sum = g.sum + cost
        return 0
      end
    end
    L.set(g, g.h, now, cost)
    g.h = g.h + 1
    g.sum = g.sum + cost
    return 1
  end

  LOGLIB = L
  return L
end

---------------------------------------------------------------------------
-- A partition's record: the states of its budgets, in the string at
-- <prefix>{<partition>}, parsed once per run into a flat table P:
--   P[1] false once the run changed P (it is then in DIRTY); P[2] the
--   expiry (µs) the key's TTL was last set for; P[3] the number of records
--   n; then 5 slots per record r at b = 3+5(r-1): P[b+1] budget name,
--   P[b+2] tag (window µs × 8 + algorithm), P[b+3..b+5] a, b, c (for a
--   sliding log: a = its expiry, the newest entry's time plus the window,
--   b = c = 0).
-- Stored as struct '<i8I2' (expiry, n) then n times 'si8i8i8i8' (name
-- zero-terminated, tag, a, b, c). Up to BIG records are unpacked and
-- packed by one struct call; more are handled a record at a time, since
-- Lua moves at most about 8000 values in one call.

local HEAD, REC, BIG = '<i8I2', 'si8i8i8i8', 1000
local FMT = {}
local function recfmt(n)
  local f = FMT[n]
  if f == nil then
    f = HEAD .. string.rep(REC, n)
    FMT[n] = f
  end
  return f
end

-- PARTS holds, by key, the records this run read or wrote; DIRTY lists
-- the keys whose records changed, written once by flush at the end of the
-- run.
local PARTS, DIRTY, NDIRTY = {}, {}, 0

-- records_big parses a value holding n > BIG records a record at a time,
-- and returns them as records does, or nil when v is not n records.
local function records_big(v, n)
  local e, _, pos = struct.unpack(HEAD, v)
  local P = {true, e, n}
  for b = 3, 5 * n - 2, 5 do
    P[b + 1], P[b + 2], P[b + 3], P[b + 4], P[b + 5], pos = struct.unpack('<' .. REC, v, pos)
  end
  if pos ~= #v + 1 then return nil end
  return P
end

-- pack_big packs P's n > BIG records a record at a time.
local function pack_big(P, n)
  local parts = {struct.pack(HEAD, P[2], n)}
  for b = 3, 5 * n - 2, 5 do
    parts[#parts + 1] = struct.pack('<' .. REC, P[b + 1], P[b + 2], P[b + 3], P[b + 4], P[b + 5])
  end
  return table.concat(parts)
end

-- records returns key's parsed records; v is the key's value when the
-- caller has read it (false for none), nil to read it here. A value that
-- is not a well-formed record reads as no records (and is overwritten by
-- the next write).
local function records(key, v)
  local P = PARTS[key]
  if P then return P end
  if v == nil then v = redis.pcall('GET', key) end
  if type(v) == 'string' and #v >= 10 then
    local lo, hi = string.byte(v, 9, 10) -- the record count, HEAD's n
    local n = lo + 256 * hi
    if n <= BIG then
      P = {pcall(struct.unpack, recfmt(n), v)}
      if not P[1] or P[4 + 5 * n] ~= #v + 1 then P = nil end
    else
      local ok
      ok, P = pcall(records_big, v, n)
      if not ok then P = nil end
    end
  end
  if P == nil then P = {true, 0, 0} end
  P[4 + 5 * P[3]] = nil
  PARTS[key] = P
  return P
end

-- find returns the slot before budget name's record in P, or nil.
local function find(P, name)
  for b = 3, 5 * P[3] - 2, 5 do
    if P[b + 1] == name then return b end
  end
  return nil
end

-- put stores a record for name in P (replacing its record, if any), and
-- marks key for flush.
local function put(key, P, name, tag, a, b, c)
  local r = find(P, name)
  if r == nil then
    local n = P[3] + 1
    P[3] = n
    r = 5 * n - 2
    P[r + 1] = name
  end
  P[r + 2], P[r + 3], P[r + 4], P[r + 5] = tag, a, b, c
  if P[1] then
    P[1] = false
    NDIRTY = NDIRTY + 1
    DIRTY[NDIRTY] = key
  end
end

-- expiry is core's expiry of a record (tag, a): the time (µs) from which
-- its state is equivalent to an empty one.
local function expiry(tag, a)
  local alg = tag % 8
  local w = (tag - alg) / 8
  if alg == FIXED then
    return a + w
  elseif alg == SLIDING then
    return (a + 2 * fdiv(w, 1000)) * 1000
  end
  return a -- token and leaky bucket: the TAT; sliding log: stored as is
end

-- flush writes every changed record set. Records whose state is already
-- equivalent to an empty one are dropped; the key's TTL is the time until
-- the last of its records expires (ceil to ms), or the key is deleted when
-- none is left. When that time is the one the key's TTL was set for, the
-- key keeps its TTL (SET KEEPTTL costs the server about half of SET PX): a
-- fixed or sliding window keeps its expiry for the whole window, and the
-- longest window of a partition usually sets its key's expiry.
local function flush(now)
  for d = 1, NDIRTY do
    local key = DIRTY[d]
    local P = PARTS[key]
    P[1] = true
    local n, top, live = P[3], 0, 0
    for b = 3, 5 * n - 2, 5 do
      local tag, e = P[b + 2], nil
      if tag % 8 == FIXED then
        e = P[b + 3] + tag / 8 -- expiry's fixed window, inline
      else
        e = expiry(tag, P[b + 3])
      end
      if e > now then
        live = live + 1
        if e > top then top = e end
      end
    end
    if live < n then -- drop the expired records
      local j = 3
      for b = 3, 5 * n - 2, 5 do
        if expiry(P[b + 2], P[b + 3]) > now then
          if j ~= b then
            P[j + 1], P[j + 2], P[j + 3], P[j + 4], P[j + 5] = P[b + 1], P[b + 2], P[b + 3], P[b + 4], P[b + 5]
          end
          j = j + 5
        end
      end
      for i = j + 1, 5 * n + 3 do P[i] = nil end
      P[3] = live
    end
    if live == 0 then
      P[2] = 0
      redis.call('DEL', key)
    else
      local keep = top == P[2]
      P[2] = top
      local v
      if live <= BIG then
        v = struct.pack(recfmt(live), unpack(P, 2, 5 * live + 3))
      else
        v = pack_big(P, live)
      end
      if keep then
        redis.call('SET', key, v, 'KEEPTTL')
      else
        local ttl = -fdiv(now - top, 1000)
        if ttl < minttl then ttl = minttl end
        redis.call('SET', key, v, 'PX', ttl)
      end
    end
  end
  NDIRTY = 0
end

-- state returns the state of budget name in P for algorithm alg and
-- window w (tag = w×8 + alg): a, b, c, and g, for a sliding log its log
-- (read from logkey), for the other algorithms true when P holds a state
-- of this algorithm and window. Anything else reads as an empty state (g
-- nil).
--
-- A sliding log's entries live in their own key (logkey), valid only while
-- the partition's record of the budget is a sliding log of this window:
-- a budget that changed algorithm or window starts afresh, as in core.
local function state(P, name, alg, w, logkey)
  local r = find(P, name)
  if r == nil or P[r + 2] ~= w * 8 + alg then return 0, 0, 0, nil end
  if alg == LOG then
    return 0, 0, 0, sliding_log().read(logkey, w)
  end
  return P[r + 3], P[r + 4], P[r + 5], true
end

-- log_written records in P the expiry of the sliding log g of budget name
-- after L.write stored it (0 when it is empty).
local function log_written(key, P, name, w, g)
  local newest, e = sliding_log().newest(g), 0
  if newest ~= nil then e = newest + w end
  put(key, P, name, w * 8 + LOG, e, 0, 0)
end

---------------------------------------------------------------------------
-- eval computes the outcome of spending cost at now from the state (a, b,
-- c, or the log g for a sliding log): allowed, remaining, reset, retry,
-- delay (µs), and the state after that charge, na, nb, nc. It mirrors
-- core's eval. take.lua inlines the fixed window's branch on its charging
-- paths: a change here must be made there too (the differential tests
-- compare both with core).

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
    -- nowMS = fdiv(now, 1000) and wm = fdiv(w, 1000), inline (this
    -- branch is on every sliding window's path, and Lua calls cost).
    local nowMS, wm = floor(now / 1000), floor(w / 1000)
    local r = now - nowMS * 1000
    if r < 0 then nowMS = nowMS - 1 elseif r >= 1000 then nowMS = nowMS + 1 end
    r = w - wm * 1000
    if r < 0 then wm = wm - 1 elseif r >= 1000 then wm = wm + 1 end
    local ws = fdiv(nowMS, wm) * wm
    local curr, prev = 0, 0
    if a == ws then
      curr, prev = b, c
    elseif a == ws - wm then
      prev = b
    end
    local rem = ws + wm - nowMS -- (0, wm]: the part of the previous window still covered
    if prev * rem + (curr + cost) * wm <= q * wm then
      allowed = true
      curr = curr + cost
      remaining = fdiv(q * wm - prev * rem, wm) - curr
      if remaining < 0 then remaining = 0 end
      na, nb, nc = ws, curr, prev
    else
      remaining = max(0, fdiv(q * wm - prev * rem, wm) - curr)
      -- Within this window the weight of prev decays; find the latest
      -- rem' with prev*rem' <= (q-curr-cost)*wm.
      local wait
      local need = (q - curr - cost) * wm
      if need >= 0 and prev > 0 and fdiv(need, prev) > 0 then
        wait = rem - fdiv(need, prev)
      else
        -- In the next window prev' = curr, curr' = 0: wait until
        -- curr*rem'' <= (q-cost)*wm.
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
    local t = -fdiv(-w, q)
    local bw = burst * t
    local tat = a -- max(a, now)
    if now > a then tat = now end
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
    local L = sliding_log()
    local used = 0
    if g ~= nil then
      L.prune(g, now, w)
      used = g.sum
    end
    if used + cost <= q then
      allowed = true
      remaining = q - used - cost
      reset = w -- the entry just added is the newest
    else
      remaining = max(0, q - used)
      local newest = L.newest(g)
      if newest ~= nil then
        reset = newest + w - now
        -- Wait until enough of the oldest entries leave the window.
        local excess = used + cost - q
        local i = g.l
        while i < g.h do
          local ts, n = L.entry(g, i)
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

-- commit stores the state after charging cost at now (na, nb, nc from
-- eval; g, the log state returned for a sliding log) in the partition's
-- records P (at key) or, for a sliding log, in logkey. It mirrors core's
-- commit, and returns 1 when it added a sliding log entry (rather than
-- adding to the newest one), 0 otherwise.
local function commit(key, P, name, logkey, alg, w, cost, now, na, nb, nc, g)
  if alg ~= LOG then
    put(key, P, name, w * 8 + alg, na, nb, nc)
    return 0
  end
  local L = sliding_log()
  if g == nil then
    redis.call('DEL', logkey) -- another log's entries, or nothing
    g = {key = logkey, sum = 0, l = 0, h = 0, cache = {}}
  end
  local added = 0
  if cost > 0 then added = L.push(g, now, cost) end
  L.write(g, w, now)
  log_written(key, P, name, w, g)
  return added
end
