//! What one filter shared through Redis (`bloom-redis`) costs in Redis traffic: three
//! instances (three `SharedFilter`s, each with its own `RedisSync`, in this process) share a
//! 100M-key filter at 1% (~120 MB). Bytes are Redis's own counters (`INFO stats`:
//! `total_net_output_bytes` is what Redis sent to the instances, `total_net_input_bytes` what
//! it received from them), read on a separate plain connection before and after each window.
//!
//! Figures, one Markdown table row each:
//! 1. idle: no inserts, no checks, for `IDLE_SECS`: bytes per instance per minute, and the CPU
//!    this process used (utime + stime from `/proc/self/stat`) per instance, as % of a core;
//! 2. 10,000 inserts on instance 1: from the first insert until the other two hold every key,
//!    plus one reconcile interval and 1 s (the reconciliations they trigger); raw, and net of
//!    the idle rate over the same period; and what one pass pulls on a fourth instance that
//!    missed them (pub/sub off): the segments they touched;
//! 3. a Redis outage (SIGSTOP for `OUTAGE_SECS`) during which 100,000 keys are inserted,
//!    spread over the three instances: time from SIGCONT until every instance holds all of
//!    them (raw filters polled every 50 ms), and the bytes from SIGCONT until then;
//! 4. one `reconcile_now` on an idle instance (median of 5);
//! 5. one `full_pass_now` (Redis hashes every segment) on an idle instance (median of 3), with
//!    redis-server's CPU time per pass; and each instance's last reconciliation report.
//!
//! Needs `redis-server` on the PATH (started here on a free port, no persistence); without it
//! the bench prints a loud SKIPPED line and exits. Takes about 3 minutes with the defaults;
//! `IDLE_SECS`, `OUTAGE_SECS`, `SETTLE_SECS` (2), `RECONCILE_SECS` (10), `SEGMENT_BYTES` (the
//! library's default) and `KEYS` (100000000) override them.
//!
//! `cargo bench -p bloom-benches --bench redis_traffic`

use std::time::{Duration, Instant};

use bloom_core::BloomFilter;
use bloom_redis::RedisSync;
use bloom_tower::SharedFilter;

const SEED: u128 = 0xb10_0b10_0b10_0b10_0b10_0b10_0b10;
const PREFIX: &str = "bench-traffic";
const INSTANCES: usize = 3;
/// Keys inserted on instance 1 for figure 2, and during the outage for figure 3; both far
/// from the initial `0..KEYS`.
const BURST: u64 = 10_000;
const BURST_FROM: u64 = 1 << 40;
const OUTAGE_KEYS: u64 = 100_000;
const OUTAGE_FROM: u64 = 2 << 40;

/// The throwaway `redis-server` bloom-redis's tests use (random port, no persistence).
#[path = "../crates/bloom-redis/tests/common/mod.rs"]
mod redis_server;

fn filter(items: u64) -> BloomFilter {
    BloomFilter::builder()
        .expected_items(items)
        .false_positive_rate(0.01)
        .seed(SEED)
        .build()
        .unwrap()
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a whole number")),
        Err(_) => default,
    }
}

/// Redis's `total_net_input_bytes` / `total_net_output_bytes`.
#[derive(Clone, Copy, Debug)]
struct Traffic {
    /// Bytes Redis received (from the instances).
    input: u64,
    /// Bytes Redis sent (to the instances).
    output: u64,
}

impl Traffic {
    fn read(conn: &mut redis::Connection) -> Self {
        let info: String = redis::cmd("INFO").arg("stats").query(conn).unwrap();
        let field = |name: &str| -> u64 {
            info.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .unwrap_or_else(|| panic!("INFO stats has no {name}"))
                .trim()
                .parse()
                .unwrap()
        };
        Self {
            input: field("total_net_input_bytes"),
            output: field("total_net_output_bytes"),
        }
    }

    fn since(self, earlier: Self) -> Self {
        Self {
            input: self.input - earlier.input,
            output: self.output - earlier.output,
        }
    }
}

/// `1.5 MiB`, `12.0 KiB`, `512 B`; signed (net figures may be negative).
fn human(bytes: f64) -> String {
    const KIB: f64 = 1024.0;
    const MIB: f64 = 1024.0 * 1024.0;
    let size = bytes.abs();
    if size >= MIB {
        format!("{:.1} MiB", bytes / MIB)
    } else if size >= KIB {
        format!("{:.1} KiB", bytes / KIB)
    } else {
        format!("{bytes:.0} B")
    }
}

/// `total (per instance)`.
fn fleet(bytes: f64) -> String {
    format!(
        "{} ({} per instance)",
        human(bytes),
        human(bytes / INSTANCES as f64)
    )
}

/// Clock ticks per second of `/proc/*/stat` (`getconf CLK_TCK`; 100 on Linux if that fails).
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok()?.trim().parse().ok())
        .unwrap_or(100.0)
}

/// CPU seconds (user + system, every thread) used so far by process `pid` ("self" for this
/// one), from `/proc/<pid>/stat`.
fn cpu_seconds(pid: &str, ticks: f64) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces), from field 3 (state) on:
    // utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')').unwrap() + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields[11].parse().unwrap();
    let stime: f64 = fields[12].parse().unwrap();
    (utime + stime) / ticks
}

/// Polls the raw local filters (not `SharedFilter::contains`, which may let a key through
/// while a view is stale) every `poll` until each of `syncs` holds every key; how long that
/// took. Panics after `limit`.
fn wait_until_held(
    syncs: &[RedisSync<u64>],
    keys: &[u64],
    poll: Duration,
    limit: Duration,
) -> Duration {
    let started = Instant::now();
    let mut missing: Vec<Vec<u64>> = syncs.iter().map(|_| keys.to_vec()).collect();
    loop {
        for (sync, missing) in syncs.iter().zip(&mut missing) {
            let current = sync.filter().current();
            missing.retain(|key| !current.contains(key));
        }
        if missing.iter().all(Vec::is_empty) {
            return started.elapsed();
        }
        let counts: Vec<usize> = missing.iter().map(Vec::len).collect();
        assert!(
            started.elapsed() < limit,
            "not converged after {limit:?}: keys still missing per instance {counts:?}"
        );
        std::thread::sleep(poll);
    }
}

fn main() {
    let Some(mut server) = redis_server::start() else {
        return;
    };
    let url = server.url();
    let keys = env_u64("KEYS", 100_000_000);
    let idle = Duration::from_secs(env_u64("IDLE_SECS", 60));
    let outage = Duration::from_secs(env_u64("OUTAGE_SECS", 60));
    let settle = Duration::from_secs(env_u64("SETTLE_SECS", 2));
    let reconcile_every = Duration::from_secs(env_u64("RECONCILE_SECS", 10));
    let segment_bytes = std::env::var("SEGMENT_BYTES")
        .ok()
        .map(|_| env_u64("SEGMENT_BYTES", 0));
    let ticks = clock_ticks();
    let redis_pid = server.pid().to_string();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut info = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let run = Instant::now();
    println!("cargo bench -p bloom-benches --bench redis_traffic");

    // The first instance's filter, filled before it joins (nothing is published), on every core.
    let started = Instant::now();
    let first = filter(keys);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    std::thread::scope(|s| {
        for t in 0..threads {
            let first = &first;
            s.spawn(move || first.insert_many(keys * t / threads..keys * (t + 1) / threads));
        }
    });
    let fill = started.elapsed();
    let size = first.size_in_bytes();

    // Instance 1 joins (pushes its bits), then 2 and 3 (pull them at join).
    let mut joins = Vec::new();
    let syncs: Vec<RedisSync<u64>> = rt.block_on(async {
        let mut syncs = Vec::new();
        let filters = [first, filter(keys), filter(keys)];
        for (i, f) in filters.into_iter().enumerate() {
            let shared = SharedFilter::<u64>::builder()
                .name(format!("instance-{}", i + 1))
                .build(f);
            let mut builder = RedisSync::builder(&url)
                .prefix(PREFIX)
                .reconcile_every(reconcile_every);
            if let Some(bytes) = segment_bytes {
                builder = builder.segment_bytes(bytes);
            }
            let started = Instant::now();
            syncs.push(builder.connect(&shared).await.unwrap());
            joins.push(started.elapsed());
        }
        syncs
    });
    for sync in &syncs {
        assert!(
            sync.filter().current().contains(&(keys - 1)),
            "a joiner did not pull"
        );
    }
    println!(
        "setup: {INSTANCES} instances in one process (tokio, 2 workers), {keys} u64 keys at 1% \
         ({:.1} MB), reconcile_every {reconcile_every:?}, segment_bytes {}, other settings \
         default; filled in {fill:.2?} on {threads} threads; joins {:.2?} (pushes), {:.2?}, \
         {:.2?} (pull)",
        size as f64 / 1e6,
        segment_bytes.map_or("default".to_string(), |b| b.to_string()),
        joins[0],
        joins[1],
        joins[2],
    );
    std::thread::sleep(settle);
    println!();
    println!("| figure | out of Redis (to instances) | into Redis (from instances) | also |");
    println!("|---|---|---|---|");

    // 1. Idle.
    let reconciles = |syncs: &[RedisSync<u64>]| -> Vec<u64> {
        syncs.iter().map(|s| s.stats().reconciles).collect()
    };
    let reconciles_before = reconciles(&syncs);
    let (cpu_before, redis_cpu_before) =
        (cpu_seconds("self", ticks), cpu_seconds(&redis_pid, ticks));
    let before = Traffic::read(&mut info);
    let started = Instant::now();
    std::thread::sleep(idle);
    let idle_traffic = Traffic::read(&mut info).since(before);
    let window = started.elapsed().as_secs_f64();
    let (cpu, redis_cpu) = (
        cpu_seconds("self", ticks) - cpu_before,
        cpu_seconds(&redis_pid, ticks) - redis_cpu_before,
    );
    let in_window: Vec<String> = reconciles(&syncs)
        .iter()
        .zip(&reconciles_before)
        .map(|(after, before)| (after - before).to_string())
        .collect();
    let per_minute = |bytes: u64| human(bytes as f64 / INSTANCES as f64 / window * 60.0);
    println!(
        "| idle, per instance per minute ({window:.1} s window) | {} | {} | CPU {:.1}% of a core \
         per instance (redis-server {:.1}% of a core); reconciles in the window {} |",
        per_minute(idle_traffic.output),
        per_minute(idle_traffic.input),
        cpu / INSTANCES as f64 / window * 100.0,
        redis_cpu / window * 100.0,
        in_window.join("/"),
    );
    let idle_rate = |traffic: u64, period: f64| traffic as f64 / window * period;

    // A fourth instance that hears nothing (pub/sub off, no periodic pass): after the burst,
    // its one pass shows what a pass that missed the inserts pulls.
    let deaf = rt.block_on(async {
        let shared = SharedFilter::<u64>::builder()
            .name("deaf")
            .build(filter(keys));
        let mut builder = RedisSync::builder(&url)
            .prefix(PREFIX)
            .pubsub(false)
            .reconcile_every(Duration::from_secs(3600));
        if let Some(bytes) = segment_bytes {
            builder = builder.segment_bytes(bytes);
        }
        builder.connect(&shared).await.unwrap()
    });

    // 2. 10,000 inserts on instance 1.
    let burst: Vec<u64> = (BURST_FROM..BURST_FROM + BURST).collect();
    let before = Traffic::read(&mut info);
    let started = Instant::now();
    for key in &burst {
        syncs[0].filter().insert(key);
    }
    let propagated = wait_until_held(
        &syncs[1..],
        &burst,
        Duration::from_millis(1),
        Duration::from_secs(60),
    );
    std::thread::sleep(reconcile_every + Duration::from_secs(1));
    let traffic = Traffic::read(&mut info).since(before);
    let period = started.elapsed().as_secs_f64();
    println!(
        "| {BURST} inserts on instance 1, raw ({period:.1} s: both others held them after \
         {propagated:.2?}, then one reconcile interval + 1 s) | {} | {} | |",
        fleet(traffic.output as f64),
        fleet(traffic.input as f64),
    );
    println!(
        "| {BURST} inserts on instance 1, net of the idle rate over the {period:.1} s | {} | {} | |",
        fleet(traffic.output as f64 - idle_rate(idle_traffic.output, period)),
        fleet(traffic.input as f64 - idle_rate(idle_traffic.input, period)),
    );

    let missed = rt.block_on(deaf.reconcile_now()).unwrap();
    let segments = size.div_ceil(segment_bytes.unwrap_or(64 << 10) as usize);
    println!(
        "| a pass that missed those {BURST} inserts (pub/sub off) | pulled {} ({} of {segments} \
         segments) | pushed {} | {:.2?} |",
        human(missed.bytes_pulled as f64),
        missed.segments_pulled,
        human(missed.bytes_pushed as f64),
        missed.elapsed,
    );
    rt.block_on(deaf.leave());

    // 3. Convergence after an outage. Redis's counters stand still while it is stopped, so
    // those read just before SIGSTOP are those at SIGCONT.
    let outage_keys: Vec<u64> = (OUTAGE_FROM..OUTAGE_FROM + OUTAGE_KEYS).collect();
    let at_pause = Traffic::read(&mut info);
    server.pause();
    let paused = Instant::now();
    let share = OUTAGE_KEYS.div_ceil(INSTANCES as u64) as usize; // 33,334 / 33,333 / 33,333
    for (sync, keys) in syncs.iter().zip(outage_keys.chunks(share)) {
        for key in keys {
            sync.filter().insert(key);
        }
    }
    std::thread::sleep(outage.saturating_sub(paused.elapsed()));
    let outage_len = paused.elapsed();
    server.resume();
    let converged = wait_until_held(
        &syncs,
        &outage_keys,
        Duration::from_millis(50),
        Duration::from_secs(300),
    );
    let traffic = Traffic::read(&mut info).since(at_pause);
    println!(
        "| outage of {:.1} s with {OUTAGE_KEYS} keys inserted during it (33,334/33,333/33,333): \
         from SIGCONT until every instance holds them all | {} | {} | converged {converged:.2?} \
         after SIGCONT |",
        outage_len.as_secs_f64(),
        fleet(traffic.output as f64),
        fleet(traffic.input as f64),
    );

    // 4. One reconciliation pass on an idle instance.
    std::thread::sleep(settle);
    let before = Traffic::read(&mut info);
    let mut reports: Vec<_> = rt.block_on(async {
        let mut reports = Vec::new();
        for _ in 0..5 {
            reports.push(syncs[2].reconcile_now().await.unwrap());
        }
        reports
    });
    let traffic = Traffic::read(&mut info).since(before);
    reports.sort_by_key(|r| r.elapsed);
    let median = reports[2];
    let mut pulled: Vec<u64> = reports.iter().map(|r| r.bytes_pulled).collect();
    let mut pushed: Vec<u64> = reports.iter().map(|r| r.bytes_pushed).collect();
    pulled.sort_unstable();
    pushed.sort_unstable();
    println!(
        "| reconcile_now on idle instance 3, median of 5 | pulled {} | pushed {} | {:.2?}; \
         Redis counted {} out, {} in per pass (background traffic included) |",
        human(pulled[2] as f64),
        human(pushed[2] as f64),
        median.elapsed,
        human(traffic.output as f64 / 5.0),
        human(traffic.input as f64 / 5.0),
    );

    // 5. Full passes (digests) on an idle instance: Redis hashes every segment.
    let before = Traffic::read(&mut info);
    let redis_cpu_before = cpu_seconds(&redis_pid, ticks);
    let mut fulls: Vec<_> = rt.block_on(async {
        let mut reports = Vec::new();
        for _ in 0..3 {
            reports.push(syncs[2].full_pass_now().await.unwrap());
        }
        reports
    });
    let redis_cpu = (cpu_seconds(&redis_pid, ticks) - redis_cpu_before) / 3.0;
    let traffic = Traffic::read(&mut info).since(before);
    fulls.sort_by_key(|r| r.elapsed);
    println!(
        "| full_pass_now on idle instance 3, median of 3 | pulled {} | pushed {} | {:.2?}; \
         redis-server CPU {redis_cpu:.2} s per pass; Redis counted {} out, {} in per pass |",
        human(fulls[1].bytes_pulled as f64),
        human(fulls[1].bytes_pushed as f64),
        fulls[1].elapsed,
        human(traffic.output as f64 / 3.0),
        human(traffic.input as f64 / 3.0),
    );

    println!();
    for (i, sync) in syncs.iter().enumerate() {
        let stats = sync.stats();
        println!(
            "instance {} last_reconcile: {:?} (reconciles {}, errors {})",
            i + 1,
            stats.last_reconcile,
            stats.reconciles,
            stats.reconcile_errors
        );
    }
    rt.block_on(async {
        for sync in &syncs {
            sync.leave().await;
        }
    });
    println!("total run time {:.1?}", run.elapsed());
}
