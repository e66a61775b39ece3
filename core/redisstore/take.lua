-- take: evaluate one or more decisions at one instant. Each decision is a
-- run of consecutive items; when every item of a decision that is not
-- shadow allows its cost, every allowed item of that decision is charged,
-- otherwise none of it is. Decisions are evaluated one after the other, in
-- order, each seeing the charges of those before it; a denial in one never
-- affects another. Each decision mirrors core's MemoryStore.Take.
--
-- KEYS     each decision's keys: its partitions' record keys and its
--          sliding logs' keys
-- ARGV[1]  '' to use the server's TIME, or a test's injected time (see
--          clock)
-- ARGV[2]  '1' to add to each item's outcome what it is if the take is
--          undone (the Store needs it when another group of a cluster take
--          denies), '' otherwise
-- ARGV[3]  the items, each struct 'I2sBi8i8i8i8i8' (little-endian): its
--          partition's key + 256 × its sliding log's key (0 for none),
--          both numbered from 1 within its decision's keys; the budget's
--          record name; algorithm + 16 × shadow (1 or 0); window µs,
--          quota, burst, max wait µs, cost
-- ARGV[4]  one byte per decision, its number of items (1 to 255), in
--          order
-- ARGV[5]  one byte per decision, its number of keys
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
-- that last only with ARGV[2] = '1'), remaining, reset µs and its wait µs
-- (the delay if allowed, the retry-after otherwise: an allowed outcome
-- never has a retry-after, a denied one never a delay), and with ARGV[2] =
-- '1' also the remaining and reset µs if the take is undone.

local ITEM = '<I2sBi8i8i8i8i8'
-- MAXW bounds windows (2^50 µs, as the Store does), so that a record's
-- tag, window × 8 + algorithm, stays an exact integer.
local MAXW = 1125899906842624
-- NAMES is a scratch list for load.
local NAMES = {}

local function bad(i)
  return redis.error_reply('quotagate: take: bad limit for item ' .. i)
end

-- take runs the decisions of one call (KEYS and ARGV as above).
local function take(KEYS, ARGV)
  local now = begin(ARGV[1])
  local counts, kcounts = ARGV[4], ARGV[5]
  local D = #counts
  if D == 0 or #kcounts ~= D then
    return redis.error_reply('quotagate: take: malformed decisions')
  end
  local N, NK = 0, 0
  for d = 1, D do
    local c = sbyte(counts, d)
    if c < 1 then return redis.error_reply('quotagate: take: empty decision') end
    N, NK = N + c, NK + sbyte(kcounts, d)
  end
  if NK ~= #KEYS then
    return redis.error_reply('quotagate: take: decisions hold ' .. NK .. ' keys, not ' .. #KEYS)
  end
  local blob = ARGV[3]
  local pos = 1

  local undo = ARGV[2] == '1'
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
    local last = first + sbyte(counts, d) - 1
    local nk = sbyte(kcounts, d)
    if first == last and not undo then
      -- One item: it is charged exactly when it allows.
      local kk, name, alg, w, q, burst, maxwait, cost
      kk, name, alg, w, q, burst, maxwait, cost, pos = sunpack(ITEM, blob, pos)
      local k = kk % 256
      local lk = (kk - k) / 256
      alg = alg % 16
      if alg > 4 or w < 1000 or w > MAXW or q < 1 or cost < 0 or k < 1 or k > nk or (alg == LOG and (lk < 1 or lk > nk)) then return bad(first) end
      local key = KEYS[kb + k]
      local P = PARTS[key] or part(key)
      local r = P[3][name]
      if r == nil then
        NAMES[1] = name
        load(key, P, NAMES, 1)
        r = P[3][name]
      end
      local tag = w * 8 + alg
      local a, b, c, g, logkey = 0, 0, 0, nil, false
      if alg == LOG then
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
        if alg == LOG or not r then
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
        p = p + 41 -- algorithm, window, quota, burst, max wait, cost
        local k = kk % 256
        if k < 1 or k > nk then return bad(i) end
        local key = KEYS[kb + k]
        local P = PARTS[key] or part(key)
        if P[3][name] == nil then
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
        if alg > 4 or w < 1000 or w > MAXW or q < 1 or cost < 0 or k < 1 or k > nk or (alg == LOG and (lk < 1 or lk > nk)) then return bad(i) end
        local key = KEYS[kb + k]
        local P = PARTS[key]
        local r = P[3][name]
        local tag = w * 8 + alg
        local a, b, c, g, logkey = 0, 0, 0, nil, false
        if alg == LOG then
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
          if alg == LOG then
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
              if alg == LOG then logkey = KEYS[kb + (kk - k) / 256] end
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
