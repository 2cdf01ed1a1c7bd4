//! A guard that rejects everyone says so. Typed filters make a key-type mismatch a compile
//! error (the `compile_fail` examples on `key::path_param` and `key::KeyFor`); what types
//! cannot see (an empty filter, a closure that formats keys differently from the inserts) is
//! logged at WARN within the first requests. Real axum servers on TCP ports, a real hyper
//! client, and the crate's real `tracing` events captured by a subscriber.
#![cfg(feature = "axum")]

use std::net::SocketAddr;

use axum::Router;
use axum::body::Bytes;
use axum::extract::Path;
use axum::routing::get;
use bloom_tower::{BloomFilter, BloomGuard, KeyExtractor, SharedFilter, key};
use http::{Request, StatusCode};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

#[path = "support/logs.rs"]
mod logs;
use logs::{logs, warnings_of};

fn filter<K: ?Sized>(seed: u128) -> SharedFilter<K> {
    SharedFilter::builder().name("users").build(
        BloomFilter::builder()
            .expected_items(10_000)
            .false_positive_rate(0.01)
            .seed(seed)
            .build()
            .unwrap(),
    )
}

/// `/users/{id}` behind a guard named `name` over `filter` with `extractor`.
async fn serve<K, E>(name: &'static str, filter: SharedFilter<K>, extractor: E) -> Server
where
    K: ?Sized + Send + Sync + 'static,
    E: KeyExtractor<Request<axum::body::Body>> + Clone + Send + Sync + 'static,
    for<'a> E::Key<'a>: key::KeyFor<K>,
{
    logs();
    let app = Router::new()
        .route(
            "/users/{id}",
            get(|Path(id): Path<String>| async move { format!("user {id}") }),
        )
        .route_layer(BloomGuard::new(filter, extractor).name(name));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Server {
        addr,
        client: Client::builder(TokioExecutor::new()).build_http(),
    }
}

struct Server {
    addr: SocketAddr,
    client: Client<HttpConnector, Empty<Bytes>>,
}

impl Server {
    async fn get(&self, id: u64) -> StatusCode {
        self.get_path(&id.to_string()).await
    }

    /// `GET /users/{id}` with `id` as written.
    async fn get_path(&self, id: &str) -> StatusCode {
        let uri = format!("http://{}/users/{id}", self.addr);
        self.client
            .get(uri.parse().unwrap())
            .await
            .unwrap()
            .status()
    }
}

#[tokio::test]
async fn a_guard_over_a_filter_that_was_never_loaded_warns_once_that_it_holds_no_keys() {
    let users = filter::<u64>(1);
    let server = serve("empty-users", users, key::path_param("id").parse::<u64>()).await;
    for id in 1..=5 {
        assert_eq!(server.get(id).await, StatusCode::NOT_FOUND);
    }
    let warnings = warnings_of("empty-users");
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(warnings[0].contains("holds no keys"), "{}", warnings[0]);
    assert!(warnings[0].contains("filter=users"), "{}", warnings[0]);
}

/// Keys inserted as `"user:{id}"`, extracted as the bare id: both text, so the types agree,
/// and every existing user is rejected. The 100th rejection with nothing passed names the
/// likely cause, once.
#[tokio::test]
async fn a_guard_that_rejects_all_of_its_first_hundred_checks_warns_of_a_key_mismatch() {
    let users = filter::<String>(2);
    let inserted: Vec<String> = (1..=1_000).map(|id| format!("user:{id}")).collect();
    users.reload_from(&inserted).await.unwrap();
    let server = serve("mismatched-users", users, key::path_param("id")).await;
    for id in 1..=99 {
        assert_eq!(server.get(id).await, StatusCode::NOT_FOUND);
    }
    assert!(warnings_of("mismatched-users").is_empty());
    for id in 100..=300 {
        assert_eq!(server.get(id).await, StatusCode::NOT_FOUND);
    }
    let warnings = warnings_of("mismatched-users");
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].contains("rejected every one of its first 100 checks"),
        "{}",
        warnings[0]
    );
    assert!(warnings[0].contains(".parse::<T>()"), "{}", warnings[0]);
}

/// The same traffic pattern (ids 1..=300, most of them absent) through a guard whose keys
/// match: some pass before the 100th rejection, so nothing is logged.
#[tokio::test]
async fn a_guard_whose_keys_match_stays_quiet_however_many_it_rejects() {
    let users = filter::<u64>(3);
    users
        .reload_from(&(1..=10u64).map(|id| id * 30).collect::<Vec<_>>())
        .await
        .unwrap();
    let server = serve(
        "matching-users",
        users,
        key::path_param("id").parse::<u64>(),
    )
    .await;
    let mut passed = 0;
    for id in 1..=300 {
        if server.get(id).await == StatusCode::OK {
            passed += 1;
        }
    }
    assert!(passed >= 10, "every inserted id passes: {passed}");
    assert!(warnings_of("matching-users").is_empty());
}

/// UUIDs in the path parsed as integers: the extractor finds no key in any request, so every
/// one goes to the missing-key policy (let through) and the guard protects nothing. It says
/// so at the 100th request, once; after a stretch of requests with keys, it says so again.
#[tokio::test]
async fn a_guard_whose_extractor_finds_no_key_in_most_requests_warns_that_it_protects_nothing() {
    let orders = filter::<u128>(4);
    for id in 1..=1_000u128 {
        orders.insert(&id);
    }
    let server = serve(
        "keyless-orders",
        orders,
        key::path_param("id").parse::<u128>(),
    )
    .await;
    let uuid = "67e55044-10b1-426f-9247-bb680e5fe0c8";
    for _ in 1..100 {
        assert_eq!(server.get_path(uuid).await, StatusCode::OK);
    }
    assert!(warnings_of("keyless-orders").is_empty());
    for _ in 100..=300 {
        assert_eq!(server.get_path(uuid).await, StatusCode::OK);
    }
    let warnings = warnings_of("keyless-orders");
    let [warning] = warnings.as_slice() else {
        panic!("one warning: {warnings:#?}");
    };
    let says = [
        "found no key in 100 of the last 100 requests",
        "the guard protects nothing",
    ];
    assert!(says.iter().all(|text| warning.contains(text)), "{warning}");
    // Recovered: requests with keys; then none again, and it warns anew.
    for id in 1..=100 {
        assert_eq!(server.get(id).await, StatusCode::OK);
    }
    for _ in 0..200 {
        assert_eq!(server.get_path(uuid).await, StatusCode::OK);
    }
    assert_eq!(warnings_of("keyless-orders").len(), 2);
}

/// With the `uuid` feature a `Uuid` is a key with no newtype: a `SharedFilter<Uuid>` is
/// filled with them and `path_param("id").parse::<Uuid>()` reads them from the path in any
/// of their text forms.
#[cfg(feature = "uuid")]
#[tokio::test]
async fn uuid_keys_are_parsed_from_the_path_with_no_newtype() {
    use uuid::Uuid;

    let orders = filter::<Uuid>(5);
    let known: Vec<Uuid> = (1..=1_000u128)
        .map(|n| Uuid::from_u128(n * 0x9e37_79b9_7f4a_7c15))
        .collect();
    orders.reload_from(&known).await.unwrap();
    assert!(orders.contains(&known[0]));
    let server = serve("uuid-orders", orders, key::path_param("id").parse::<Uuid>()).await;
    for uuid in &known[..50] {
        assert_eq!(server.get_path(&uuid.to_string()).await, StatusCode::OK);
        let simple = uuid.simple().to_string().to_uppercase();
        assert_eq!(server.get_path(&simple).await, StatusCode::OK);
    }
    let absent = (1_001..=1_100u128).map(|n| Uuid::from_u128(n * 0x9e37_79b9_7f4a_7c15));
    let mut rejected = 0;
    for uuid in absent {
        if server.get_path(&uuid.to_string()).await == StatusCode::NOT_FOUND {
            rejected += 1;
        }
    }
    assert!(
        rejected >= 90,
        "absent UUIDs are rejected: {rejected} of 100"
    );
    assert!(warnings_of("uuid-orders").is_empty());
}
