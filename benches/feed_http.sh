#!/usr/bin/env bash
# What the feed example's filters cost over HTTP (issue 46): the release `feed --serve`
# (`examples/feed_main.rs`) started twice on free ports with the same flags, once as the
# service (one windowed filter per user in a `FilterSet`) and once with `--no-filter` (the same
# routes, request handling and JSON with the filter calls removed: every candidate counts as
# not seen, nothing is recorded). `wrk` loads them in turns A, B, A, B, ...
#
# The workload: a feed whose catalogue grows, as a week of a busy feed compressed into
# seconds. ITEMS_PER_SEC (default 10) new items arrive each second (`--items-per-day`), a
# response shows the newest 10 of the 200 newest items the user has not been shown, and an
# item shown is not shown again within WINDOW_SECS (default 10; `--window-secs`, 8
# generations of 10/7 s). With 100,000 users each requesting about every 2 s (the filtered
# service's rate here), most pages are 10 fresh items and some (users asking again within a
# second) hold fewer, with the rest withheld as shown; a user is shown at most about
# ITEMS_PER_SEC x WINDOW_SECS = 100 items a window, the 100 each filter is sized for, so the
# filters run at their sized rate. The baseline answers the newest 10 on every request. The
# script prints the mix it measured (items and withheld per page, from `GET /stats`).
#
#   * warm-up: each service gets WARM_SECS of a sweep over the user ids in order (every
#     user's filter is created, so the runs measure the steady state, not first touches);
#   * ROUNDS rounds, each `wrk -c CONNECTIONS -t THREADS -d SECS` against the service (A)
#     then the baseline (B); every request is `GET /feed/<user>` for a user drawn uniformly
#     from 0..USERS (a Lua script; the same seeds on both sides). The service not being
#     measured is stopped (SIGSTOP) for the other's run, so the filtered service's periodic
#     flush runs in its own runs, never in the baseline's. A run (SECS, default 28) is just
#     shorter than the flush interval (30 s) and the flush missed while stopped runs once at
#     resumption (`feed`'s flusher delays a late tick): each filtered run holds exactly one
#     flush, at its start, of the users changed in the previous run: what a service serving
#     without pause pays for a flush every 30 s. With FLUSH_SECS=60 set SECS=58;
#   * per run: requests/s, latency p50 and p99 (wrk's own histogram), the service's CPU time
#     (user and system, from /proc/<pid>/stat) per page it answered, errors; per side: the
#     median; then the ratio filter / no-filter of time per request (no-filter req/s over
#     filter req/s), of the latencies and of the service's CPU per request. Target (issue
#     46): at most 1.5x (the filters' share of a request at most a third). Saturated, the
#     time per request also holds wrk's share of the 2 cores and its wake-ups, which grow
#     when the server is the slower one; the service's CPU per request is its own. Paced
#     (DELAY_MS), both sides serve the same rate and the CPU ratio is the reading.
#
# The default flags: the issue's 100,000 users, 32 connections and 2 threads; 3 rounds of
# 28 s a run.
# BUDGET_MIB (default 512) is the filters' memory budget: 100,000 filters fit, so none is
# evicted (set BUDGET_MIB=64 to measure evictions and loads from the store). Both services
# store into their own temporary directory (`fsync` off): STORE=sqlite (the default, `feed
# --store sqlite`: one database file, a flush's 512 users a transaction) or STORE=files (one
# file per user, `--store files`); the service stores the
# filters changed since the last flush every FLUSH_SECS (default: `feed --serve`'s own, 30 s;
# FLUSH_SECS=3600 leaves the store out of the runs, to separate the filters in memory from
# the store).
#
#   benches/feed_http.sh                                   # the issue's measurement
#   SECS=20 ROUNDS=2 FLUSH_SECS=1 benches/feed_http.sh   # a flush a second (the old default)
#   BUILD=0 benches/feed_http.sh     # the feed binary already built, as it is
#   CONNECTIONS=40 DELAY_MS=1 benches/feed_http.sh  # equal load: each connection waits 1 ms
#                                    # after a response (about 25,000 requests/s on both sides);
#                                    # the reading is then the service CPU per request
#   PERF=1 benches/feed_http.sh      # also `perf record -g` each service during its last run
#                                    # (target/feed_http.{filter,nofilter}.perf.data and .txt)
#
# The server and wrk share the machine's cores (the output says how many and the load
# average): read the ratio, not the absolute figures. Needs `wrk` on the PATH; without it the
# script prints a loud SKIPPED line and exits 0 (CI machines may not have it).
set -euo pipefail

USERS=${USERS:-100000}
CONNECTIONS=${CONNECTIONS:-32}
THREADS=${THREADS:-2}
SECS=${SECS:-28}
WARM_SECS=${WARM_SECS:-15}
ROUNDS=${ROUNDS:-3}
BUDGET_MIB=${BUDGET_MIB:-512}
FLUSH_SECS=${FLUSH_SECS:-}
STORE=${STORE:-sqlite}
ITEMS_PER_SEC=${ITEMS_PER_SEC:-10}
WINDOW_SECS=${WINDOW_SECS:-10}
PERF=${PERF:-0}
DELAY_MS=${DELAY_MS:-}

if ! command -v wrk >/dev/null 2>&1; then
    echo "feed_http: SKIPPED: wrk is not installed (apt-get install wrk); nothing measured" >&2
    echo "feed_http: SKIPPED: wrk is not installed (apt-get install wrk); nothing measured"
    exit 0
fi

cd "$(dirname "$0")/.."
if [ "${BUILD:-1}" = 1 ]; then
    echo "feed_http: building the release feed example" >&2
    # --workspace: the features `cargo test --workspace --release` builds with (no rebuild).
    cargo build --release --workspace --example feed >&2
fi
target_dir=$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
BIN="$target_dir/release/examples/feed"

work=$(mktemp -d -t feed_http.XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do
        kill -CONT "$pid" 2>/dev/null || true # a paused service handles its TERM
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

# start NAME [FLAGS...]: the release feed on a free port; sets $addr and $pid.
start() {
    local name=$1
    shift
    local flush=()
    [ -n "$FLUSH_SECS" ] && flush=(--flush-secs "$FLUSH_SECS")
    "$BIN" --serve --port 0 --store "$STORE" --store-dir "$work/$name-store" --budget-mib "$BUDGET_MIB" \
        --window-secs "$WINDOW_SECS" --items-per-day $((ITEMS_PER_SEC * 86400)) \
        "${flush[@]}" "$@" \
        >"$work/$name.log" 2>&1 &
    pid=$!
    pids+=("$pid")
    for _ in $(seq 600); do
        addr=$(sed -n 's|^feed: listening on http://\([0-9.:]*\).*|\1|p' "$work/$name.log")
        [ -n "$addr" ] && return 0
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "feed_http: the $name service exited:" >&2
            cat "$work/$name.log" >&2
            exit 1
        fi
        sleep 0.1
    done
    echo "feed_http: the $name service did not start:" >&2
    cat "$work/$name.log" >&2
    exit 1
}

# The measured load: GET /feed/<user>, user uniform in 0..USERS, each thread its own seed.
cat >"$work/random.lua" <<'LUA'
local users = tonumber(os.getenv("USERS"))
local seed = tonumber(os.getenv("SEED"))
local delay_ms = tonumber(os.getenv("DELAY_MS") or "")
local threads = 0
function setup(thread)
    thread:set("id", threads)
    threads = threads + 1
end
function init(args)
    math.randomseed(seed * 1000 + id)
end
function request()
    return wrk.format("GET", "/feed/" .. math.random(0, users - 1))
end
if delay_ms then
    -- Each connection waits this long after a response before its next request.
    function delay()
        return delay_ms
    end
end
function done(summary, latency, requests)
    local e = summary.errors
    io.write(string.format("RESULT %.1f %.3f %.3f %d %d\n",
        summary.requests / (summary.duration / 1e6),
        latency:percentile(50) / 1e3, latency:percentile(99) / 1e3,
        e.connect + e.read + e.write + e.timeout, e.status))
end
LUA

# The warm-up: every thread sweeps the user ids in order, interleaved with the others.
cat >"$work/sweep.lua" <<'LUA'
local users = tonumber(os.getenv("USERS"))
local stride = tonumber(os.getenv("THREADS"))
local threads = 0
function setup(thread)
    thread:set("id", threads)
    threads = threads + 1
end
local n = nil
function request()
    n = n or id
    local user = n % users
    n = n + stride
    return wrk.format("GET", "/feed/" .. user)
end
LUA

start filter
filter_addr=$addr
filter_pid=$pid
start nofilter --no-filter
nofilter_addr=$addr
nofilter_pid=$pid

# pause SIDE / resume SIDE: SIGSTOP / SIGCONT the service (the other one runs meanwhile).
pause() {
    local p=${1}_pid
    kill -STOP "${!p}"
}
resume() {
    local p=${1}_pid
    kill -CONT "${!p}"
}
# stat SIDE FIELD: a number from the service's /stats.
stat() {
    local a=${1}_addr
    curl -s "http://${!a}/stats" | tr ',{}' '\n\n\n' | sed -n "s/^\"$2\":\([0-9]*\)$/\1/p"
}
# cpu_ticks PID: the process's user and system CPU time so far, in clock ticks.
cpu_ticks() {
    awk '{print $14 + $15}' "/proc/$1/stat"
}
# mix SIDE: "pages items withheld" from the service's /stats.
mix() {
    local a=${1}_addr
    curl -s "http://${!a}/stats" | tr ',{}' '\n\n\n' |
        awk -F: '/"pages"/ {p=$2} /"items_answered"/ {i=$2} /"items_withheld"/ {w=$2}
            END {print p + 0, i + 0, w + 0}'
}

cores=$(nproc)
echo "feed_http: feed --serve on $filter_addr (filters) and $nofilter_addr (--no-filter);" \
    "--store $STORE --budget-mib $BUDGET_MIB --flush-secs ${FLUSH_SECS:-(default)} --window-secs $WINDOW_SECS" \
    "--items-per-day $((ITEMS_PER_SEC * 86400)); $USERS users, wrk -c $CONNECTIONS -t $THREADS -d ${SECS}s," \
    "$ROUNDS rounds A/B; store: a temporary directory"
echo "feed_http: NOTE: $cores cores shared by both services and wrk (the load generator takes" \
    "a large share of them): the absolute figures are the machine's and the client's, read" \
    "the ratio"
echo "feed_http: load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

export USERS THREADS DELAY_MS
pause nofilter
for side in filter nofilter; do
    a=${side}_addr
    [ "$side" = nofilter ] && resume nofilter && pause filter
    echo "feed_http: warming up $side (${WARM_SECS}s sweep over the users)" >&2
    wrk -c "$CONNECTIONS" -t "$THREADS" -d "${WARM_SECS}s" -s "$work/sweep.lua" \
        "http://${!a}" >/dev/null
done
resume filter
read -r f_pages0 f_items0 f_withheld0 <<<"$(mix filter)"
read -r n_pages0 n_items0 n_withheld0 <<<"$(mix nofilter)"

# run SIDE ROUND: one measured wrk run; appends "rps p50 p99" to $work/SIDE.
run() {
    local side=$1 round=$2 a=${1}_addr out pid_var=${1}_pid
    local perf_pid=
    if [ "$PERF" = 1 ] && [ "$round" = "$ROUNDS" ]; then
        perf record -F 999 -g -p "${!pid_var}" -o "$work/perf.data" -- sleep "$SECS" \
            >/dev/null 2>&1 &
        perf_pid=$!
    fi
    local stores0 pages0 cpu0
    stores0=$(stat "$side" stores)
    pages0=$(stat "$side" pages)
    cpu0=$(cpu_ticks "${!pid_var}")
    out=$(SEED=$round wrk -c "$CONNECTIONS" -t "$THREADS" -d "${SECS}s" --timeout 10s \
        -s "$work/random.lua" "http://${!a}")
    if [ -n "$perf_pid" ]; then
        wait "$perf_pid" || true
        perf report -i "$work/perf.data" --no-children --percent-limit 0.5 --stdio \
            -g none --sort dso,symbol 2>/dev/null >"$target_dir/feed_http.$side.perf.txt" || true
        cp "$work/perf.data" "$target_dir/feed_http.$side.perf.data"
        echo "feed_http: perf profile of the $side service's last run:" \
            "$target_dir/feed_http.$side.perf.data, $target_dir/feed_http.$side.perf.txt" >&2
    fi
    local line
    line=$(grep '^RESULT ' <<<"$out") || {
        echo "feed_http: wrk printed no result:" >&2
        echo "$out" >&2
        exit 1
    }
    read -r _ rps p50 p99 errors status <<<"$line"
    local cpu_us
    cpu_us=$(awk -v t="$(($(cpu_ticks "${!pid_var}") - cpu0))" -v hz="$(getconf CLK_TCK)" \
        -v p="$(($(stat "$side" pages) - pages0))" 'BEGIN { printf "%.1f", t / hz * 1e6 / (p ? p : 1) }')
    printf "%-10s round %d: %9.0f requests/s  p50 %7.3f ms  p99 %7.3f ms  service CPU %5.1f us a request  errors %d, non-2xx %d, filters stored %d\n" \
        "$side" "$round" "$rps" "$p50" "$p99" "$cpu_us" "$errors" "$status" "$(($(stat "$side" stores) - stores0))"
    echo "$rps $p50 $p99 $cpu_us" >>"$work/$side"
}

for round in $(seq "$ROUNDS"); do
    pause nofilter
    resume filter
    run filter "$round"
    pause filter
    resume nofilter
    run nofilter "$round"
done
resume filter
read -r f_pages1 f_items1 f_withheld1 <<<"$(mix filter)"
read -r n_pages1 n_items1 n_withheld1 <<<"$(mix nofilter)"

# median COLUMN FILE
median() {
    awk -v c="$1" '{print $c}' "$2" | sort -g |
        awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'
}
f_rps=$(median 1 "$work/filter") n_rps=$(median 1 "$work/nofilter")
f_p50=$(median 2 "$work/filter") n_p50=$(median 2 "$work/nofilter")
f_p99=$(median 3 "$work/filter") n_p99=$(median 3 "$work/nofilter")
f_cpu=$(median 4 "$work/filter") n_cpu=$(median 4 "$work/nofilter")
printf "median     filter:    %9.0f requests/s  p50 %7.3f ms  p99 %7.3f ms  service CPU %5.1f us a request\n" "$f_rps" "$f_p50" "$f_p99" "$f_cpu"
printf "median     no-filter: %9.0f requests/s  p50 %7.3f ms  p99 %7.3f ms  service CPU %5.1f us a request\n" "$n_rps" "$n_p50" "$n_p99" "$n_cpu"
awk -v f="$f_rps" -v n="$n_rps" -v fp50="$f_p50" -v np50="$n_p50" -v fp99="$f_p99" -v np99="$n_p99" \
    -v fc="$f_cpu" -v nc="$n_cpu" -v paced="$DELAY_MS" \
    'BEGIN {
        r = n / f
        c = fc / nc
        if (paced == "") {
            printf "ratio filter/no-filter: time per request %.2fx (%s the 1.5x target; the filters %.0f %% of a request), p50 %.2fx, p99 %.2fx, service CPU a request %.2fx\n",
                r, (r <= 1.5 ? "within" : "ABOVE"), 100 * (1 - 1 / r), fp50 / np50, fp99 / np99, c
        } else {
            # Paced: the request rate is the pacing'"'"'s, so the service'"'"'s CPU is the reading.
            printf "ratio filter/no-filter at equal load (paced, DELAY_MS=%s): service CPU a request %.2fx (%s the 1.5x target; the filters %.0f %% of the service'"'"'s time), requests/s %.2fx, p50 %.2fx, p99 %.2fx\n",
                paced, c, (c <= 1.5 ? "within" : "ABOVE"), 100 * (1 - 1 / c), r, fp50 / np50, fp99 / np99
        }
    }'
awk -v p="$((f_pages1 - f_pages0))" -v i="$((f_items1 - f_items0))" -v w="$((f_withheld1 - f_withheld0))" \
    -v np="$((n_pages1 - n_pages0))" -v ni="$((n_items1 - n_items0))" -v nw="$((n_withheld1 - n_withheld0))" \
    'BEGIN {
        printf "the measured runs'"'"' pages: filter %d pages, %.2f items and %.2f withheld a page; no-filter %d pages, %.2f items and %.2f withheld a page\n",
            p, i / (p ? p : 1), w / (p ? p : 1), np, ni / (np ? np : 1), nw / (np ? np : 1)
    }'
stats=$(curl -s "http://$filter_addr/stats" || true)
echo "feed_http: the service's filter set after the runs: $stats"
echo "feed_http: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
