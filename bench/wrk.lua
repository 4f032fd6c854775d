-- wrk script: method, body and x-api-key from BENCH_* variables, optional random paths from a file;
-- prints one JSON line with requests, duration, p50/p99 latency, socket errors and status counts.
wrk.method = os.getenv("BENCH_METHOD") or "GET"
local body = os.getenv("BENCH_BODY") or ""
if body ~= "" then
  wrk.body = body
  wrk.headers["Content-Type"] = "application/json"
end
local key = os.getenv("BENCH_API_KEY") or ""
if key ~= "" then wrk.headers["x-api-key"] = key end

local threads = {}
function setup(thread)
  table.insert(threads, thread)
end

local paths = {}
function init(args)
  statuses = {}
  local file = os.getenv("BENCH_PATHS_FILE") or ""
  if file ~= "" then
    for line in io.lines(file) do table.insert(paths, line) end
  end
  math.randomseed(os.time())
end

function request()
  if #paths > 0 then
    return wrk.format(nil, paths[math.random(#paths)])
  end
  return wrk.format()
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local codes = {}
  for _, thread in ipairs(threads) do
    for code, n in pairs(thread:get("statuses")) do
      table.insert(codes, string.format('"%d": %d', code, n))
    end
  end
  local e = summary.errors
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "p50_us": %d, "p99_us": %d, "errors": %d, "statuses": {%s}}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.timeout, table.concat(codes, ", ")))
end
