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
--          another group of a cluster take denies); the number of
--          decisions D ('<I2'); D
--          bytes, each decision's number of items (1 to 255), in order; D
--          bytes, each decision's number of keys; then the items, each
--          struct 'I2sBi8i8i8i8i8' (little-endian): its partition's key +
--          256 × its sliding log's key (0 for none), both numbered from 1
--          within its decision's keys; the budget's record name; algorithm
--          + 16 × shadow (1 or 0); window µs, quota, burst, max wait µs,
--          cost
--
-- A decision of one partition without a sliding log or a concurrency
-- budget (the commonest) reads its records with one HMGET and writes
-- them with one HSET before the next decision is evaluated (solo and one);
-- consecutive decisions of one budget on one key share that read and
-- write. Any other decision, and every one after it in the run, reads the
-- records of its budgets that the run has not read yet, one HMGET per
-- partition; the records it changes are read by the decisions after it
-- from this run's copy (PARTS in algorithms.lua) and written once, at the
-- end of the run (flush).
--
-- Every item is checked when its decision is evaluated, before that
-- decision changes anything; the Store checks them all before it sends,
-- so a bad item here means another caller, and the script fails. What
-- decisions before it charged stays charged when solo or one wrote it, or
-- when it is a sliding log; the other records are not written. A script
-- error (a key under the prefix that is not a hash) likewise leaves the
-- decisions before it charged.
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
-- MAXD bounds the decisions of one call (the Store sends at most 512),
-- whose counts take reads with one string.byte.
local MAXD = 4000
-- NAMES is a scratch list for load.
local NAMES = {}

local function bad(i)
  return redis.error_reply('quotagate: take: bad limit for item ' .. i)
end

-- one() keeps in SOLO what it needs of each item (8 slots per item), in
-- OUT the reply's integers and in SET the fields to write: reused from
-- call to call (only their first entries are read), since every table a
-- call creates costs the server more in garbage collection than the
-- commands it sends. OUTFMT holds the reply's struct format by number of
-- integers. take reuses OUT likewise, and CHARGE for what each allowed
-- item's charge needs, LKEYS and LNAMES for the records a decision must
-- read.
local SOLO, OUT, SET, OUTFMT, CNT1 = {}, {}, {}, {}, {}
local CHARGE, LKEYS, LNAMES = {}, {}, {}

-- replyfmt returns the struct format of a reply of n integers.
local function replyfmt(n)
  local f = OUTFMT[n]
  if f == nil then
    f = '<' .. string.rep('i8', n)
    OUTFMT[n] = f
  end
  return f
end

-- one evaluates a decision whose m items, at pos in blob, are all in
-- partition key and none is a sliding log or a concurrency budget
-- (without undo): the path of every decision whose budgets share a key,
-- sent alone or in a batch. It reads the budgets' records and the key's
-- expiry with one HMGET and writes them with one HSET (and a PEXPIRE when
-- the expiry moves later), without the tables of a run through PARTS,
-- which cost the server more than the commands. It evaluates each item
-- with eval, writes what the general path below writes (the differential
-- tests drive both) and leaves the outcomes in out from o + 1 (4 per
-- item). It returns the position after the decision's items, or nil,
-- having written nothing, when the decision is not of that kind, when
-- whole is set and its items do not end the blob, or when its write needs
-- more than that (a state already equivalent to an empty one, or a TTL to
-- shorten: see flush); take then runs it the general way.
local function one(key, blob, pos, now, m, out, o, whole)
  local T, names = SOLO, NAMES
  for i = 1, m do
    local kk, name, as, w, q, burst, maxwait, cost
    kk, name, as, w, q, burst, maxwait, cost, pos = sunpack(ITEM, blob, pos)
    local alg = as % 16
    if kk % 256 ~= 1 or alg == LOG or alg > 4 or w < 1000 or w > MAXW or q < 1 or cost < 0 then return nil end
    local t = 8 * (i - 1)
    T[t + 1], T[t + 2], T[t + 3], T[t + 4], T[t + 5], T[t + 6], T[t + 7] = alg, as - alg, w, q, burst, maxwait, cost
    names[i] = name
  end
  if whole and pos ~= #blob + 1 then return nil end
  names[m + 1] = EXP
  local v = redis.call('HMGET', key, unpack(names, 1, m + 1))
  local es, old = v[m + 1], 0
  if es and #es == 8 then old = sunpack('<i8', es) end
  local ok, top, set, ns = true, old, SET, 0
  for i = 1, m do
    local t = 8 * (i - 1)
    local alg, w, q, burst, maxwait, cost = T[t + 1], T[t + 3], T[t + 4], T[t + 5], T[t + 6], T[t + 7]
    local tag, s = w * 8 + alg, v[i]
    local a, b, c, g, otag, oa = 0, 0, 0, nil, nil, nil
    if s and #s == 32 then
      local ob, oc
      otag, oa, ob, oc = sunpack(REC, s)
      if otag == tag then a, b, c, g = oa, ob, oc, true end
    end
    local al, rm, rs, ry, dl, na, nb, nc = eval(alg, w, q, burst, maxwait, cost, now, a, b, c, g)
    local n = o + 4 * i - 3
    if al then
      local e = expiry(tag, na)
      if e <= now or (e < old and otag and expiry(otag, oa) >= old) then return nil end
      if e > top then top = e end
      set[ns + 1], set[ns + 2] = names[i], struct.pack(REC, tag, na, nb, nc)
      ns = ns + 2
      out[n], out[n + 1], out[n + 2], out[n + 3] = 3, rm, rs, dl
    else
      if T[t + 2] == 0 then ok = false end
      out[n], out[n + 1], out[n + 2], out[n + 3] = 0, rm, rs, ry
    end
  end
  if ok then
    if top > old then
      set[ns + 1], set[ns + 2] = EXP, struct.pack('<i8', top)
      redis.call('HSET', key, unpack(set, 1, ns + 2))
      redis.call('PEXPIRE', key, pttl(top, now))
    elseif ns > 0 then
      redis.call('HSET', key, unpack(set, 1, ns))
    end
  else
    -- Nothing is charged: describe the allowed items as core's uncharged
    -- does, the current state as a cost-0 evaluation sees it.
    for i = 1, m do
      local n = o + 4 * i - 3
      if out[n] == 3 then
        local t = 8 * (i - 1)
        local alg, w = T[t + 1], T[t + 3]
        local a, b, c, g = 0, 0, 0, nil
        local s = v[i]
        if s and #s == 32 then
          local otag, oa, ob, oc = sunpack(REC, s)
          if otag == w * 8 + alg then a, b, c, g = oa, ob, oc, true end
        end
        local _, urm, urs = eval(alg, w, T[t + 4], T[t + 5], T[t + 6], 0, now, a, b, c, g)
        out[n], out[n + 1], out[n + 2], out[n + 3] = 1, urm, urs, 0
      end
    end
  end
  return pos
end

-- The record the last decision of a batch charged, kept unwritten while
-- the next decision is of the same key (a hot key's batch reads its record
-- once and writes it once, as the general path does): its key (false for
-- none), budget, record (tag, a, b, c), the key's expiry as the writes so
-- far leave it, and that expiry when it is still to be written (false: it
-- is not). take clears it at the start of every run and writes it before
-- anything else reads the key.
local CK, CN, CT, CA, CB, CC, CO, CX = false, nil, 0, 0, 0, 0, 0, false

-- carry_write writes the kept record.
local function carry_write(now)
  if CX then
    redis.call('HSET', CK, CN, struct.pack(REC, CT, CA, CB, CC), EXP, struct.pack('<i8', CX))
    redis.call('PEXPIRE', CK, pttl(CX, now))
  else
    redis.call('HSET', CK, CN, struct.pack(REC, CT, CA, CB, CC))
  end
  CK = false
end

-- solo is one() for a decision of one item: the path of every decision
-- of one budget, it needs none of one()'s tables and loops, which would
-- cost such a decision about 14% more server instructions
-- (BenchmarkServerTime, fixed_window-1budget). With keep, an allowed
-- decision's record is kept (CK) for the next decision instead of
-- written; a kept record of another key or budget is written first. It
-- returns the position after the item and the item's flags, remaining,
-- reset and wait (as in the reply), or nil as one() does.
local function solo(key, blob, pos, now, whole, keep)
  local kk, name, alg, w, q, burst, maxwait, cost
  kk, name, alg, w, q, burst, maxwait, cost, pos = sunpack(ITEM, blob, pos)
  alg = alg % 16
  if kk % 256 ~= 1 or (whole and pos ~= #blob + 1) or alg == LOG or alg > 4 or w < 1000 or w > MAXW or q < 1 or cost < 0 then
    return nil
  end
  local tag, old, otag, oa, ob, oc = w * 8 + alg, 0, nil, nil, nil, nil
  local carried = CK == key and CN == name
  if carried then
    old, otag, oa, ob, oc = CO, CT, CA, CB, CC
  else
    if CK then carry_write(now) end
    local v = redis.call('HMGET', key, name, EXP)
    local s, es = v[1], v[2]
    if es and #es == 8 then old = sunpack('<i8', es) end
    if s and #s == 32 then otag, oa, ob, oc = sunpack(REC, s) end
  end
  local a, b, c, g = 0, 0, 0, nil
  if otag == tag then a, b, c, g = oa, ob, oc, true end
  local al, rm, rs, ry, dl, na, nb, nc = eval(alg, w, q, burst, maxwait, cost, now, a, b, c, g)
  if not al then return pos, 0, rm, rs, ry end
  local e = expiry(tag, na)
  if e <= now or (e < old and otag and expiry(otag, oa) >= old) then return nil end
  local x = carried and CX -- the key's expiry to write
  if e > old then x, old = e, e end
  if keep then
    CK, CN, CT, CA, CB, CC, CO, CX = key, name, tag, na, nb, nc, old, x
  elseif x then
    redis.call('HSET', key, name, struct.pack(REC, tag, na, nb, nc), EXP, struct.pack('<i8', x))
    redis.call('PEXPIRE', key, pttl(x, now))
    CK = false
  else
    redis.call('HSET', key, name, struct.pack(REC, tag, na, nb, nc))
    CK = false
  end
  return pos, 3, rm, rs, dl
end

-- take runs the decisions of one call (KEYS and ARGV as above).
local function take(KEYS, ARGV)
  if floor == nil then init() end -- init, without a call once it has run
  local blob = ARGV[1]
  local n0 = #blob
  -- The flags, D, and the first decision's numbers of items and keys, in
  -- one call.
  local flags, dlo, dhi, m1, nk1 = sbyte(blob, 1, 5)
  if (flags or 255) > 1 or n0 < 3 then return redis.error_reply('quotagate: take: malformed call') end
  local now = servertime()
  CK = false
  local undo = flags == 1
  local D = dlo + 256 * dhi
  local c0 = 3 -- counts at c0 + d, keys counts at k0 + d
  local k0 = c0 + D
  local pos = k0 + D + 1
  if D == 0 or D > MAXD or pos > n0 + 1 then
    return redis.error_reply('quotagate: take: malformed decisions')
  end
  if D == 1 and nk1 == 1 and #KEYS == 1 and not undo then
    -- The commonest calls, one decision of one partition, without the
    -- loops below.
    if m1 == 1 then
      local p, f, rm, rs, wt = solo(KEYS[1], blob, pos, now, true, false)
      if p then return struct.pack('<i8i8i8i8i8', now, f, rm, rs, wt) end
    elseif m1 > 1 and one(KEYS[1], blob, pos, now, m1, OUT, 1, true) then
      local n = 1 + 4 * m1
      OUT[1] = now
      return struct.pack(replyfmt(n), unpack(OUT, 1, n))
    end
  end
  -- cnt: the decisions' numbers of items, then of keys (read in one call;
  -- D is at most MAXD).
  local cnt, NK = CNT1, 0
  if D == 1 then
    cnt[1], cnt[2] = m1, nk1
  else
    cnt = {sbyte(blob, c0 + 1, k0 + D)}
  end
  for d = 1, D do
    if cnt[d] < 1 then return redis.error_reply('quotagate: take: empty decision') end
    NK = NK + cnt[D + d]
  end
  if NK ~= #KEYS then
    return redis.error_reply('quotagate: take: decisions hold ' .. NK .. ' keys, not ' .. #KEYS)
  end

  local per = 4
  if undo then per = 6 end
  local out, n, R = OUT, 1, CHARGE
  out[1] = now

  -- A batch's decisions of one partition each, with no sliding log or
  -- concurrency budget (the most common kind): each is evaluated and
  -- written on its own by solo or one, as a decision sent alone is,
  -- without the general path's tables, which cost the server about as
  -- much again per decision (BenchmarkServerTime's batch rows). The first
  -- decision that needs more, and every one after it, go the general way,
  -- from the state these wrote. A batch whose items do not fill its blob
  -- (only the Store sends batches, well formed) is refused at its end,
  -- after these decisions were written.
  local first, kb, d0 = 1, 0, 1
  if D > 1 and not undo then
    while d0 <= D and cnt[D + d0] == 1 do
      local m, key, p = cnt[d0], KEYS[kb + 1], nil
      if m == 1 then
        local f, rm, rs, wt
        p, f, rm, rs, wt = solo(key, blob, pos, now, false, d0 < D and KEYS[kb + 2] == key)
        out[n + 1], out[n + 2], out[n + 3], out[n + 4] = f, rm, rs, wt
      else
        if CK then carry_write(now) end
        p = one(key, blob, pos, now, m, out, n, false)
      end
      if p == nil then break end
      pos, n, first, kb, d0 = p, n + 4 * m, first + m, kb + 1, d0 + 1
    end
    if CK then carry_write(now) end
  end
  if d0 > D then
    if pos ~= #blob + 1 then
      return redis.error_reply('quotagate: take: items do not fill ' .. #blob .. ' bytes')
    end
    if n == 5 then
      return struct.pack('<i8i8i8i8i8', out[1], out[2], out[3], out[4], out[5])
    end
    return struct.pack(replyfmt(n), unpack(out, 1, n))
  end
  reset()

  -- Each decision, of one item or several: read the records it needs,
  -- evaluate every item (eval), writing its outcome as if the decision
  -- allowed (every allowed item charged) and keeping in R what each
  -- allowed item's charge needs, then charge every allowed item, or none.
  -- Nothing is written before the charges, except that a sliding log
  -- drops entries that have left its window (which does not change what
  -- it means). An item's state is found inline below rather than through
  -- state(), a call per item that this path, the path of batched decisions
  -- of several partitions or a sliding log, does not pay for.
  for d = d0, D do
    local last, nk = first + cnt[d] - 1, cnt[D + d]
    local ok, o, dpos, m = true, n, pos, 0
    -- Read the records of the decision's budgets that this run has not
    -- read yet: one HMGET per partition. LKEYS and LNAMES list them by
    -- item; a key is marked false once its records are read. A lone
    -- item's record is read as it is evaluated, below.
    if last > first then
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
          nl = nl + 1
          LKEYS[nl], LNAMES[nl] = key, name
        end
      end
      for j = 1, nl do
        local key = LKEYS[j]
        if key then
          local names, nn = NAMES, 1
          names[1] = LNAMES[j]
          for j2 = j + 1, nl do
            if LKEYS[j2] == key then
              nn = nn + 1
              names[nn], LKEYS[j2] = LNAMES[j2], false
            end
          end
          load(key, PARTS[key], names, nn)
        end
      end
    end
    for i = first, last do
      local kk, name, as, w, q, burst, maxwait, cost
      kk, name, as, w, q, burst, maxwait, cost, pos = sunpack(ITEM, blob, pos)
      local k, alg = kk % 256, as % 16
      local lk, shadow = (kk - k) / 256, (as - alg) / 16
      if alg > CONC or w < 1000 or w > MAXW or q < 1 or cost < 0 or k < 1 or k > nk or ((alg == LOG or alg == CONC) and (lk < 1 or lk > nk)) then return bad(i) end
      local key = KEYS[kb + k]
      local P = PARTS[key] or part(key)
      local tag = w * 8 + alg
      local a, b, c, g, logkey = 0, 0, 0, nil, false
      if alg == CONC then
        logkey = KEYS[kb + lk]
        a, g = conc_held(logkey, now), true
      else
        local r = P[3][name]
        if r == nil then
          NAMES[1] = name
          load(key, P, NAMES, 1)
          r = P[3][name]
        end
        if alg == LOG then
          logkey = KEYS[kb + lk]
          if r and r[1] == tag then g = sliding_log().open(logkey, w, r, now) end
        elseif r and r[1] == tag then
          a, b, c, g = r[2], r[3], r[4], true
        end
      end
      local al, rm, rs, ry, dl, na, nb, nc = eval(alg, w, q, burst, maxwait, cost, now, a, b, c, g)
      if al then
        if first == last and alg ~= LOG and alg ~= CONC then
          -- A lone item, charged exactly when it allows: its record now.
          put(key, P, name, tag, na, nb, nc)
        else
          -- R: the outcome's index in out, key, P, name, tag, na, nb, nc;
          -- for a sliding log or a concurrency budget also its key,
          -- window, cost and log (false for none).
          R[m + 1], R[m + 2], R[m + 3], R[m + 4], R[m + 5], R[m + 6], R[m + 7], R[m + 8] = o, key, P, name, tag, na, nb, nc
          if alg == LOG or alg == CONC then
            R[m + 9], R[m + 10], R[m + 11], R[m + 12] = logkey, w, cost, g or false
          end
          m = m + 12
        end
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
      for s = 0, m - 12, 12 do
        local key, P, tag = R[s + 2], R[s + 3], R[s + 5]
        if tag % 8 == LOG then
          local added = commit(key, P, R[s + 4], R[s + 9], LOG, R[s + 10], R[s + 11], now, 0, 0, 0, R[s + 12] or nil)
          if undo then out[R[s + 1] + 1] = 3 + 4 * added end
        elseif tag % 8 == CONC then
          -- Flag 8: the slot's id is in place of the delay.
          local oc = R[s + 1]
          out[oc + 1], out[oc + 4] = 11, conc_charge(R[s + 9], R[s + 10], R[s + 11], now)
        else
          put(key, P, R[s + 4], tag, R[s + 6], R[s + 7], R[s + 8])
        end
      end
    elseif m > 0 then
      -- Nothing is charged: describe the allowed items as core's
      -- uncharged does, the current state as a cost-0 evaluation sees it
      -- (already in out with undo; otherwise the items are decoded again
      -- from the decision's start, which only a denial pays for).
      local p2, o2 = dpos, n
      for i = first, last do
        local kk, name, as, w, q, burst, maxwait, cost
        kk, name, as, w, q, burst, maxwait, cost, p2 = sunpack(ITEM, blob, p2)
        if out[o2 + 1] == 3 then
          local urm, urs
          if undo then
            urm, urs = out[o2 + 5], out[o2 + 6]
          else
            local k, alg = kk % 256, as % 16
            local key = KEYS[kb + k]
            local logkey = false
            if alg == LOG or alg == CONC then logkey = KEYS[kb + (kk - k) / 256] end
            local a, b, c, g = state(key, PARTS[key], name, alg, w, logkey, now)
            local _
            _, urm, urs = eval(alg, w, q, burst, maxwait, 0, now, a, b, c, g)
          end
          out[o2 + 1], out[o2 + 2], out[o2 + 3], out[o2 + 4] = 1, urm, urs, 0
        end
        o2 = o2 + per
      end
    end
    n = o
    first, kb = last + 1, kb + nk
  end
  if pos ~= #blob + 1 then
    return redis.error_reply('quotagate: take: items do not fill ' .. #blob .. ' bytes')
  end
  flush(now)
  if n == 5 then
    return struct.pack('<i8i8i8i8i8', out[1], out[2], out[3], out[4], out[5])
  end
  return struct.pack(replyfmt(n), unpack(out, 1, n))
end
