-- refund: give back the charges of an earlier take. It mirrors core's
-- MemoryStore.Refund and, in refund below, core's refund.
--
-- KEYS[i]  the state key of item i
-- ARGV[1]  '' to use the server's TIME (for TTLs), or a test's injected
--          time (see clock)
-- ARGV[2]  the items, six '<i8' integers each: algorithm, window µs,
--          quota, cost, stamp µs (the outcome's Stamp), undo (1 to take
--          back a sliding log entry the take added; see refund)

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
        if undo == 1 and i == g.h - 1 and n == cost then
          redis.call('HDEL', key, i)
          g.cache[i] = nil
          g.h = i
          L.write(g, w, now)
        else
          L.set(g, i, ts, n - take)
          redis.call('HSET', key, 's', g.sum)
        end
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
    a = a - cost * -fdiv(-w, q)
  end
  write_state(key, alg, w, a, b, c, now, kept)
end

local ITEM = '<i8i8i8i8i8i8'
local N = #KEYS
local blob = ARGV[2]
if #blob ~= 48 * N then
  return redis.error_reply('quotagate: refund: want ' .. N .. ' items of 48 bytes, got ' .. #blob .. ' bytes')
end
local items = {}
local pos = 1
for i = 1, N do
  local alg, w, q, cost, stamp, undo
  alg, w, q, cost, stamp, undo, pos = struct.unpack(ITEM, blob, pos)
  if alg < 0 or alg > 4 or w < 1000 or q < 1 then
    return redis.error_reply('quotagate: refund: bad limit for item ' .. i)
  end
  items[i] = {alg, w, q, cost, stamp, undo}
end

local now = clock(ARGV[1])
for i = 1, N do
  local it = items[i]
  if it[4] > 0 then
    refund(KEYS[i], it[1], it[2], it[3], it[4], it[5], now, it[6])
  end
end
return 0
