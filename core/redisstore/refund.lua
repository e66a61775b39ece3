-- refund: give back the charges of an earlier take. It mirrors core's
-- MemoryStore.Refund.
--
-- KEYS[i]    the state key of item i
-- ARGV[1]    now in Unix µs, or '' to use the server's TIME (for TTLs)
-- ARGV[2..]  5 values per item: algorithm, window µs, quota, cost, stamp µs
--            (the outcome's Stamp)

local N = #KEYS
if #ARGV ~= 1 + 5 * N then
  return redis.error_reply('quotagate: refund: want ' .. (1 + 5 * N) .. ' arguments, got ' .. #ARGV)
end
for i = 1, N do
  local alg = tonumber(ARGV[5 * i - 3])
  local w, q = tonumber(ARGV[5 * i - 2]), tonumber(ARGV[5 * i - 1])
  if alg == nil or alg < 0 or alg > 4 or w == nil or w < 1000 or q == nil or q < 1 then
    return redis.error_reply('quotagate: refund: bad limit for item ' .. i)
  end
end

local now = clock(ARGV[1])
for i = 1, N do
  local b = 5 * i - 3
  local cost = tonumber(ARGV[b + 3])
  if cost > 0 then
    refund(KEYS[i], tonumber(ARGV[b]), ARGV[b] .. ':' .. ARGV[b + 1], tonumber(ARGV[b + 1]),
      tonumber(ARGV[b + 2]), cost, tonumber(ARGV[b + 4]), now)
  end
end
return 0
