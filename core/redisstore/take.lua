-- take: evaluate every item of one decision at one instant and, when every
-- item that is not shadow allows its cost, charge every allowed item;
-- otherwise charge nothing. It mirrors core's MemoryStore.Take.
--
-- KEYS[i]    the state key of item i
-- ARGV[1]    now in Unix µs, or '' to use the server's TIME
-- ARGV[2]    '1' to append to each item's outcome the remaining and reset
--            it has if the take is undone, and whether the charge added a
--            sliding log entry (the Store uses them when another group of a
--            cluster take denies), '' otherwise
-- ARGV[3..]  7 values per item: algorithm, window µs, quota, burst,
--            max wait µs, cost, shadow (1 or 0)
--
-- Returns a string of decimal integers separated by spaces: now, then for
-- each item allowed (1/0), charged (1/0), remaining, reset µs,
-- retry-after µs, delay µs [, undone remaining, undone reset µs, added].

local A = 2 -- arguments before the items
local N = #KEYS
if #ARGV ~= A + 7 * N then
  return redis.error_reply('quotagate: take: want ' .. (A + 7 * N) .. ' arguments, got ' .. #ARGV)
end
-- Check every item before anything is written: a script error does not
-- undo writes.
for i = 1, N do
  local b = A + 7 * (i - 1) + 1
  local alg, w, q = tonumber(ARGV[b]), tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2])
  if alg == nil or alg < 0 or alg > 4 or w == nil or w < 1000 or q == nil or q < 1 then
    return redis.error_reply('quotagate: take: bad limit for item ' .. i)
  end
end

local now = clock(ARGV[1])
local undo = ARGV[2] == '1'
local items = {}
local ok = true
for i = 1, N do
  local b = A + 7 * (i - 1) + 1
  local it = {
    key = KEYS[i],
    alg = tonumber(ARGV[b]),
    tag = ARGV[b] .. ':' .. ARGV[b + 1],
    w = tonumber(ARGV[b + 1]),
    q = tonumber(ARGV[b + 2]),
    burst = tonumber(ARGV[b + 3]),
    maxwait = tonumber(ARGV[b + 4]),
    cost = tonumber(ARGV[b + 5]),
    shadow = ARGV[b + 6] == '1',
  }
  it.s = load(it.key, it.alg, it.tag)
  it.o, it.na, it.nb, it.nc = eval(it.s, it.alg, it.w, it.q, it.burst, it.maxwait, it.cost, now)
  if not it.o[1] and not it.shadow then ok = false end
  items[i] = it
end

-- uncharged is the outcome of an allowed item when nothing is charged: the
-- current state as a cost-0 evaluation sees it (core's uncharged).
local function uncharged(it)
  local u = eval(it.s, it.alg, it.w, it.q, it.burst, it.maxwait, 0, now)
  return {true, u[2], u[3], 0, 0}
end

local out = {fmt('%d', now)}
for i = 1, N do
  local it = items[i]
  local o = it.o
  local charged, added = 0, 0
  local u
  if o[1] then
    if undo or not ok then u = uncharged(it) end
    if ok then
      added = commit(it.key, it.s, it.alg, it.tag, it.w, it.cost, now, it.na, it.nb, it.nc)
      charged = 1
    else
      o = u
    end
  end
  local allowed = 0
  if o[1] then allowed = 1 end
  local line = fmt('%d %d %d %d %d %d', allowed, charged, o[2], o[3], o[4], o[5])
  if undo then
    if u == nil then u = {false, 0, 0} end
    line = line .. fmt(' %d %d %d', u[2], u[3], added)
  end
  out[i + 1] = line
end
return table.concat(out, ' ')
