-- The most frequent words of the input, one "count word" per line.
-- rdmx demo lambda HOST -f examples/lambda/wordcount.lua --input-file README.md
local text = ...
local counts = {}
for w in text:lower():gmatch("%a+") do
  counts[w] = (counts[w] or 0) + 1
end
local words = {}
for w in pairs(counts) do words[#words + 1] = w end
table.sort(words, function(a, b)
  if counts[a] ~= counts[b] then return counts[a] > counts[b] end
  return a < b
end)
local out = {}
for i = 1, math.min(10, #words) do
  out[#out + 1] = string.format("%d %s", counts[words[i]], words[i])
end
return table.concat(out, "\n") .. "\n"
