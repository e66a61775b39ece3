-- refund: give back the charges of an earlier take. It mirrors core's
-- MemoryStore.Refund and, in refund below, core's refund.
--
-- KEYS[i]  the state key of item i
-- ARGV[1]  '' to use the server's TIME (for TTLs), or a test's injected
--          time (see clock)
-- ARGV[2]  the items, six or seven '<i8' integers each: algorithm, window
--          µs, quota, cost, stamp µs (the outcome's Stamp), undo (1 for a
--          sliding log entry a cluster take added; see refund), and
--          optionally reset µs (the outcome's Reset; see refund's tat)

-- refund gives back cost charged at stamp (µs), as core's refund does. It
-- never creates a key.
--
-- A sliding log entry left with no units is removed and the entries after
-- it move down one index (core's slidingLog.remove), so a log never holds
-- empty entries; the metadata and TTL then follow the newest remaining
-- entry. This also takes back an entry that a cluster take added when
-- another group of the take denied (undo, which needs nothing more).
--
-- tat is the charge's theoretical arrival time (the outcome's Stamp plus
-- its Reset, µs) for a token or leaky bucket, or nil when the caller did
-- not send it: then the whole cost×T is given back.
local function refund(key, alg, w, q, cost, stamp, now, undo, tat)
  if alg == LOG then
    local L = sliding_log()
    local g = L.read(key, w)
    if g == nil then return end
    -- Search from the newest entry; entries are in time order, so stop at
    -- the first older than stamp.
    local i = g.h - 1
    while i >= g.l do
      local ts, n = L.entry(g, i)
      if ts == stamp then
        local take = min(cost, n)
        g.sum = g.sum - take
        if n - take > 0 then
          L.set(g, i, ts, n - take)
          redis.call('HSET', key, 's', g.sum)
          return
        end
        -- Remove entry i: move the later ones down, drop the last index.
        for j = i, g.h - 2 do
          local tj, nj = L.entry(g, j + 1)
          L.set(g, j, tj, nj)
        end
        redis.call('HDEL', key, g.h - 1)
        g.cache[g.h - 1] = nil
        g.h = g.h - 1
        L.write(g, w, now)
        return
      end
      if ts < stamp then return end
      i = i - 1
    end
    return
  end
  local a, b, c, found = load(key, alg, w)
  if not found then return end -- nothing stored
  local kept = a
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
    -- Give back only the part of the charge not yet drained:
    -- clamp(tat - now, 0, cost×T).
    local part = cost * -fdiv(-w, q)
    if tat ~= nil then part = min(max(tat - now, 0), part) end
    a = a - part
  end
  write_state(key, alg, w, a, b, c, now, kept)
end

local ITEM, ITEM_RESET = '<i8i8i8i8i8i8', '<i8i8i8i8i8i8i8'
local N = #KEYS
local blob = ARGV[2]
local withReset = N > 0 and #blob == 56 * N
if #blob ~= 48 * N and not withReset then
  return redis.error_reply('quotagate: refund: want ' .. N .. ' items of 48 or 56 bytes, got ' .. #blob .. ' bytes')
end
local items = {}
local pos = 1
for i = 1, N do
  local alg, w, q, cost, stamp, undo, reset
  if withReset then
    alg, w, q, cost, stamp, undo, reset, pos = struct.unpack(ITEM_RESET, blob, pos)
  else
    alg, w, q, cost, stamp, undo, pos = struct.unpack(ITEM, blob, pos)
  end
  if alg < 0 or alg > 4 or w < 1000 or q < 1 then
    return redis.error_reply('quotagate: refund: bad limit for item ' .. i)
  end
  local tat = nil
  if reset ~= nil then tat = stamp + reset end
  items[i] = {alg, w, q, cost, stamp, undo, tat}
end

local now = clock(ARGV[1])
for i = 1, N do
  local it = items[i]
  if it[4] > 0 then
    refund(KEYS[i], it[1], it[2], it[3], it[4], it[5], now, it[6], it[7])
  end
end
return 0
