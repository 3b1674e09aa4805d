-- The sum of the numbers in the input.
-- rdmx demo lambda HOST -f examples/lambda/sum.lua -i "1 2 3.5"
local sum = 0
for n in (...):gmatch("%-?[%d.]+") do
  sum = sum + tonumber(n)
end
return sum
