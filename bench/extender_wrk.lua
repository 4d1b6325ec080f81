-- wrk script for bench/extender_bench.py: POSTs one JSON body (the file named
-- by $GP_BENCH_BODY) on every request over wrk's keep-alive connections, and
-- prints one machine-readable line at the end (latencies in microseconds).
local f = assert(io.open(os.getenv("GP_BENCH_BODY"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "WRK_RESULT requests=%d duration_us=%d errors=%d p50_us=%d p99_us=%d max_us=%d\n",
    summary.requests, summary.duration,
    e.connect + e.read + e.write + e.status + e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
