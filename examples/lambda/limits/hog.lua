-- Allocates without bound: the server stops it at its memory cap.
local t = {}
while true do
  t[#t + 1] = string.rep("x", 1 << 20) .. #t
end
