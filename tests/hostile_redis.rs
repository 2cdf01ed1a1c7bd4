//! The fleet's Redis as an attacker or a careless neighbour sees it (the trust boundary in
//! `docs/REDIS-SYNC.md`), on real `user_service` processes sharing one filter through a real
//! `redis-server`, as clients see it over HTTP:
//!
//! * a client that can write the fleet's keys announces a rebuild of its own (`building`, an
//!   open acknowledgement window, then `gen`): every instance follows it into a generation
//!   that holds none of the fleet's users, and none is answered "absent" for an existing user
//!   (the switch rule in `bloom-redis`'s `sync/generations.rs`);
//! * the fleet runs under the Redis user the docs give it (`ACL SETUSER` read from
//!   `docs/REDIS-SYNC.md`): creates, reads and rejections work, Redis's `ACL LOG` records no
//!   command the fleet was refused, and that user can touch nothing outside the fleet's keys
//!   and channels while another user cannot touch the fleet's.
#![forbid(unsafe_code)]

#[path = "support/user_service.rs"]
mod user_service;

use std::time::{Duration, Instant};

use bloom_tests::servers::redis as redis_server;
use user_service::{Answer, Instance, SEEDED};

/// The prefix `user_service` shares its filter under.
const PREFIX: &str = "user_service:users";
/// Ids no writer ever creates.
const NEVER: i64 = 90_000_000;

/// One fleet at a time: two fleets starving each other's processes on two cores would test
/// the machine.
static ONE_FLEET_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn fleet_flags(redis_url: &str) -> Vec<String> {
    [
        "--redis",
        redis_url,
        "--filter-seed",
        "0x5eed",
        "--filter-capacity",
        "100000",
    ]
    .map(str::to_owned)
    .to_vec()
}

async fn start(dir: &std::path::Path, name: &str, url: &str, flags: &[String]) -> Instance {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    Instance::start(dir, name, url, &flags).await
}

/// Until every instance's view is fresh (`bloom_redis_stale` 0).
async fn settle(instances: &[&Instance]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    for instance in instances {
        while instance.metric("bloom_redis_stale").await != 0.0 {
            assert!(
                Instant::now() < deadline,
                "never fresh:\n{}",
                instance.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn connection(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

async fn generation(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let generation: Option<u64> = redis::cmd("GET")
        .arg(format!("{{{PREFIX}}}:gen"))
        .query_async(conn)
        .await
        .unwrap();
    generation.unwrap_or(0)
}

/// Announces generation `forged` as a rebuilder would, without rebuilding anything: the
/// building marker, an open acknowledgement window, the instances' acknowledgements awaited
/// (each now double-writes it, in time), then the switch.
async fn forge_a_rebuild(
    conn: &mut redis::aio::MultiplexedConnection,
    forged: u64,
    members: usize,
) {
    let _: () = redis::cmd("SET")
        .arg(format!("{{{PREFIX}}}:building"))
        .arg(forged)
        .query_async(conn)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(format!("{{{PREFIX}}}:g{forged}:open"))
        .arg(1)
        .arg("PX")
        .arg(60_000)
        .query_async(conn)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let acked: Vec<String> = redis::cmd("SMEMBERS")
            .arg(format!("{{{PREFIX}}}:g{forged}:acks"))
            .query_async(conn)
            .await
            .unwrap();
        if acked.len() >= members {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the instances never acknowledged"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _: () = redis::cmd("SET")
        .arg(format!("{{{PREFIX}}}:gen"))
        .arg(forged)
        .query_async(conn)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_rebuild_does_not_turn_away_a_user_that_exists() {
    let _one = ONE_FLEET_AT_A_TIME.lock().await;
    let Some(server) = redis_server::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let database_url = bloom_examples::db::sqlite_url(&dir.path().join("db")).unwrap();
    let flags = fleet_flags(&server.url());
    let a = start(dir.path(), "a", &database_url, &flags).await;
    let b = start(dir.path(), "b", &database_url, &flags).await;
    settle(&[&a, &b]).await;
    let mut existing: Vec<i64> = (1..=SEEDED as i64).collect();
    for n in 0..300 {
        let creator = if n % 2 == 0 { &a } else { &b };
        existing.push(creator.create(&format!("u{n}")).await);
    }

    let mut conn = connection(&server.url()).await;
    let forged = generation(&mut conn).await + 1;
    forge_a_rebuild(&mut conn, forged, 2).await;

    // Both instances follow it (their generation gauge names it), and every existing user
    // is found through both, over and over, for as long as the switch and its aftermath take.
    let deadline = Instant::now() + Duration::from_secs(30);
    for instance in [&a, &b] {
        while instance.metric("bloom_redis_generation").await != forged as f64 {
            assert!(
                Instant::now() < deadline,
                "never switched to the forged generation:\n{}",
                instance.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let mut turned_away = Vec::new();
    let mut reads = 0;
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        for instance in [&a, &b] {
            for &id in &existing {
                reads += 1;
                let answer = instance.answer(id).await;
                if answer != Answer::Found {
                    turned_away.push((id, answer));
                }
            }
        }
    }
    println!(
        "forged rebuild: {} of {reads} reads of existing users not found",
        turned_away.len()
    );
    assert!(
        turned_away.is_empty(),
        "existing users not found after a forged rebuild: {:?}\n{}\n----\n{}",
        &turned_away[..turned_away.len().min(10)],
        a.log(),
        b.log()
    );
    // Loudly: each instance says it did not trust the generation.
    for instance in [&a, &b] {
        assert!(
            instance
                .log()
                .contains("holds far fewer keys than this instance serves"),
            "no error logged:\n{}",
            instance.log()
        );
    }
    // And the guard still works: a never-created id is rejected.
    assert_eq!(a.answer(NEVER).await, Answer::Rejected);
}

/// The `ACL SETUSER` line of `docs/REDIS-SYNC.md` for the fleet's user, as its words.
fn documented_acl() -> Vec<String> {
    let docs = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/REDIS-SYNC.md"),
    )
    .unwrap();
    let line = docs
        .lines()
        .find(|line| line.starts_with("ACL SETUSER user_service "))
        .expect("docs/REDIS-SYNC.md gives the fleet's ACL SETUSER line");
    line.split_whitespace().map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_runs_under_a_redis_user_restricted_to_its_prefix() {
    let _one = ONE_FLEET_AT_A_TIME.lock().await;
    let Some(server) = redis_server::start() else {
        return;
    };
    let mut admin = connection(&server.url()).await;
    let acl = documented_acl();
    let _: () = redis::cmd(&acl[0])
        .arg(&acl[1..])
        .query_async(&mut admin)
        .await
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "neighbour", "on", ">neighbour-secret"][..])
        .arg(
            &[
                "resetkeys",
                "~{neighbour}:*",
                "resetchannels",
                "&{neighbour}:*",
            ][..],
        )
        .arg(&["-@all", "+get", "+set", "+del", "+publish", "+eval"][..])
        .query_async(&mut admin)
        .await
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query_async(&mut admin)
        .await
        .unwrap();

    let port = server.port();
    let fleet_url = format!("redis://user_service:change-me@127.0.0.1:{port}/");
    let dir = tempfile::tempdir().unwrap();
    let database_url = bloom_examples::db::sqlite_url(&dir.path().join("db")).unwrap();
    let mut flags = fleet_flags(&fleet_url);
    flags.extend(["--rebuild-secs".to_owned(), "2".to_owned()]);
    let a = start(dir.path(), "a", &database_url, &flags).await;
    let b = start(dir.path(), "b", &database_url, &flags).await;
    settle(&[&a, &b]).await;
    for n in 0..200 {
        let (creator, reader) = if n % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let id = creator.create(&format!("u{n}")).await;
        assert_eq!(reader.answer(id).await, Answer::Found, "user {id}");
        assert_eq!(reader.answer(NEVER + n).await, Answer::Rejected);
    }
    // Rebuilds through the restricted user (locks, fences, segment groups, the switch): the
    // instances rebuild every 2 s.
    let first = a.metric("bloom_redis_generation").await;
    let deadline = Instant::now() + Duration::from_secs(60);
    for instance in [&a, &b] {
        while instance.metric("bloom_redis_generation").await <= first {
            assert!(
                Instant::now() < deadline,
                "no rebuild under the restricted user:\n{}",
                instance.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    for id in 1..=SEEDED as i64 {
        assert_eq!(b.answer(id).await, Answer::Found);
    }
    let denied: Vec<redis::Value> = redis::cmd("ACL")
        .arg("LOG")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(
        denied.is_empty(),
        "the fleet was refused commands, keys or channels: {denied:?}\n{}",
        a.log()
    );

    // The fleet's user touches nothing else; another user cannot touch the fleet's keys.
    let mut fleet = connection(&fleet_url).await;
    for (command, args) in [
        ("SET", vec!["{other}:gen", "1"]),
        ("GET", vec!["{other}:gen"]),
        ("PUBLISH", vec!["{other}:bits", "x"]),
        ("FLUSHALL", vec![]),
        ("CONFIG", vec!["SET", "maxmemory", "1"]),
    ] {
        let refused = redis::cmd(command)
            .arg(&args)
            .query_async::<redis::Value>(&mut fleet)
            .await;
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.to_string().contains("NOPERM")),
            "the fleet's user may {command} {args:?}: {refused:?}"
        );
    }
    let mut neighbour = connection(&format!(
        "redis://neighbour:neighbour-secret@127.0.0.1:{port}/"
    ))
    .await;
    let gen_key = format!("{{{PREFIX}}}:gen");
    let channel = format!("{{{PREFIX}}}:bits");
    for (command, args) in [
        ("SET", vec![gen_key.as_str(), "99"]),
        ("GET", vec![gen_key.as_str()]),
        ("DEL", vec![gen_key.as_str()]),
        ("PUBLISH", vec![channel.as_str(), "x"]),
    ] {
        let refused = redis::cmd(command)
            .arg(&args)
            .query_async::<redis::Value>(&mut neighbour)
            .await;
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.to_string().contains("NOPERM")),
            "another user may {command} {args:?}: {refused:?}"
        );
    }
}
