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
-- Every key's value is read by one MGET; the records a decision changes
-- are read by the decisions after it from this run's copy (PARTS in
-- algorithms.lua) and written once, at the end of the run (flush).
--
-- Every item is checked when its decision is evaluated, before that
-- decision changes anything; the Store checks them all before it sends,
-- so a bad item here means another caller, and the script fails (the
-- sliding logs that decisions before it charged stay charged; their
-- records and every other state are not written).
--
-- Returns '<i8' integers: now (µs), then for each item allowed (1/0),
-- charged (1/0), remaining, reset µs, retry-after µs, delay µs, and with
-- ARGV[2] = '1' also the remaining and reset µs if the take is undone and
-- whether the charge added a sliding log entry (1/0).

local counts, kcounts = ARGV[4], ARGV[5]
local D = #counts
if D == 0 or #kcounts ~= D then
  return redis.error_reply('quotagate: take: malformed decisions')
end
local N, NK = 0, 0
for d = 1, D do
  local c = string.byte(counts, d)
  if c < 1 then return redis.error_reply('quotagate: take: empty decision') end
  N, NK = N + c, NK + string.byte(kcounts, d)
end
if NK ~= #KEYS then
  return redis.error_reply('quotagate: take: decisions hold ' .. NK .. ' keys, not ' .. #KEYS)
end
local ITEM = '<I2sBi8i8i8i8i8'
-- MAXW bounds windows (2^50 µs, as the Store does), so that a record's
-- tag, window × 8 + algorithm, stays an exact integer.
local MAXW = 1125899906842624
local blob = ARGV[3]
local pos = 1

local function bad(i)
  return redis.error_reply('quotagate: take: bad limit for item ' .. i)
end

local now = clock(ARGV[1])
local undo = ARGV[2] == '1'
local per = 6
if undo then per = 9 end
-- Every key's value, read at once (false for none, or a sliding log's
-- hash); records takes a key's value from PARTS instead once this run
-- parsed it.
local vals = redis.call('MGET', unpack(KEYS))
local out = {now}
local n = 1
-- R holds, for each item of a decision, what its commit needs, 18 slots
-- per item, reused from decision to decision.
local R = {}

local first, kb = 1, 0
for d = 1, D do
  local last = first + string.byte(counts, d) - 1
  local nk = string.byte(kcounts, d)
  if first == last and not undo then
    -- One item: it is charged exactly when it allows.
    local kk, name, alg, w, q, burst, maxwait, cost
    kk, name, alg, w, q, burst, maxwait, cost, pos = struct.unpack(ITEM, blob, pos)
    local k = kk % 256
    local lk = (kk - k) / 256
    alg = alg % 16
    if alg > 4 or w < 1000 or w > MAXW or q < 1 or cost < 0 or k < 1 or k > nk or (alg == LOG and (lk < 1 or lk > nk)) then return bad(first) end
    local key = KEYS[kb + k]
    local P = PARTS[key] or records(key, vals[kb + k])
    local logkey = false
    if alg == LOG then logkey = KEYS[kb + lk] end
    local a, b, c, g = state(P, name, alg, w, logkey)
    local al, rm, rs, ry, dl, na, nb, nc = eval(alg, w, q, burst, maxwait, cost, now, a, b, c, g)
    local allowed = 0
    if al then
      commit(key, P, name, logkey, alg, w, cost, now, na, nb, nc, g)
      allowed = 1
    end
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5], out[n + 6] = allowed, allowed, rm, rs, ry, dl
    n = n + 6
  else
    -- Evaluate every item, writing its outcome as if nothing were
    -- charged. Nothing is written before the charges, except that a
    -- sliding log drops entries that have left its window (which does not
    -- change what it means).
    local ok = true
    local o = n
    for i = first, last do
      local kk, name, as, w, q, burst, maxwait, cost
      kk, name, as, w, q, burst, maxwait, cost, pos = struct.unpack(ITEM, blob, pos)
      local k, alg = kk % 256, as % 16
      local lk, shadow = (kk - k) / 256, (as - alg) / 16
      if alg > 4 or w < 1000 or w > MAXW or q < 1 or cost < 0 or k < 1 or k > nk or (alg == LOG and (lk < 1 or lk > nk)) then return bad(i) end
      local key = KEYS[kb + k]
      local P = PARTS[key] or records(key, vals[kb + k])
      local logkey = false
      if alg == LOG then logkey = KEYS[kb + lk] end
      local a, b, c, g = state(P, name, alg, w, logkey)
      local al, rm, rs, ry, dl, na, nb, nc = eval(alg, w, q, burst, maxwait, cost, now, a, b, c, g)
      if not al and shadow == 0 then ok = false end
      local r = 18 * (i - first)
      R[r + 1], R[r + 2], R[r + 3], R[r + 4], R[r + 5] = al, a, b, c, g or false
      R[r + 6], R[r + 7], R[r + 8], R[r + 9] = na, nb, nc, P
      R[r + 10], R[r + 11], R[r + 12], R[r + 13], R[r + 14], R[r + 15], R[r + 16], R[r + 17], R[r + 18] = key, logkey, name, alg, w, q, burst, maxwait, cost
      local allowed = 0
      if al then allowed = 1 end
      out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] = allowed, 0, rm, rs, ry, dl
      if undo then out[o + 7], out[o + 8], out[o + 9] = 0, 0, 0 end
      o = o + per
    end
    -- Charge every allowed item if the decision allows, otherwise describe
    -- the allowed items as core's uncharged does: the current state as a
    -- cost-0 evaluation sees it.
    for i = first, last do
      local r = 18 * (i - first)
      if R[r + 1] then
        local alg, w, cost = R[r + 13], R[r + 14], R[r + 18]
        local a, b, c, g = R[r + 2], R[r + 3], R[r + 4], R[r + 5] or nil
        local urm, urs
        if undo or not ok then
          local _
          _, urm, urs = eval(alg, w, R[r + 15], R[r + 16], R[r + 17], 0, now, a, b, c, g)
        end
        if ok then
          local added = commit(R[r + 10], R[r + 9], R[r + 12], R[r + 11], alg, w, cost, now, R[r + 6], R[r + 7], R[r + 8], g)
          out[n + 2] = 1
          if undo then out[n + 7], out[n + 8], out[n + 9] = urm, urs, added end
        else
          out[n + 3], out[n + 4], out[n + 5], out[n + 6] = urm, urs, 0, 0
          if undo then out[n + 7], out[n + 8] = urm, urs end
        end
      end
      n = n + per
    end
  end
  first, kb = last + 1, kb + nk
end
if pos ~= #blob + 1 then
  return redis.error_reply('quotagate: take: items do not fill ' .. #blob .. ' bytes')
end
flush(now)
if n == 7 then
  return struct.pack('<i8i8i8i8i8i8i8', out[1], out[2], out[3], out[4], out[5], out[6], out[7])
end
return struct.pack('<' .. string.rep('i8', n), unpack(out))
