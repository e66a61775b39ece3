-- take: evaluate one or more decisions at one instant. Each decision is a
-- run of consecutive items; when every item of a decision that is not
-- shadow allows its cost, every allowed item of that decision is charged,
-- otherwise none of it is. Decisions are evaluated one after the other, in
-- order, each seeing the charges of those before it; a denial in one never
-- affects another. Each decision mirrors core's MemoryStore.Take.
--
-- KEYS[i]  the state key of item i
-- ARGV[1]  '' to use the server's TIME, or a test's injected time (see
--          clock)
-- ARGV[2]  '1' to add to each item's outcome what it is if the take is
--          undone (the Store needs it when another group of a cluster take
--          denies), '' otherwise
-- ARGV[3]  the items, seven '<i8' integers each: algorithm, window µs,
--          quota, burst, max wait µs, cost, shadow (1 or 0)
-- ARGV[4]  optional: one byte per decision, its number of items (1 to
--          255), in order; without it all items are one decision
--
-- All keys are read by one MGET; a key a decision writes is read by the
-- decisions after it from what this run wrote (SEEN in algorithms.lua).
--
-- Every item is checked when its decision is evaluated, before that
-- decision writes anything; the Store checks them all before it sends, so
-- a bad item here means another caller, and the script fails (decisions
-- before it in the run stand).
--
-- Returns '<i8' integers: now (µs), then for each item allowed (1/0),
-- charged (1/0), remaining, reset µs, retry-after µs, delay µs, and with
-- ARGV[2] = '1' also the remaining and reset µs if the take is undone and
-- whether the charge added a sliding log entry (1/0).

local ITEM = '<i8i8i8i8i8i8i8'
local N = #KEYS
local blob = ARGV[3]
if #blob ~= 56 * N then
  return redis.error_reply('quotagate: take: want ' .. N .. ' items of 56 bytes, got ' .. #blob .. ' bytes')
end
local counts = ARGV[4]
if counts == nil then
  if N > 255 then return redis.error_reply('quotagate: take: too many items for one decision') end
  counts = string.char(N)
end
local D = #counts
local total = 0
for d = 1, D do
  local c = string.byte(counts, d)
  if c < 1 then return redis.error_reply('quotagate: take: empty decision') end
  total = total + c
end
if total ~= N then
  return redis.error_reply('quotagate: take: decisions hold ' .. total .. ' items, not ' .. N)
end

-- item returns item i's limit and cost, or nil when they are out of range.
local function item(i)
  local alg, w, q, burst, maxwait, cost, shadow = struct.unpack(ITEM, blob, 56 * i - 55)
  if alg < 0 or alg > 4 or w < 1000 or q < 1 or cost < 0 then return nil end
  return alg, w, q, burst, maxwait, cost, shadow
end

local function bad(i)
  return redis.error_reply('quotagate: take: bad limit for item ' .. i)
end

local now = clock(ARGV[1])
local undo = ARGV[2] == '1'
local per = 6
if undo then per = 9 end
-- Every key's value, read at once (false for none, or a sliding log's
-- hash); load takes a key's value from SEEN instead once this run wrote it.
local vals = redis.call('MGET', unpack(KEYS))
local out = {now}
local n = 1
-- R holds, for each item of a decision of several items, what its commit
-- needs, 11 slots per item, reused from decision to decision.
local R = {}

local first = 1
for d = 1, D do
  local last = first + string.byte(counts, d) - 1
  if first == last and not undo then
    -- One item: it is charged exactly when it allows.
    local key = KEYS[first]
    local alg, w, q, burst, maxwait, cost = item(first)
    if alg == nil then return bad(first) end
    local v = SEEN[key]
    if v == nil then v = vals[first] end
    local a, b, c, g = load(key, alg, w, v)
    local al, rm, rs, ry, dl, na, nb, nc = eval(alg, w, q, burst, maxwait, cost, now, a, b, c, g)
    local allowed = 0
    if al then
      commit(key, alg, w, cost, now, na, nb, nc, a, g)
      allowed = 1
    end
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5], out[n + 6] = allowed, allowed, rm, rs, ry, dl
    n = n + 6
  else
    -- Evaluate every item, writing its outcome as if nothing were
    -- charged. Nothing is written to Redis before the charges, except
    -- that a sliding log drops entries that have left its window (which
    -- does not change what it means).
    local ok = true
    local o = n
    for i = first, last do
      local key = KEYS[i]
      local alg, w, q, burst, maxwait, cost, shadow = item(i)
      if alg == nil then return bad(i) end
      local v = SEEN[key]
      if v == nil then v = vals[i] end
      local a, b, c, g = load(key, alg, w, v)
      local al, rm, rs, ry, dl, na, nb, nc = eval(alg, w, q, burst, maxwait, cost, now, a, b, c, g)
      if not al and shadow == 0 then ok = false end
      local r = 11 * (i - first)
      R[r + 1], R[r + 2], R[r + 3], R[r + 4], R[r + 5], R[r + 6] = al, a, b, c, g or false, na
      R[r + 7], R[r + 8], R[r + 9], R[r + 10], R[r + 11] = nb, nc, alg, w, cost
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
      local r = 11 * (i - first)
      if R[r + 1] then
        local a, b, c, g = R[r + 2], R[r + 3], R[r + 4], R[r + 5] or nil
        local urm, urs
        if undo or not ok then
          local alg, w, q, burst, maxwait = item(i)
          local _
          _, urm, urs = eval(alg, w, q, burst, maxwait, 0, now, a, b, c, g)
        end
        if ok then
          local added = commit(KEYS[i], R[r + 9], R[r + 10], R[r + 11], now, R[r + 6], R[r + 7], R[r + 8], a, g)
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
  first = last + 1
end
if n == 7 then
  return struct.pack('<i8i8i8i8i8i8i8', out[1], out[2], out[3], out[4], out[5], out[6], out[7])
end
return struct.pack('<' .. string.rep('i8', n), unpack(out))
