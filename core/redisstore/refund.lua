-- refund: give back the charges of an earlier take. It mirrors core's
-- MemoryStore.Refund.
--
-- KEYS[i]  the state key of item i
-- ARGV[1]  '' to use the server's TIME (for TTLs), or a test's injected
--          time (see clock)
-- ARGV[2]  the items, six '<i8' integers each: algorithm, window µs,
--          quota, cost, stamp µs (the outcome's Stamp), undo (1 to take
--          back a sliding log entry the take added; see refund in
--          algorithms.lua)

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
