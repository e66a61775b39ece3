-- peek: evaluate the items of one decision at cost 0, at one instant, and
-- write nothing (core.Peeker: what the inspection page shows for a key).
-- The library registers it with the no-writes flag, so the server itself
-- refuses any write it would attempt.
--
-- KEYS and ARGV[1] are a take call of one decision (see take.lua); each
-- item's cost and shadow flag are ignored. Returns '<i8' integers: now (µs), then for each
-- item its flags (1: allowed), remaining, reset µs and retry-after µs, as
-- take describes an item a cost-0 evaluation of the current state sees.
--
-- State is read as take reads it, except that nothing is dropped: a
-- sliding log's entries that left the window are skipped rather than
-- deleted (L.prune on a read-only log), and a concurrency budget counts
-- the slots whose lease runs past now (ZCOUNT) rather than removing the
-- others.

local function peek_run(KEYS, ARGV)
  init()
  local blob = ARGV[1]
  if (sbyte(blob, 1) or 255) ~= 0 or #blob < 5 then return redis.error_reply('quotagate: peek: malformed call') end
  local D = sbyte(blob, 2) + 256 * sbyte(blob, 3)
  local m, nk = sbyte(blob, 4), sbyte(blob, 5)
  if D ~= 1 or m < 1 or nk ~= #KEYS then return redis.error_reply('quotagate: peek: malformed decision') end
  local now = servertime()
  reset()
  local pos, out = 6, {now}
  for i = 1, m do
    local kk, name, as, w, q, burst, maxwait, cost
    kk, name, as, w, q, burst, maxwait, cost, pos = sunpack(ITEM, blob, pos)
    local k = kk % 256
    local lk = (kk - k) / 256
    local alg = as % 16
    if alg > CONC or w < 1000 or w > MAXW or q < 1 or k < 1 or k > nk or ((alg == LOG or alg == CONC) and (lk < 1 or lk > nk)) then
      return redis.error_reply('quotagate: peek: bad limit for item ' .. i)
    end
    local a, b, c, g = 0, 0, 0, nil
    if alg == CONC then
      a, g = redis.call('ZCOUNT', KEYS[lk], fmt('(%d', now), '+inf'), true
    else
      local key = KEYS[k]
      local r = record(key, part(key), name)
      if r and r[1] == w * 8 + alg then
        if alg == LOG then
          g = sliding_log().open(KEYS[lk], w, r, now)
          if g then g.ro = true end
        else
          a, b, c, g = r[2], r[3], r[4], true
        end
      end
    end
    local al, rm, rs, ry = eval(alg, w, q, burst, maxwait, 0, now, a, b, c, g)
    local f = 0
    if al then f = 1 end
    out[#out + 1], out[#out + 2], out[#out + 3], out[#out + 4] = f, rm, rs, ry
  end
  if pos ~= #blob + 1 then return redis.error_reply('quotagate: peek: malformed items') end
  return struct.pack('<' .. string.rep('i8', #out), unpack(out))
end
