-- One string.find call that backtracks for hours: no instruction hook runs
-- inside it, so the server kills the lambda's process at its wall clock.
local s = string.rep("a", 5000)
return s:find(".-.-.-.-b")
