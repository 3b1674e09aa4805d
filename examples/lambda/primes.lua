-- How many primes are below N (the input): some real work for the
-- instruction budget. rdmx demo lambda HOST -f examples/lambda/primes.lua -i 100000
local n = math.tointeger(tonumber(...)) or error("give a whole number")
local sieve, count = {}, 0
for i = 2, n - 1 do
  if not sieve[i] then
    count = count + 1
    for j = i * i, n - 1, i do sieve[j] = true end
  end
end
return count
