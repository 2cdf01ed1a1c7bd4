//! The guard's "holds no keys" warning looks at what the filter holds, not only at its insert
//! counter: a filter whose bits were OR-ed in directly (as `bloom_redis::RedisSync` does
//! when it joins a fleet or pulls segments) inserted no key one by one but is not empty; its
//! key count is estimated from those bits. The crate's real `tracing` events are captured by
//! a subscriber, as in `typed_keys.rs`.

use std::convert::Infallible;

use bloom_tower::{BloomFilter, BloomGuard, SharedFilter, key};
use http::{Request, Response, StatusCode};
use tower::{Layer, ServiceExt, service_fn};

#[path = "support/logs.rs"]
mod logs;
use logs::{logs, warnings_of};

const SEED: u128 = 0x5EED;

fn empty_bits() -> BloomFilter {
    BloomFilter::builder()
        .expected_items(10_000)
        .false_positive_rate(0.01)
        .seed(SEED)
        .build()
        .unwrap()
}

/// Sends `GET /users/{id}` for every id through a guard named `name` over `filter` (the
/// inner service answers 200); the statuses, in order.
async fn get_all(
    name: &'static str,
    filter: &SharedFilter<u64>,
    ids: impl IntoIterator<Item = u64>,
) -> Vec<StatusCode> {
    logs();
    let guard = BloomGuard::new(filter.clone(), key::path_segment(1).parse::<u64>()).name(name);
    let service = guard.layer(service_fn(|_: Request<String>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    }));
    let mut statuses = Vec::new();
    for id in ids {
        let request = Request::get(format!("/users/{id}"))
            .body(String::new())
            .unwrap();
        let response = service.clone().oneshot(request).await.unwrap();
        statuses.push(response.status());
    }
    statuses
}

/// 1,000 ids OR-ed into the serving filter's bit array, as a Redis join does: no insert
/// counted them, the key count is estimated from the bits, the filter holds every id, and
/// 1,100 rejections of other ids (the guard looks at the filter at the 1st, the 100th and
/// the 1024th) log no "holds no keys" warning.
#[tokio::test]
async fn a_filter_filled_through_its_bit_array_is_not_reported_empty() {
    let filter = SharedFilter::<u64>::builder()
        .name("joined-users")
        .build(empty_bits());
    let fleet = empty_bits();
    fleet.insert_many(1..=1_000u64);
    filter.current().as_plain().unwrap().union(&fleet).unwrap();
    let stats = filter.stats();
    assert_eq!(stats.inserts, 0, "the setup must bypass insert");
    assert!((950..1_050).contains(&stats.approx_items), "{stats:?}");
    assert!((1..=1_000u64).all(|id| filter.contains(&id)));

    let absent: Vec<u64> = (1_001u64..)
        .filter(|id| !filter.contains(id))
        .take(1_100)
        .collect();
    let statuses = get_all("joined-users", &filter, absent).await;
    assert!(
        statuses
            .iter()
            .all(|&status| status == StatusCode::NOT_FOUND)
    );

    let warnings = warnings_of("joined-users");
    assert!(
        warnings.iter().all(|line| !line.contains("holds no keys")),
        "{warnings:#?}"
    );
}

/// The same setup, but the guard sees only ids the filter holds none of: the 100th
/// rejection with nothing passed names a key mismatch, counting the keys from the bits.
#[tokio::test]
async fn a_filter_filled_through_its_bit_array_still_reports_a_key_mismatch() {
    let filter = SharedFilter::<u64>::builder()
        .name("joined-mismatch")
        .build(empty_bits());
    let fleet = empty_bits();
    fleet.insert_many(1..=1_000u64);
    filter.current().as_plain().unwrap().union(&fleet).unwrap();
    assert_eq!(filter.stats().inserts, 0);

    let absent: Vec<u64> = (1_001u64..)
        .filter(|id| !filter.contains(id))
        .take(150)
        .collect();
    get_all("joined-mismatch", &filter, absent).await;
    let warnings = warnings_of("joined-mismatch");
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].contains("rejected every one of its first 100 checks"),
        "{}",
        warnings[0]
    );
    assert!(!warnings[0].contains("filter_keys=0 "), "{}", warnings[0]);
}

/// A truly empty filter is still reported (once), whatever the bit scan.
#[tokio::test]
async fn a_filter_with_no_bit_set_is_reported_empty() {
    let filter = SharedFilter::<u64>::builder()
        .name("never-loaded")
        .build(empty_bits());
    let statuses = get_all("never-loaded", &filter, 1..=5).await;
    assert!(
        statuses
            .iter()
            .all(|&status| status == StatusCode::NOT_FOUND)
    );
    let warnings = warnings_of("never-loaded");
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(warnings[0].contains("holds no keys"), "{}", warnings[0]);
}
