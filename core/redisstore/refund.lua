-- refund: give back the charges of an earlier take. It mirrors core's
-- MemoryStore.Refund.
--
-- KEYS[i]    the state key of item i
-- ARGV[1]    now in Unix µs, or '' to use the server's TIME (for TTLs)
-- ARGV[2..]  6 values per item: algorithm, window µs, quota, cost, stamp µs
--            (the outcome's Stamp), undo (1 to take back a sliding log
--            entry the take added; see refund in algorithms.lua)

local N = #KEYS
if #ARGV ~= 1 + 6 * N then
  return redis.error_reply('quotagate: refund: want ' .. (1 + 6 * N) .. ' arguments, got ' .. #ARGV)
end
for i = 1, N do
  local alg = tonumber(ARGV[6 * i - 4])
  local w, q = tonumber(ARGV[6 * i - 3]), tonumber(ARGV[6 * i - 2])
  if alg == nil or alg < 0 or alg > 4 or w == nil or w < 1000 or q == nil or q < 1 then
    return redis.error_reply('quotagate: refund: bad limit for item ' .. i)
  end
end

local now = clock(ARGV[1])
for i = 1, N do
  local b = 6 * i - 4
  local cost = tonumber(ARGV[b + 3])
  if cost > 0 then
    refund(KEYS[i], tonumber(ARGV[b]), ARGV[b] .. ':' .. ARGV[b + 1], tonumber(ARGV[b + 1]),
      tonumber(ARGV[b + 2]), cost, tonumber(ARGV[b + 4]), now, tonumber(ARGV[b + 5]))
  end
end
return 0
