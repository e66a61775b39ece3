-- take: evaluate every item of one decision at one instant and, when every
-- item that is not shadow allows its cost, charge every allowed item;
-- otherwise charge nothing. It mirrors core's MemoryStore.Take.
--
-- KEYS[i]  the state key of item i
-- ARGV[1]  '' to use the server's TIME, or a test's injected time (see
--          clock)
-- ARGV[2]  '1' to add to each item's outcome what it is if the take is
--          undone (the Store needs it when another group of a cluster take
--          denies), '' otherwise
-- ARGV[3]  the items, seven '<i8' integers each: algorithm, window µs,
--          quota, burst, max wait µs, cost, shadow (1 or 0)
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
local now = clock(ARGV[1])
local undo = ARGV[2] == '1'

-- Evaluate every item. Nothing is written before the charges, except
-- that a sliding log drops entries that have left its window (which does
-- not change what it means).
local items = {}
local ok = true
local pos = 1
for i = 1, N do
  local alg, w, q, burst, maxwait, cost, shadow
  alg, w, q, burst, maxwait, cost, shadow, pos = struct.unpack(ITEM, blob, pos)
  if alg < 0 or alg > 4 or w < 1000 or q < 1 or cost < 0 then
    return redis.error_reply('quotagate: take: bad limit for item ' .. i)
  end
  local a, b, c, g = load(KEYS[i], alg, w)
  local al, rm, rs, ry, dl, na, nb, nc = eval(alg, w, q, burst, maxwait, cost, now, a, b, c, g)
  if not al and shadow == 0 then ok = false end
  items[i] = {alg, w, q, burst, maxwait, cost, a, b, c, g, al, rm, rs, ry, dl, na, nb, nc}
end

local out = {now}
local n = 1
for i = 1, N do
  local it = items[i]
  local al, rm, rs, ry, dl = it[11], it[12], it[13], it[14], it[15]
  local charged, added, urm, urs = 0, 0, 0, 0
  if al then
    if undo or not ok then
      -- core's uncharged: the current state as a cost-0 evaluation sees it.
      local _
      _, urm, urs = eval(it[1], it[2], it[3], it[4], it[5], 0, now, it[7], it[8], it[9], it[10])
    end
    if ok then
      added = commit(KEYS[i], it[1], it[2], it[6], now, it[16], it[17], it[18], it[10])
      charged = 1
    else
      rm, rs, ry, dl = urm, urs, 0, 0
    end
  end
  local allowed = 0
  if al then allowed = 1 end
  out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5], out[n + 6] = allowed, charged, rm, rs, ry, dl
  n = n + 6
  if undo then
    out[n + 1], out[n + 2], out[n + 3] = urm, urs, added
    n = n + 3
  end
end
if n == 7 then
  return struct.pack('<i8i8i8i8i8i8i8', out[1], out[2], out[3], out[4], out[5], out[6], out[7])
end
return struct.pack('<' .. string.rep('i8', n), unpack(out))
