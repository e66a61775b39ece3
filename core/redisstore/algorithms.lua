-- quotagate algorithms for Redis. This file mirrors the Go definitions in
-- internal/algorithm: eval, commit and expiry (refund is in refund.lua)
-- compute the same integers, so a decision taken here and one taken by
-- the memory store agree exactly. eval holds each algorithm's arithmetic
-- once: every path of take, lease and peek evaluates with it, and the
-- window helpers it uses (fixed_start, sliding_window) serve refund and
-- lease too. take.lua, refund.lua, lease.lua and peek.lua are appended to
-- it to make the scripts and the function library (store.go).
--
-- Numbers are Lua doubles. Every value the algorithms form stays below 2^53
-- (core validates limits for that), so sums, differences and products are
-- exact; divisions go through fdiv, which corrects the rounded quotient to
-- the exact floor. Integers cross the script boundary as little-endian
-- 8-byte integers (struct '<i8'), never as floats or decimal text.
--
-- State lives in one hash per partition, <prefix>{<partition>}#h, one
-- field per budget (see load): its algorithm, window (µs) and the a, b, c
-- fields of core's state. A sliding log keeps its entries in a hash of its
-- own, <prefix>{<partition>}:<budget>, with fields t ("<algorithm>:<window
-- µs>"), s (sum of the entries), l (index of the oldest entry), h (one past
-- the newest), and one field per entry, named by its index, holding "<ts>
-- <n>"; its record in the partition's hash holds its expiry. The stored
-- algorithm and window make a changed algorithm or window start from an
-- empty state, as the memory store does. Every write makes a key's TTL at
-- least the time until the written state is equivalent to an empty one
-- (ceil to ms; see flush), or deletes what is already equivalent to one.
--
-- The scripts are a Redis function library (take, refund_run, lease_run
-- and peek_run, see store.go), whose top level runs once, when the
-- library is loaded; on a server without functions they run as EVALSHA
-- scripts, whose top level runs on every call. Either way a run starts
-- with init, which binds the standard functions, and reads the server's
-- clock (servertime). The sliding
-- log's functions, which most decisions do not need, are built on first
-- use (sliding_log).

local FIXED, SLIDING, LOG, TOKEN, LEAKY, CONC = 0, 1, 2, 3, 4, 5
-- The standard functions the algorithms use, set by init: a function
-- library's top level, which runs when the library is loaded, cannot read
-- Lua's standard libraries.
local floor, max, min, fmt, sbyte, sunpack

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

-- The clock (from here to "end of the clock"): servertime returns the
-- server's time in µs, the one time every instance shares, and MINTTL is
-- the least TTL (ms) a key is given. The tests' library replaces exactly
-- these lines with a clock they drive (faketime_test.go); nothing on the
-- wire carries a time.
local MINTTL = 0

local function servertime()
  -- Arithmetic converts TIME's two decimal strings as tonumber does,
  -- without a call to it (about 3% of a lone decision's server
  -- instructions, BenchmarkServerTime).
  local t = redis.call('TIME')
  return t[1] * 1000000 + t[2]
end
-- end of the clock

-- pttl returns the TTL (ms) of a state that is equivalent to an empty one
-- from exp (µs) on, for exp > now: ceil((exp-now)/1000) =
-- -fdiv(now-exp, 1000), and at least MINTTL. When that time has come the
-- state gets no TTL: it is deleted instead (flush, the sliding log's
-- write).
local function pttl(exp, now)
  local ttl = -fdiv(now - exp, 1000)
  if ttl < MINTTL then ttl = MINTTL end
  return ttl
end

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

  -- open returns the log of a budget whose record r in the partition
  -- matched its algorithm and window: the log stored at key, or, when that
  -- key is gone while r says entries still count at now (Redis evicted
  -- the log's key and not the partition's), a log rebuilt from r of one
  -- entry, every unit r counted at the newest entry's time. A rebuilt log
  -- counts no entry for less time than it would have, so an eviction
  -- never lets more than the quota through in a window; it may deny
  -- until the newest entry leaves the window. L.write stores its entry.
  function L.open(key, w, r, now)
    local g = L.read(key, w)
    if g ~= nil or r[3] <= 0 or r[2] <= now then return g end
    return {key = key, sum = r[3], l = 0, h = 1, cache = {[0] = {r[2] - w, r[3]}}, rebuilt = true}
  end

  -- newest returns the newest entry's timestamp, or nil.
  function L.newest(g)
    if g == nil or g.h <= g.l then return nil end
    local ts = L.entry(g, g.h - 1)
    return ts
  end

  -- prune drops entries that left the window ending at now: an entry at
  -- ts counts while ts > now-window.
  -- A log read only to look at it (g.ro, see peek.lua) skips them
  -- without deleting them.
  function L.prune(g, now, w)
    local pruned = false
    while g.h > g.l do
      local ts, n = L.entry(g, g.l)
      if ts > now - w then break end
      if not g.ro then redis.call('HDEL', g.key, g.l) end
      g.cache[g.l] = nil
      g.sum = g.sum - n
      g.l = g.l + 1
      pruned = true
    end
    if pruned and not g.ro then
      redis.call('HSET', g.key, 's', g.sum, 'l', g.l, 'h', g.h)
    end
  end

  -- write stores g's metadata with the TTL of core's expiry (the newest
  -- entry's time plus the window), or deletes the key when g is empty.
  function L.write(g, w, now)
    local newest = L.newest(g)
    if newest ~= nil and newest + w > now then
      if g.rebuilt and g.l == 0 then
        local ts, n = L.entry(g, 0)
        redis.call('HSET', g.key, 0, fmt('%d %d', ts, n))
      end
      g.rebuilt = nil
      redis.call('HSET', g.key, 't', L.tag(w), 's', g.sum, 'l', g.l, 'h', g.h)
      redis.call('PEXPIRE', g.key, pttl(newest + w, now))
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
-- Concurrency slots: a sorted set of its own per budget and partition,
-- <prefix>{<partition>}%<budget> (the slot key, passed where a sliding log
-- passes its log key), never a record in the partition's hash. Each slot
-- held is one member per unit of its cost, "<id>" and "<id>.2" to
-- "<id>.<cost>", scored with its lease's end (µs): the take's time plus
-- the window. A slot counts while its lease runs (score > now); a take
-- first drops the slots whose lease has ended, so an instance that died
-- holding slots loses them within the window. The id is the take's time,
-- moved on by 1 µs until no slot of the key has it, so it is unique in
-- the key; the take returns it, and the refund removes exactly that
-- slot's members. The key's TTL is the lease of its newest slot; it is
-- deleted with its last member.

-- conc_held returns how many slot units of the slot key zkey are held at
-- now, dropping those whose lease has ended.
local function conc_held(zkey, now)
  redis.call('ZREMRANGEBYSCORE', zkey, '-inf', now)
  return redis.call('ZCARD', zkey)
end

-- CHUNK bounds the members of one ZADD or ZREM (Lua's unpack is limited).
local CHUNK = 1000

-- conc_members calls cmd on zkey with the members of slot id of cost
-- units, each preceded by score when score is not nil, CHUNK at a time.
local function conc_members(cmd, zkey, id, cost, score)
  local args, n = {}, 0
  for j = 1, cost do
    if score then
      n = n + 1
      args[n] = score
    end
    n = n + 1
    if j == 1 then args[n] = fmt('%d', id) else args[n] = fmt('%d.%d', id, j) end
    if j == cost or n >= 2 * CHUNK then
      redis.call(cmd, zkey, unpack(args, 1, n))
      n = 0
    end
  end
end

-- conc_charge takes a slot of cost units in zkey with a lease of w µs
-- from now, and returns its id (now for a cost of 0, which holds nothing).
local function conc_charge(zkey, w, cost, now)
  if cost < 1 then return now end
  local id = now
  while redis.call('ZSCORE', zkey, fmt('%d', id)) do id = id + 1 end
  conc_members('ZADD', zkey, id, cost, now + w)
  redis.call('PEXPIRE', zkey, pttl(now + w, now))
  return id
end

-- conc_release gives back slot id of cost units of zkey.
local function conc_release(zkey, id, cost)
  conc_members('ZREM', zkey, id, cost, nil)
end

---------------------------------------------------------------------------
-- A partition's records: the states of its budgets, in the hash at
-- <prefix>{<partition>}#h. Each budget has a field, named by its record
-- name, holding struct '<i8i8i8i8': tag (window µs × 8 + algorithm), a,
-- b, c (for a sliding log: a = its expiry, the newest entry's time plus
-- the window, b = c = 0). The field EXP ("\0", which no record name
-- holds) holds '<i8', the expiry (µs) the key's TTL was last set for. A
-- run reads only the fields of the budgets it evaluates (HMGET) and
-- writes only those it changed (HSET), so what a decision costs does not
-- depend on how many other budgets share its partition.
--
-- In a run, PARTS[key] is P: P[1] the stored expiry (false: the key holds
-- none; nil: not read yet); P[2] true while P is in DIRTY; P[3] the
-- records read or written, by name: {tag, a, b, c, stored, changed, tag
-- and a as stored (nil for none)}, or false for a field read and found absent (or malformed, which the next
-- write overwrites); P[4] the names changed in this run, in order.

local REC, EXP = '<i8i8i8i8', '\0'

-- PARTS holds, by key, what this run read or wrote; DIRTY lists the keys
-- with changes, written once by flush at the end of the run. A run starts
-- with reset: a function library keeps these between calls.
local PARTS, DIRTY, NDIRTY = {}, {}, 0

-- init starts a run. A run that reads or writes records through PARTS
-- calls reset too.
local function init()
  if floor == nil then
    floor, max, min, fmt = math.floor, math.max, math.min, string.format
    sbyte, sunpack = string.byte, struct.unpack
  end
end

-- begin starts a run and returns now.
local function begin()
  init()
  return servertime()
end

-- reset empties PARTS and DIRTY.
local function reset()
  PARTS, DIRTY, NDIRTY = {}, {}, 0
end

-- part returns key's P, creating it (nothing read yet).
local function part(key)
  local P = PARTS[key]
  if P == nil then
    P = {nil, false, {}, {}}
    PARTS[key] = P
  end
  return P
end

-- load reads the records names[1..n] of key into P, and the stored
-- expiry when P has not read it yet (names may be changed).
local function load(key, P, names, n)
  local m = n
  if P[1] == nil then
    m = n + 1
    names[m] = EXP
  end
  if m == 0 then return end
  local v = redis.call('HMGET', key, unpack(names, 1, m))
  if m > n then
    local e = v[m]
    if type(e) == 'string' and #e == 8 then
      P[1] = struct.unpack('<i8', e)
    else
      P[1] = false
    end
  end
  local R = P[3]
  for i = 1, n do
    local s = v[i]
    if type(s) == 'string' and #s == 32 then
      local tag, a, b, c = struct.unpack(REC, s)
      R[names[i]] = {tag, a, b, c, true, false, tag, a}
    else
      R[names[i]] = false
    end
  end
end

-- record returns budget name's record in key's P (reading it when this
-- run has not), or false.
local function record(key, P, name)
  local r = P[3][name]
  if r == nil then
    load(key, P, {name}, 1)
    r = P[3][name]
  end
  return r
end

-- put stores a record for name in P (replacing its record, if any), and
-- marks key for flush.
local function put(key, P, name, tag, a, b, c)
  if P[1] == nil then load(key, P, {}, 0) end
  local r = P[3][name]
  if r then
    r[1], r[2], r[3], r[4] = tag, a, b, c
  else
    r = {tag, a, b, c, false, false}
    P[3][name] = r
  end
  if not r[6] then
    r[6] = true
    local ch = P[4]
    ch[#ch + 1] = name
  end
  if not P[2] then
    P[2] = true
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

-- flush writes the changed records of every key: one HSET per key of the
-- records still live. A changed record whose state is already equivalent
-- to an empty one is deleted (HDEL) rather than written. The key's TTL
-- covers the latest expiry of its records (ceil to ms): when a write makes
-- that later, EXP and the TTL (PEXPIRE) follow; otherwise the key keeps its
-- TTL (HSET does not change it). Only when a record whose stored expiry
-- set the key's TTL expires sooner (a refund, or a budget whose window
-- shrank) does flush read the whole key (HGETALL) to shorten the TTL to
-- the latest expiry left, or delete the key when no record is live.
local function flush(now)
  for d = 1, NDIRTY do
    local key = DIRTY[d]
    local P = PARTS[key]
    P[2] = false
    local R, ch = P[3], P[4]
    local old = P[1] or 0
    local top, shrink = old, false
    local set, ns, del, nd = {}, 0, nil, 0
    for i = 1, #ch do
      local name = ch[i]
      ch[i] = nil
      local r = R[name]
      r[6] = false
      local tag = r[1]
      local e = expiry(tag, r[2])
      if e < old and r[7] and not shrink and expiry(r[7], r[8]) >= old then shrink = true end
      if e > now then
        set[ns + 1], set[ns + 2] = name, struct.pack(REC, tag, r[2], r[3], r[4])
        ns = ns + 2
        r[5], r[7], r[8] = true, tag, r[2]
        if e > top then top = e end
      else
        if r[5] then
          nd = nd + 1
          if del == nil then del = {} end
          del[nd] = name
        end
        R[name] = false
      end
    end
    if nd > 0 then redis.call('HDEL', key, unpack(del, 1, nd)) end
    if top > old then
      set[ns + 1], set[ns + 2] = EXP, struct.pack('<i8', top)
      redis.call('HSET', key, unpack(set, 1, ns + 2))
      redis.call('PEXPIRE', key, pttl(top, now))
      P[1] = top
    else
      if ns > 0 then redis.call('HSET', key, unpack(set, 1, ns)) end
      if shrink then
        local all, last = redis.call('HGETALL', key), 0
        for i = 1, #all, 2 do
          local v = all[i + 1]
          if all[i] ~= EXP and #v == 32 then
            local t, a = struct.unpack('<i8i8', v)
            local e = expiry(t, a)
            if e > last then last = e end
          end
        end
        if last <= now then
          redis.call('DEL', key)
          P[1], P[3] = false, {}
        elseif last < old then
          redis.call('HSET', key, EXP, struct.pack('<i8', last))
          redis.call('PEXPIRE', key, pttl(last, now))
          P[1] = last
        end
      end
    end
  end
  NDIRTY = 0
end

-- state returns the state of budget name in key's records P for
-- algorithm alg and window w (tag = w×8 + alg): a, b, c, and g, for a
-- sliding log its log (read from logkey), for concurrency the slot units
-- held in its slot key (logkey; a take has dropped the ended leases), for
-- the other algorithms true when P holds a state of this algorithm and
-- window. Anything else reads
-- as an empty state (g nil).
--
-- A sliding log's entries live in their own key (logkey), valid only while
-- the partition's record of the budget is a sliding log of this window:
-- a budget that changed algorithm or window starts afresh, as in core.
-- The record also keeps the log's expiry and units (log_written), from
-- which L.open rebuilds a log whose key was evicted alone (now, µs).
local function state(key, P, name, alg, w, logkey, now)
  if alg == CONC then return redis.call('ZCARD', logkey), 0, 0, true end
  local r = record(key, P, name)
  if not r or r[1] ~= w * 8 + alg then return 0, 0, 0, nil end
  if alg == LOG then
    return 0, 0, 0, sliding_log().open(logkey, w, r, now)
  end
  return r[2], r[3], r[4], true
end

-- log_written records in P the expiry of the sliding log g of budget name
-- after L.write stored it (0 when it is empty), and its units, from which
-- L.open rebuilds the log should its key be evicted alone.
local function log_written(key, P, name, w, g)
  local newest, e, units = sliding_log().newest(g), 0, 0
  if newest ~= nil then e, units = newest + w, g.sum end
  put(key, P, name, w * 8 + LOG, e, units, 0)
end

---------------------------------------------------------------------------
-- The windows, which eval, refund and lease share: fixed_start returns the
-- start (µs) of the fixed window of w µs that holds t (µs); sliding_window
-- returns, for the sliding window counter of w µs, t in ms, the window in
-- ms (wm) and the start (ms) of the window that holds t.

local function fixed_start(t, w)
  return fdiv(t, w) * w
end

local function sliding_window(t, w)
  -- tm = fdiv(t, 1000) and wm = fdiv(w, 1000), inline (this is on every
  -- sliding window's evaluation, and Lua calls cost).
  local tm, wm = floor(t / 1000), floor(w / 1000)
  local r = t - tm * 1000
  if r < 0 then tm = tm - 1 elseif r >= 1000 then tm = tm + 1 end
  r = w - wm * 1000
  if r < 0 then wm = wm - 1 elseif r >= 1000 then wm = wm + 1 end
  return tm, wm, fdiv(tm, wm) * wm
end

---------------------------------------------------------------------------
-- eval computes the outcome of spending cost at now from the state (a, b,
-- c, or the log g for a sliding log): allowed, remaining, reset, retry,
-- delay (µs), and the state after that charge, na, nb, nc. It mirrors
-- the Go Eval (internal/algorithm), and is the one Lua definition of the
-- algorithms' arithmetic: take, lease and peek evaluate every item with it.

local function eval(alg, w, q, burst, maxwait, cost, now, a, b, c, g)
  local allowed, remaining, reset, retry, delay = false, 0, 0, 0, 0
  local na, nb, nc = 0, 0, 0

  if alg == FIXED then
    local ws, count
    if a <= now and now < a + w then
      ws, count = a, b -- still in the stored window
    else
      ws, count = fixed_start(now, w), 0
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
    local nowMS, wm, ws = sliding_window(now, w)
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

  elseif alg == CONC then
    -- a is the slot units held (conc_held). Nothing resets by itself:
    -- reset 0, and a denial's retry is core's ConcurrencyRetryAfter.
    if a + cost <= q then
      allowed = true
      remaining = q - a - cost
      na = a + cost
    else
      remaining = max(0, q - a)
      retry = 1000000
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
