-- refund: give back the charges of an earlier take. It mirrors core's
-- MemoryStore.Refund and, in refund below, core's refund.
--
-- KEYS     the items' partitions' record keys and sliding logs' keys
-- ARGV[1]  the items, each struct '<I2sBi8i8i8i8i8i8': its partition's
--          key + 256 × its sliding log's key (0 for none), numbered from
--          1, the budget's record name, algorithm, window µs, quota, cost, stamp µs
--          (the outcome's Stamp; a concurrency slot's id), undo (1 for a sliding log entry a
--          cluster take added; see refund), reset µs (the outcome's Reset;
--          see refund's tat)

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
-- its Reset, µs) for a token or leaky bucket.
local function refund(key, logkey, name, alg, w, q, cost, stamp, now, tat)
  local P = part(key)
  local a, b, c, g = state(key, P, name, alg, w, logkey, now)
  if g == nil then return end -- nothing stored
  if alg == LOG then
    -- A log rebuilt after an eviction no longer knows its charges' times:
    -- it keeps what it counts.
    if g.rebuilt then return end
    local L = sliding_log()
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
          redis.call('HSET', logkey, 's', g.sum)
          return
        end
        -- Remove entry i: move the later ones down, drop the last index.
        for j = i, g.h - 2 do
          local tj, nj = L.entry(g, j + 1)
          L.set(g, j, tj, nj)
        end
        redis.call('HDEL', logkey, g.h - 1)
        g.cache[g.h - 1] = nil
        g.h = g.h - 1
        L.write(g, w, now)
        log_written(key, P, name, w, g)
        return
      end
      if ts < stamp then return end
      i = i - 1
    end
    return
  end
  if alg == FIXED then
    if fixed_start(stamp, w) ~= a then return end
    b = max(0, b - cost)
  elseif alg == SLIDING then
    local _, wm, ws = sliding_window(stamp, w)
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
    a = a - min(max(tat - now, 0), cost * -fdiv(-w, q))
  end
  put(key, P, name, w * 8 + alg, a, b, c)
end

local RITEM = '<I2sBi8i8i8i8i8i8'

-- refund_run gives back the charges of one call (KEYS and ARGV as above).
local function refund_run(KEYS, ARGV)
  local NK = #KEYS
  local blob = ARGV[1]
  -- Decode and check every item before giving anything back.
  local IT = {}
  local N, pos, len = 0, 1, #blob
  while pos <= len do
    local o = 10 * N
    local kk
    kk, IT[o + 3], IT[o + 4], IT[o + 5], IT[o + 6], IT[o + 7], IT[o + 8], IT[o + 9], IT[o + 10], pos = struct.unpack(RITEM, blob, pos)
    IT[o + 1] = kk % 256
    IT[o + 2] = (kk - IT[o + 1]) / 256
    N = N + 1
    local k, lk, alg = IT[o + 1], IT[o + 2], IT[o + 4]
    if alg > CONC or IT[o + 5] < 1000 or IT[o + 5] > 1125899906842624 or IT[o + 6] < 1 or k < 1 or k > NK or ((alg == LOG or alg == CONC) and (lk < 1 or lk > NK)) then
      return redis.error_reply('quotagate: refund: bad limit for item ' .. N)
    end
  end

  local now = begin()
  reset()
  for i = 1, N do
    local o = 10 * (i - 1)
    local alg, cost = IT[o + 4], IT[o + 7]
    if cost > 0 and alg == CONC then
      conc_release(KEYS[IT[o + 2]], IT[o + 8], cost) -- the stamp is the slot's id
    elseif cost > 0 then
      local logkey = false
      if alg == LOG then logkey = KEYS[IT[o + 2]] end
      refund(KEYS[IT[o + 1]], logkey, IT[o + 3], alg, IT[o + 5], IT[o + 6], cost, IT[o + 8], now, IT[o + 8] + IT[o + 10])
    end
  end
  flush(now)
  return 0
end
