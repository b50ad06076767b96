-- The master's own record of its clock's steps back (clockstep.lua, run
-- at the start of continuity.lua and of marker.lua; see clock.go). The
-- marker keeps the last reading of the clock by any proxy (clk). A reading
-- below it (the clock was set back, by any amount) opens an episode in
-- which the clock is behind the highest reading so far (hi), until a
-- reading reaches hi again. Within it, a reading more than 20 ms below
-- the one before, or below the lowest counted so far (lo), counts a step
-- back (back), with its depth below hi in ms (backms): small steps add up
-- until they are counted. Every reading within the episode is kept as the
-- latest found behind (behind): a proxy that never read the clock before
-- cannot tell a clock set right again since from time gone by, so it
-- takes a recent one as a jump (clock.go).
-- clockStep takes the reading and the marker's fields; it returns the
-- count, the depth, the latest reading behind, the fields to write
-- besides clk, and whether the episode ended (hi and lo to delete).
local function clockStep(now, clk, hi, lo, back, backms, behind)
  local set = {}
  if not hi and clk and now < clk then
    hi, lo = clk, clk
    set[#set + 1], set[#set + 2] = 'hi', hi
  end
  if not hi then return back, backms, behind, set, false end
  if now >= hi then return back, backms, behind, set, true end
  if now < lo - 20 or (clk and now < clk - 20) then
    back, backms, lo = back + 1, hi - now, math.min(lo, now)
    set[#set + 1], set[#set + 2], set[#set + 3], set[#set + 4] = 'back', back, 'backms', backms
  end
  behind = now
  set[#set + 1], set[#set + 2], set[#set + 3], set[#set + 4] = 'lo', lo, 'behind', behind
  return back, backms, behind, set, false
end
