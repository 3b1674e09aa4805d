-- Never returns: the server stops it at its instruction budget, however
-- the loop tries to catch the error.
while true do
  pcall(function() while true do end end)
end
