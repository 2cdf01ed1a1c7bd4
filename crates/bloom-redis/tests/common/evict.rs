//! Redis as many services run it, a cache with a memory limit and `allkeys-lru`, and another
//! service's keys filling it until it has evicted some of ours.

use redis::aio::MultiplexedConnection;

/// Sets `allkeys-lru` and a `maxmemory` of what the server uses now plus `headroom` bytes.
async fn limit_memory(conn: &mut MultiplexedConnection, headroom: u64) {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(conn)
        .await
        .unwrap();
    let used: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory in INFO memory");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("allkeys-lru")
        .arg("maxmemory")
        .arg(used + headroom)
        .query_async(conn)
        .await
        .unwrap();
}

/// Lifts the memory limit: nothing more is evicted.
async fn unlimit_memory(conn: &mut MultiplexedConnection) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(0)
        .query_async(conn)
        .await
        .unwrap();
}

/// How many keys match `pattern` on `conn`'s server and database.
pub async fn count(conn: &mut MultiplexedConnection, pattern: &str) -> usize {
    let found: Vec<String> = redis::cmd("KEYS")
        .arg(pattern)
        .query_async(conn)
        .await
        .unwrap();
    found.len()
}

/// Limits `watch`'s server to what it uses plus `headroom` bytes under `allkeys-lru`, writes
/// 1 KiB values named `{names}:{n}` through `fill` (eight per round trip) until no key
/// matches `evicted` on `watch`, then lifts the limit. Before each round it reads hash `keep`
/// on `watch` (if any), as a fleet reads its config at every pass, and it checks at the end
/// that `keep` stayed.
pub async fn evict(
    watch: &mut MultiplexedConnection,
    fill: &mut MultiplexedConnection,
    names: &str,
    evicted: &str,
    keep: Option<&str>,
    headroom: u64,
) {
    limit_memory(watch, headroom).await;
    // Redis's LRU clock ticks once a second: two ticks of idleness make what is to be
    // evicted older than anything touched or written from here on.
    tokio::time::sleep(std::time::Duration::from_millis(2_100)).await;
    let value = vec![b'x'; 1024];
    let mut n = 0u64;
    while count(watch, evicted).await > 0 {
        if let Some(keep) = keep {
            let _: () = redis::cmd("HGETALL")
                .arg(keep)
                .query_async(watch)
                .await
                .unwrap();
        }
        let mut pipe = redis::pipe();
        for _ in 0..8 {
            pipe.cmd("SET")
                .arg(format!("{names}:{n}"))
                .arg(&value)
                .ignore();
            n += 1;
        }
        let _: () = pipe.query_async(fill).await.unwrap();
        assert!(
            n < 1_000_000,
            "hang: Redis evicted no key matching {evicted}"
        );
    }
    if let Some(keep) = keep {
        assert_eq!(count(watch, keep).await, 1, "{keep} stayed");
    }
    unlimit_memory(watch).await;
}
