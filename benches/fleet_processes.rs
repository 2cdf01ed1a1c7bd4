//! What a fleet of real `user_service` processes costs while idle, and how often it scans the
//! table: one PostgreSQL server and one `redis-server` (both throwaway), the `users` table
//! seeded with `SEEDED` (10,000) users, then `PROCESSES` (50) instances of the release
//! `user_service` example sharing one filter through Redis (`--redis`, `--filter-capacity
//! FILTER_CAPACITY`, default 100,000,000 keys at 1 %: 120 MB a process), every flag at the
//! example's default but `--rebuild-secs REBUILD_SECS` (600). They start `START_BATCH` (10) at a
//! time; once every one answers `GET /health`, `WARM_SECS` (90: past the first snapshot) pass,
//! then `IDLE_SECS` (300) are measured with no request sent:
//!
//! - per process, CPU (user + system, `/proc/<pid>/stat`) as % of a core: median, mean, max,
//!   and the instance holding the follow lease (it reads the change log for the fleet);
//! - per process, bytes into and out of Redis per minute (Redis's `INFO stats`, divided by
//!   the number of processes), and Redis commands per second;
//! - redis-server's and PostgreSQL's CPU (every `postgres` process of the server);
//! - full scans of `users` (`pg_stat_user_tables.seq_scan`), fleet rebuilds (the generation
//!   in Redis, `{user_service:users}:gen`) and rebuild log lines of all processes, against the
//!   `IDLE_SECS / REBUILD_SECS` one rebuild per fleet per interval allows.
//!
//! Prints one Markdown table (progress on stderr). The issue's two runs:
//!
//! ```text
//! cargo bench -p bloom-benches --bench fleet_processes                      # 50 idle processes
//! PROCESSES=5 FILTER_CAPACITY=10000000 REBUILD_SECS=300 IDLE_SECS=1800 \
//!   cargo bench -p bloom-benches --bench fleet_processes                      # rebuilds in 30 min
//! ```
//!
//! Needs `redis-server` and PostgreSQL's server binaries; without them it prints a loud
//! SKIPPED line and exits.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The throwaway `redis-server` bloom-redis's tests use (random port, no persistence).
#[path = "../crates/bloom-redis/tests/common/mod.rs"]
mod redis_server;

/// `RedisCounters`, `cpu_seconds` and `clock_ticks`: the measuring `fleet_idle` uses.
#[path = "../crates/bloom-redis/tests/common/idle_fleet.rs"]
mod idle_fleet;

/// The workspace tests' throwaway PostgreSQL server and example processes.
#[path = "../tests/servers/postgres.rs"]
#[allow(dead_code)]
mod postgres;
#[path = "../tests/servers/process.rs"]
#[allow(dead_code)]
mod process;

use idle_fleet::{RedisCounters, clock_ticks, cpu_seconds};
use process::{Process, Signal};

const PREFIX: &str = "user_service:users";

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value:?} is not a whole number")),
        Err(_) => default,
    }
}

/// `GET /health` on 127.0.0.1:`port` answered `200`.
fn healthy(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}

/// One value of `sql` on the database at `url`, through `psql`.
fn psql(bin: &Path, port: u16, database: &str, sql: &str) -> String {
    let output = Command::new(bin.join("psql"))
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres"])
        .args(["-d", database, "-Atc", sql])
        .output()
        .expect("running psql");
    assert!(
        output.status.success(),
        "psql {sql:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// CPU seconds of process `root` and its children (the PostgreSQL server: the postmaster and
/// its backends), summed; a child that exited meanwhile counts no more.
fn cpu_of_process_tree(root: u32, ticks: f64) -> f64 {
    let mut total = cpu_seconds(&root.to_string(), ticks);
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Field 4 (the parent), after the command name in parentheses.
        let parent = stat[stat.rfind(')').map_or(0, |at| at + 1)..]
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if parent == Some(root) {
            let rest = &stat[stat.rfind(')').unwrap() + 1..];
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: f64 = fields[11].parse().unwrap_or(0.0);
            let stime: f64 = fields[12].parse().unwrap_or(0.0);
            total += (utime + stime) / ticks;
        }
    }
    total
}

/// What the fleet has done so far.
#[derive(Clone, Debug)]
struct Sample {
    at: Instant,
    /// CPU seconds per process, in start order.
    cpu: Vec<f64>,
    redis_cpu: f64,
    postgres_cpu: f64,
    redis: RedisCounters,
    seq_scans: u64,
    generation: u64,
    rebuild_lines: usize,
}

fn main() {
    let processes = env_u64("PROCESSES", 50) as usize;
    let capacity = env_u64("FILTER_CAPACITY", 100_000_000);
    let rebuild = env_u64("REBUILD_SECS", 600);
    let idle = Duration::from_secs(env_u64("IDLE_SECS", 300));
    let warm = Duration::from_secs(env_u64("WARM_SECS", 90));
    let batch = env_u64("START_BATCH", 10).max(1) as usize;
    let seeded = env_u64("SEEDED", 10_000);

    let Some(pg_bin) = postgres::find_binaries() else {
        eprintln!("SKIPPED fleet_processes: no PostgreSQL server binaries");
        return;
    };
    let Some(redis) = redis_server::start() else {
        eprintln!("SKIPPED fleet_processes: no redis-server");
        return;
    };
    let pg = postgres::Postgres::start_with_connections(&pg_bin, 100 + 12 * processes as u32)
        .expect("starting PostgreSQL");
    let database_url = pg.create_database("fleet_processes");
    let database = database_url.rsplit('/').next().unwrap().to_owned();
    let binary = process::example_binary("bloom-examples", "user_service");
    let dir = tempfile::tempdir().unwrap();
    let ticks = clock_ticks();

    println!(
        "PROCESSES={processes} FILTER_CAPACITY={capacity} REBUILD_SECS={rebuild} IDLE_SECS={} \
         cargo bench -p bloom-benches --bench fleet_processes",
        idle.as_secs()
    );
    println!(
        "setup: {processes} release user_service processes (`--redis`, `--filter-capacity \
         {capacity}`, `--rebuild-secs {rebuild}`, other flags at their defaults), one \
         PostgreSQL ({} users) and one redis-server on this machine ({} cores); {} s after the \
         last one is healthy, {} s idle measured",
        seeded,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        warm.as_secs(),
        idle.as_secs()
    );

    // Start the fleet, `batch` at a time; the first one seeds the table.
    let started = Instant::now();
    let mut fleet: Vec<(Process, u16, std::path::PathBuf)> = Vec::new();
    while fleet.len() < processes {
        let first = fleet.len();
        let last = (first + batch).min(processes);
        for i in first..last {
            let port = process::free_port();
            let data = dir.path().join(format!("u{i}"));
            std::fs::create_dir_all(&data).unwrap();
            let log = dir.path().join(format!("u{i}.log"));
            let args = [
                "--port".to_owned(),
                port.to_string(),
                "--name".to_owned(),
                format!("u{i}"),
                "--data-dir".to_owned(),
                data.display().to_string(),
                "--database-url".to_owned(),
                database_url.clone(),
                "--redis".to_owned(),
                redis.url(),
                "--filter-seed".to_owned(),
                "0x5eed".to_owned(),
                "--filter-capacity".to_owned(),
                capacity.to_string(),
                "--rebuild-secs".to_owned(),
                rebuild.to_string(),
                "--seed".to_owned(),
                seeded.to_string(),
            ];
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let env = [
                ("RUST_LOG", Some("info,sqlx=warn")),
                ("NO_COLOR", Some("1")),
                ("DATABASE_URL", None),
                ("REDIS_URL", None),
                ("BLOOM_FILTER_SEED", None),
            ];
            fleet.push((Process::spawn(&binary, &args, &env, &log), port, log));
            if i == 0 {
                // The first one seeds the table alone.
                wait_healthy(&mut fleet[0..1]);
            }
        }
        wait_healthy(&mut fleet[first..last]);
        eprintln!(
            "{} of {processes} healthy after {:.0} s",
            fleet.len(),
            started.elapsed().as_secs_f64()
        );
    }
    eprintln!("all healthy; {} s before measuring", warm.as_secs());
    std::thread::sleep(warm);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = rt
        .block_on(client.get_multiplexed_async_connection())
        .unwrap();
    let postmaster = pg.postmaster_pid().expect("the PostgreSQL server's pid");
    let sample = |conn: &mut redis::aio::MultiplexedConnection| -> Sample {
        let generation: Option<u64> = rt
            .block_on(
                redis::cmd("GET")
                    .arg(format!("{{{PREFIX}}}:gen"))
                    .query_async(conn),
            )
            .unwrap();
        Sample {
            at: Instant::now(),
            cpu: fleet
                .iter()
                .map(|(p, _, _)| cpu_seconds(&p.pid().to_string(), ticks))
                .collect(),
            redis_cpu: cpu_seconds(&redis.pid().to_string(), ticks),
            postgres_cpu: cpu_of_process_tree(postmaster, ticks),
            redis: rt.block_on(RedisCounters::read(conn)),
            seq_scans: psql(
                &pg_bin,
                pg.port(),
                &database,
                "SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 'users'",
            )
            .parse()
            .unwrap(),
            generation: generation.unwrap_or(0),
            rebuild_lines: fleet
                .iter()
                .map(|(_, _, log)| {
                    std::fs::read_to_string(log)
                        .unwrap_or_default()
                        .matches("rebuilt and published a new generation")
                        .count()
                })
                .sum(),
        }
    };
    let before = sample(&mut conn);
    eprintln!("measuring {} s idle", idle.as_secs());
    std::thread::sleep(idle);
    let after = sample(&mut conn);
    let follower = fleet.iter().position(|(_, _, log)| {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        text.rfind("following the source for the fleet")
            .is_some_and(|at| {
                text.rfind("another instance follows the source now")
                    .is_none_or(|stop| stop < at)
            })
    });

    report(&before, &after, processes, rebuild, follower);
    for (process, _, _) in &mut fleet {
        process.signal(Signal::Term);
    }
    for (process, _, log) in &mut fleet {
        if process.wait_exit(Duration::from_secs(30)).is_err() {
            eprintln!("{} did not stop on SIGTERM", log.display());
        }
    }
}

/// Waits until every process of `fleet` answers `GET /health` (at most 10 minutes).
fn wait_healthy(fleet: &mut [(Process, u16, std::path::PathBuf)]) {
    let deadline = Instant::now() + Duration::from_secs(600);
    for (process, port, log) in fleet {
        while !healthy(*port) {
            if let Some(status) = process.try_status() {
                panic!(
                    "{} exited ({status:?}):\n{}",
                    log.display(),
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(Instant::now() < deadline, "{} not healthy", log.display());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn report(
    before: &Sample,
    after: &Sample,
    processes: usize,
    rebuild: u64,
    follower: Option<usize>,
) {
    let secs = (after.at - before.at).as_secs_f64();
    let minutes = secs / 60.0;
    let mut cpu: Vec<f64> = after
        .cpu
        .iter()
        .zip(&before.cpu)
        .map(|(a, b)| (a - b) / secs * 100.0)
        .collect();
    let follower_cpu = follower.map(|i| cpu[i]);
    let mean = cpu.iter().sum::<f64>() / cpu.len() as f64;
    cpu.sort_by(f64::total_cmp);
    let redis = after.redis.since(&before.redis);
    let n = processes as f64;
    println!();
    println!(
        "| processes | idle s | CPU per process, % of a core: median / mean / max | follower's | \
         KiB/min into Redis per process | KiB/min out of Redis per process | Redis commands/s | \
         redis-server CPU % | PostgreSQL CPU % | full scans of `users` | fleet rebuilds (generations) | rebuild log lines | allowed (one per {rebuild} s) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {processes} | {secs:.0} | {:.3} / {mean:.3} / {:.3} | {} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {} | {} | {} | {:.1} |",
        bloom_benches::median(&cpu),
        cpu.last().copied().unwrap_or(0.0),
        follower_cpu.map_or("-".to_owned(), |c| format!("{c:.3}")),
        redis.input as f64 / 1024.0 / minutes / n,
        redis.output as f64 / 1024.0 / minutes / n,
        redis.commands as f64 / secs,
        (after.redis_cpu - before.redis_cpu) / secs * 100.0,
        (after.postgres_cpu - before.postgres_cpu) / secs * 100.0,
        after.seq_scans - before.seq_scans,
        after.generation - before.generation,
        after.rebuild_lines - before.rebuild_lines,
        secs / rebuild as f64,
    );
    println!();
    let mut calls: Vec<(&String, &u64)> = redis.calls.iter().collect();
    calls.sort_by(|a, b| b.1.cmp(a.1));
    let per_process: BTreeMap<String, String> = calls
        .iter()
        .take(8)
        .map(|(name, count)| {
            (
                (*name).clone(),
                format!("{:.3}", **count as f64 / secs / processes as f64),
            )
        })
        .collect();
    println!("Redis commands per process per second (busiest 8): {per_process:?}");
}
