-- take: evaluate one or more decisions at one instant. Each decision is a
-- run of consecutive items; when every item of a decision that is not
-- shadow allows its cost, every allowed item of that decision is charged,
-- otherwise none of it is. Decisions are evaluated one after the other, in
-- order, each seeing the charges of those before it; a denial in one never
-- affects another. Each decision mirrors core's MemoryStore.Take.
--
-- KEYS     each decision's keys: its partitions' record keys and its
--          sliding logs' keys
-- ARGV[1]  the call, one string (each argument costs the server more
--          than a field of one): flags (B: 1 to add to each item's outcome
--          what it is if the take is undone, which the Store needs when
--          another group of a cluster take denies; 2 when a test's injected
--          time follows); with flag 2, now µs and a TTL floor ms
--          ('<i8i8', binary; the refund script's clock argument is text,
--          see clock); the number of decisions D ('<I2'); D
--          bytes, each decision's number of items (1 to 255), in order; D
--          bytes, each decision's number of keys; then the items, each
--          struct 'I2sBi8i8i8i8i8' (little-endian): its partition's key +
--          256 × its sliding log's key (0 for none), both numbered from 1
--          within its decision's keys; the budget's record name; algorithm
--          + 16 × shadow (1 or 0); window µs, quota, burst, max wait µs,
--          cost
--
-- A decision reads the records of its budgets that the run has not read
-- yet, one HMGET per partition; the records a decision changes are read
-- by the decisions after it from this run's copy (PARTS in algorithms.lua)
-- and written once, at the end of the run (flush).
--
-- Every item is checked when its decision is evaluated, before that
-- decision changes anything; the Store checks them all before it sends,
-- so a bad item here means another caller, and the script fails (the
-- sliding logs that decisions before it charged stay charged; their
-- records and every other state are not written).
--
-- Returns '<i8' integers: now (µs), then for each item its flags (1 if
-- allowed, + 2 if charged, + 4 if the charge added a sliding log entry;
-- that last only with flag 1; + 8 for a concurrency slot taken),
-- remaining, reset µs and its wait µs (the delay if allowed, the
-- retry-after otherwise: an allowed outcome never has a retry-after, a
-- denied one never a delay; with flag 8, the slot's id instead, see
-- conc_charge), and with flag 1 also the remaining and reset µs if the
-- take is undone.

local ITEM = '<I2sBi8i8i8i8i8'
-- MAXW bounds windows (2^50 µs, as the Store does), so that a record's
-- tag, window × 8 + algorithm, stays an exact integer.
local MAXW = 1125899906842624
-- NAMES is a scratch list for load.
local NAMES = {}

local function bad(i)
  return redis.error_reply('quotagate: take: bad limit for item ' .. i)
end

-- one() keeps in SOLO what it needs of each item (16 slots per item), in
-- OUT the reply's integers and in SET the fields to write: reused from
-- call to call (only their first entries are read), since every table a
-- call creates costs the server more in garbage collection than the
-- commands it sends. OUTFMT holds the reply's struct format by number of
-- integers.
local SOLO, OUT, SET, OUTFMT = {}, {}, {}, {}

-- one runs a call of one decision whose m items are all in one partition
-- and none is a sliding log (without undo): the path of every decision
-- sent alone whose budgets share a key. It reads the budgets' records and
-- the key's expiry with one HMGET and writes them with one HSET (and a
-- PEXPIRE when the expiry moves later), without the tables of a run
-- through PARTS, which cost the server more than the commands. It does
-- what the general path below does (the differential tests drive both),
-- and returns nil, having written nothing, when the call is not of that
-- kind or its write needs more than that (a state already equivalent to
-- an empty one, or a TTL to shorten: see flush); take then runs the call
-- the general way.
local function one(KEYS, blob, pos, now, m)
  if #KEYS ~= 1 then return nil end
  local T, names = SOLO, NAMES
  for i = 1, m do
    local kk, name, as, w, q, burst, maxwait, cost
    kk, name, as, w, q, burst, maxwait, cost, pos = sunpack(ITEM, blob, pos)
    local alg = as % 16
    if kk % 256 ~= 1 or alg == LOG or alg > 4 or w < 1000 or w > MAXW or q < 1 or cost < 0 then return nil end
    local o = 16 * (i - 1)
    T[o + 1], T[o + 2], T[o + 3], T[o + 4], T[o + 5], T[o + 6], T[o + 7], T[o + 8] = name, alg, (as - alg) / 16, w, q, burst, maxwait, cost
    names[i] = name
  end
  if pos ~= #blob + 1 then return nil end
  names[m + 1] = EXP
  local key = KEYS[1]
  local v = redis.call('HMGET', key, unpack(names, 1, m + 1))
  local es, old = v[m + 1], 0
  if es and #es == 8 then old = sunpack('<i8', es) end
  local ok, top, out = true, old, OUT
  out[1] = now
  for i = 1, m do
    local o = 16 * (i - 1)
    local alg, w, q, burst, maxwait, cost = T[o + 2], T[o + 4], T[o + 5], T[o + 6], T[o + 7], T[o + 8]
    local tag, s = w * 8 + alg, v[i]
    local a, b, c, g, otag, oa = 0, 0, 0, nil, nil, nil
    if s and #s == 32 then
      local ob, oc
      otag, oa, ob, oc = sunpack(REC, s)
      if otag == tag then a, b, c, g = oa, ob, oc, true end
    end
    local al, rm, rs, ry, dl, na, nb, nc
    if alg == FIXED then
      -- eval's fixed window, inline, as below.
      local ws, count = a, b -- still in the stored window
      if a > now or now >= a + w then ws, count = fdiv(now, w) * w, 0 end
      rs, ry, dl = ws + w - now, 0, 0
      if count + cost <= q then
        al, rm, na, nb, nc = true, q - count - cost, ws, count + cost, 0
      else
        al, rm, ry = false, max(0, q - count), rs
      end
    else
      al, rm, rs, ry, dl, na, nb, nc = eval(alg, w, q, burst, maxwait, cost, now, a, b, c, g)
    end
    local n = 4 * i - 2
    if al then
      local e
      if alg == FIXED then
        e = na + w
      else
        e = expiry(tag, na)
      end
      if e <= now or (e < old and otag and expiry(otag, oa) >= old) then return nil end
      if e > top then top = e end
      T[o + 9], T[o + 10], T[o + 11], T[o + 12], T[o + 13], T[o + 14], T[o + 15], T[o + 16] = tag, na, nb, nc, a, b, c, g or false
      out[n], out[n + 1], out[n + 2], out[n + 3] = 3, rm, rs, dl
    else
      if T[o + 3] == 0 then ok = false end
      T[o + 9] = false
      out[n], out[n + 1], out[n + 2], out[n + 3] = 0, rm, rs, ry
    end
  end
  if ok then
    local set, ns = SET, 0
    for i = 1, m do
      local o = 16 * (i - 1)
      if T[o + 9] then
        set[ns + 1], set[ns + 2] = T[o + 1], struct.pack(REC, T[o + 9], T[o + 10], T[o + 11], T[o + 12])
        ns = ns + 2
      end
    end
    if top > old then
      set[ns + 1], set[ns + 2] = EXP, struct.pack('<i8', top)
      redis.call('HSET', key, unpack(set, 1, ns + 2))
      local ttl = -fdiv(now - top, 1000)
      if ttl < minttl then ttl = minttl end
      redis.call('PEXPIRE', key, ttl)
    elseif ns > 0 then
      redis.call('HSET', key, unpack(set, 1, ns))
    end
  else
    -- Nothing is charged: describe the allowed items as core's uncharged
    -- does, the current state as a cost-0 evaluation sees it.
    for i = 1, m do
      local o = 16 * (i - 1)
      if T[o + 9] then
        local g = T[o + 16]
        if g == false then g = nil end
        local _, urm, urs = eval(T[o + 2], T[o + 4], T[o + 5], T[o + 6], T[o + 7], 0, now, T[o + 13], T[o + 14], T[o + 15], g)
        local n = 4 * i - 2
        out[n], out[n + 1], out[n + 2], out[n + 3] = 1, urm, urs, 0
      end
    end
  end
  local nn = 1 + 4 * m
  local f = OUTFMT[nn]
  if f == nil then
    f = '<' .. string.rep('i8', nn)
    OUTFMT[nn] = f
  end
  return struct.pack(f, unpack(out, 1, nn))
end

-- solo is one() for a decision of one item: it needs none of one()'s
-- tables, and this is the path of every decision of one budget sent
-- alone.
local function solo(KEYS, blob, pos, now)
  local kk, name, alg, w, q, burst, maxwait, cost
  kk, name, alg, w, q, burst, maxwait, cost, pos = sunpack(ITEM, blob, pos)
  alg = alg % 16
  if kk % 256 ~= 1 or #KEYS ~= 1 or pos ~= #blob + 1 or alg == LOG or alg > 4 or w < 1000 or w > MAXW or q < 1 or cost < 0 then
    return nil
  end
  local key = KEYS[1]
  local v = redis.call('HMGET', key, name, EXP)
  local s, es, old = v[1], v[2], 0
  if es and #es == 8 then old = sunpack('<i8', es) end
  local tag = w * 8 + alg
  local a, b, c, g, otag, oa = 0, 0, 0, nil, nil, nil
  if s and #s == 32 then
    local ob, oc
    otag, oa, ob, oc = sunpack(REC, s)
    if otag == tag then a, b, c, g = oa, ob, oc, true end
  end
  local al, rm, rs, ry, dl, na, nb, nc
  if alg == FIXED then
    -- eval's fixed window, inline, as below.
    local ws, count = a, b -- still in the stored window
    if a > now or now >= a + w then ws, count = fdiv(now, w) * w, 0 end
    rs, ry, dl = ws + w - now, 0, 0
    if count + cost <= q then
      al, rm, na, nb, nc = true, q - count - cost, ws, count + cost, 0
    else
      al, rm, ry = false, max(0, q - count), rs
    end
  else
    al, rm, rs, ry, dl, na, nb, nc = eval(alg, w, q, burst, maxwait, cost, now, a, b, c, g)
  end
  if not al then
    return struct.pack('<i8i8i8i8i8', now, 0, rm, rs, ry)
  end
  local e
  if alg == FIXED then
    e = na + w
  else
    e = expiry(tag, na)
  end
  if e <= now or (e < old and otag and expiry(otag, oa) >= old) then return nil end
  if e > old then
    redis.call('HSET', key, name, struct.pack(REC, tag, na, nb, nc), EXP, struct.pack('<i8', e))
    local ttl = -fdiv(now - e, 1000)
    if ttl < minttl then ttl = minttl end
    redis.call('PEXPIRE', key, ttl)
  else
    redis.call('HSET', key, name, struct.pack(REC, tag, na, nb, nc))
  end
  return struct.pack('<i8i8i8i8i8', now, 3, rm, rs, dl)
end

-- take runs the decisions of one call (KEYS and ARGV as above).
local function take(KEYS, ARGV)
  init()
  local blob = ARGV[1]
  local n0 = #blob
  local flags = sbyte(blob, 1) or 255
  local now, h = nil, 2
  if flags > 3 or n0 < 3 then return redis.error_reply('quotagate: take: malformed call') end
  if flags >= 2 then
    if n0 < 20 then return redis.error_reply('quotagate: take: malformed call') end
    local ms
    now, ms = sunpack('<i8i8', blob, 2)
    minttl, h = ms, 18
  else
    now = servertime()
  end
  local undo = flags % 2 == 1
  local D = sbyte(blob, h) + 256 * sbyte(blob, h + 1)
  local c0 = h + 1 -- counts at c0 + d, keys counts at k0 + d
  local k0 = c0 + D
  local pos = k0 + D + 1
  if D == 0 or pos > n0 + 1 then
    return redis.error_reply('quotagate: take: malformed decisions')
  end
  if D == 1 and sbyte(blob, k0 + 1) == 1 and not undo then
    local m = sbyte(blob, c0 + 1)
    if m > 0 then
      local reply
      if m == 1 then
        reply = solo(KEYS, blob, pos, now)
      else
        reply = one(KEYS, blob, pos, now, m)
      end
      if reply then return reply end
    end
  end
  reset()
  local N, NK = 0, 0
  for d = 1, D do
    local c = sbyte(blob, c0 + d)
    if c < 1 then return redis.error_reply('quotagate: take: empty decision') end
    N, NK = N + c, NK + sbyte(blob, k0 + d)
  end
  if NK ~= #KEYS then
    return redis.error_reply('quotagate: take: decisions hold ' .. NK .. ' keys, not ' .. #KEYS)
  end

  local per = 4
  if undo then per = 6 end
  local out = {now}
  local n = 1
  -- R holds, for each allowed item of a multi-item decision, what its charge
  -- needs, 13 slots per item (see below), reused from decision to decision.
  local R = {}
  -- NEED and NEEDKEYS: the records a multi-item decision must read, by
  -- key, and those keys.
  local NEED, NEEDKEYS

  -- An item's state is found inline below rather than through state(), and
  -- a charge of an existing record is stored in its slot rather than
  -- through commit() and put(): this is the path every decision takes, and
  -- Lua function calls are a large part of its cost. Both do what state()
  -- and commit() do.
  local first, kb = 1, 0
  for d = 1, D do
    local last = first + sbyte(blob, c0 + d) - 1
    local nk = sbyte(blob, k0 + d)
    if first == last and not undo then
      -- One item: it is charged exactly when it allows.
      local kk, name, alg, w, q, burst, maxwait, cost
      kk, name, alg, w, q, burst, maxwait, cost, pos = sunpack(ITEM, blob, pos)
      local k = kk % 256
      local lk = (kk - k) / 256
      alg = alg % 16
      if alg > CONC or w < 1000 or w > MAXW or q < 1 or cost < 0 or k < 1 or k > nk or ((alg == LOG or alg == CONC) and (lk < 1 or lk > nk)) then return bad(first) end
      local key = KEYS[kb + k]
      local P = PARTS[key] or part(key)
      local r = P[3][name]
      if r == nil and alg ~= CONC then -- a concurrency budget has no record
        NAMES[1] = name
        load(key, P, NAMES, 1)
        r = P[3][name]
      end
      local tag = w * 8 + alg
      local a, b, c, g, logkey = 0, 0, 0, nil, false
      if alg == CONC then
        logkey = KEYS[kb + lk]
        a, g = conc_held(logkey, now), true
      elseif alg == LOG then
        logkey = KEYS[kb + lk]
        if r and r[1] == tag then g = sliding_log().read(logkey, w) end
      elseif r and r[1] == tag then
        a, b, c, g = r[2], r[3], r[4], true
      end
      local al, rm, rs, ry, dl, na, nb, nc
      if alg == FIXED then
        -- eval's fixed window, inline: most budgets are fixed windows, and
        -- the call is a large part of their cost. Keep the two identical.
        local ws, count = a, b -- still in the stored window
        if a > now or now >= a + w then ws, count = fdiv(now, w) * w, 0 end
        rs, ry, dl = ws + w - now, 0, 0
        if count + cost <= q then
          al, rm, na, nb, nc = true, q - count - cost, ws, count + cost, 0
        else
          al, rm, ry = false, max(0, q - count), rs
        end
      else
        al, rm, rs, ry, dl, na, nb, nc = eval(alg, w, q, burst, maxwait, cost, now, a, b, c, g)
      end
      if al then
        if alg == CONC then
          dl = conc_charge(logkey, w, cost, now) -- the slot's id, with flag 8 below
        elseif alg == LOG or not r then
          commit(key, P, name, logkey, alg, w, cost, now, na, nb, nc, g)
        else
          r[1], r[2], r[3], r[4] = tag, na, nb, nc
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
      end
      if al then
        out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 3, rm, rs, dl
        if alg == CONC then out[n + 1] = 11 end
      else
        out[n + 1], out[n + 2], out[n + 3], out[n + 4] = 0, rm, rs, ry
      end
      n = n + 4
    else
      -- Evaluate every item, writing its outcome as if the decision
      -- allowed (every allowed item charged), and keeping in R what each
      -- allowed item's charge needs. Nothing is written before the charges, except that a sliding log
      -- drops entries that have left its window (which does not change what
      -- it means).
      local ok, o, dpos, m = true, n, pos, 0
      if NEED == nil then NEED, NEEDKEYS = {}, {} end
      -- Read the records of the decision's budgets that this run has not
      -- read yet: one HMGET per partition.
      local p, nl = pos, 0
      for i = first, last do
        local kk, name
        kk, name, p = sunpack('<I2s', blob, p)
        local conc = sbyte(blob, p) % 16 == CONC -- it has no record
        p = p + 41 -- algorithm, window, quota, burst, max wait, cost
        local k = kk % 256
        if k < 1 or k > nk then return bad(i) end
        local key = KEYS[kb + k]
        local P = PARTS[key] or part(key)
        if not conc and P[3][name] == nil then
          local need = NEED[key]
          if need == nil then
            need = {}
            NEED[key] = need
            nl = nl + 1
            NEEDKEYS[nl] = key
          end
          need[#need + 1] = name
        end
      end
      for j = 1, nl do
        local key = NEEDKEYS[j]
        local need = NEED[key]
        NEED[key] = nil
        load(key, PARTS[key], need, #need)
      end
      for i = first, last do
        local kk, name, as, w, q, burst, maxwait, cost
        kk, name, as, w, q, burst, maxwait, cost, pos = sunpack(ITEM, blob, pos)
        local k, alg = kk % 256, as % 16
        local lk, shadow = (kk - k) / 256, (as - alg) / 16
        if alg > CONC or w < 1000 or w > MAXW or q < 1 or cost < 0 or k < 1 or k > nk or ((alg == LOG or alg == CONC) and (lk < 1 or lk > nk)) then return bad(i) end
        local key = KEYS[kb + k]
        local P = PARTS[key]
        local r = P[3][name]
        local tag = w * 8 + alg
        local a, b, c, g, logkey = 0, 0, 0, nil, false
        if alg == CONC then
          logkey = KEYS[kb + lk]
          a, g = conc_held(logkey, now), true
          r = nil
        elseif alg == LOG then
          logkey = KEYS[kb + lk]
          if r and r[1] == tag then g = sliding_log().read(logkey, w) end
        elseif r and r[1] == tag then
          a, b, c, g = r[2], r[3], r[4], true
        end
        local al, rm, rs, ry, dl, na, nb, nc
        if alg == FIXED then
          -- eval's fixed window, inline: most budgets are fixed windows, and
          -- the call is a large part of their cost. Keep the two identical.
          local ws, count = a, b -- still in the stored window
          if a > now or now >= a + w then ws, count = fdiv(now, w) * w, 0 end
          rs, ry, dl = ws + w - now, 0, 0
          if count + cost <= q then
            al, rm, na, nb, nc = true, q - count - cost, ws, count + cost, 0
          else
            al, rm, ry = false, max(0, q - count), rs
          end
        else
          al, rm, rs, ry, dl, na, nb, nc = eval(alg, w, q, burst, maxwait, cost, now, a, b, c, g)
        end
        if al then
          -- R: the outcome's index in out, key, P, the record's slot (false
          -- for none), name, tag, na, nb, nc; for a sliding log also its
          -- key, window, cost and log (false for none).
          R[m + 1], R[m + 2], R[m + 3], R[m + 4], R[m + 5], R[m + 6], R[m + 7], R[m + 8], R[m + 9] = o, key, P, r, name, tag, na, nb, nc
          if alg == LOG or alg == CONC then
            R[m + 10], R[m + 11], R[m + 12], R[m + 13] = logkey, w, cost, g or false
          end
          m = m + 13
          if undo then
            -- What the item's outcome is if its take is undone: the current
            -- state as a cost-0 evaluation sees it (core's uncharged).
            local _, urm, urs = eval(alg, w, q, burst, maxwait, 0, now, a, b, c, g)
            out[o + 5], out[o + 6] = urm, urs
          end
          out[o + 1], out[o + 2], out[o + 3], out[o + 4] = 3, rm, rs, dl
        else
          if shadow == 0 then ok = false end
          out[o + 1], out[o + 2], out[o + 3], out[o + 4] = 0, rm, rs, ry
          if undo then out[o + 5], out[o + 6] = 0, 0 end
        end
        o = o + per
      end
      if ok then
        -- Charge every allowed item.
        for s = 0, m - 13, 13 do
          local key, P, r, tag = R[s + 2], R[s + 3], R[s + 4], R[s + 6]
          if tag % 8 == LOG then
            local added = commit(key, P, R[s + 5], R[s + 10], LOG, R[s + 11], R[s + 12], now, 0, 0, 0, R[s + 13] or nil)
            if undo then out[R[s + 1] + 1] = 3 + 4 * added end
          elseif tag % 8 == CONC then
            -- Flag 8: the slot's id is in place of the delay.
            local o = R[s + 1]
            out[o + 1], out[o + 4] = 11, conc_charge(R[s + 10], R[s + 11], R[s + 12], now)
          else
            put(key, P, R[s + 5], tag, R[s + 7], R[s + 8], R[s + 9])
          end
        end
      else
        -- Nothing is charged: describe the allowed items as core's
        -- uncharged does, the current state as a cost-0 evaluation sees it
        -- (already in out with undo; otherwise the items are decoded again
        -- from the decision's start, which only a denial pays for).
        local p, o2 = dpos, n
        for i = first, last do
          local kk, name, as, w, q, burst, maxwait, cost
          kk, name, as, w, q, burst, maxwait, cost, p = sunpack(ITEM, blob, p)
          if out[o2 + 1] == 3 then
            local urm, urs
            if undo then
              urm, urs = out[o2 + 5], out[o2 + 6]
            else
              local k, alg = kk % 256, as % 16
              local key = KEYS[kb + k]
              local logkey = false
              if alg == LOG or alg == CONC then logkey = KEYS[kb + (kk - k) / 256] end
              local a, b, c, g = state(key, PARTS[key], name, alg, w, logkey)
              local _
              _, urm, urs = eval(alg, w, q, burst, maxwait, 0, now, a, b, c, g)
            end
            out[o2 + 1], out[o2 + 2], out[o2 + 3], out[o2 + 4] = 1, urm, urs, 0
          end
          o2 = o2 + per
        end
      end
      n = o
    end
    first, kb = last + 1, kb + nk
  end
  if pos ~= #blob + 1 then
    return redis.error_reply('quotagate: take: items do not fill ' .. #blob .. ' bytes')
  end
  flush(now)
  if n == 5 then
    return struct.pack('<i8i8i8i8i8', out[1], out[2], out[3], out[4], out[5])
  end
  return struct.pack('<' .. string.rep('i8', n), unpack(out))
end
