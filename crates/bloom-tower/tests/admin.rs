//! The admin router (feature `admin`) served on a real TCP port next to a guarded route,
//! driven by a real hyper client: stats, rebuilds (fresh, joined, failed, replicated, and
//! one whose client hung up), snapshots, unknown names.
#![cfg(feature = "admin")]

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::Path;
use axum::routing::get;
use bloom_tower::key_source::{self, BoxError};
use bloom_tower::shared_filter::{ErasedKeySource, ExternalRebuild, Reloaded};
use bloom_tower::{BloomFilter, BloomGuard, SharedFilter, admin, key};
use futures_util::StreamExt;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use tokio::sync::Semaphore;

fn bloom(n: u64) -> BloomFilter {
    BloomFilter::builder()
        .expected_items(n)
        .false_positive_rate(0.01)
        .seed(0xAD_u128)
        .build()
        .unwrap()
}

/// The users table a rebuild reads afresh each time.
type Table = Arc<Mutex<Vec<u64>>>;

struct Server {
    addr: SocketAddr,
    client: Client<HttpConnector, Empty<Bytes>>,
}

impl Server {
    /// `/users/{id}` guarded by the first registered filter, `/admin` over `admin`.
    async fn start(guarded: &SharedFilter<u64>, admin: admin::Admin) -> Self {
        async fn user(Path(id): Path<u64>) -> String {
            format!("user {id}")
        }
        let app = Router::new()
            .route("/users/{id}", get(user))
            .route_layer(BloomGuard::new(
                guarded.clone(),
                key::path_param("id").parse::<u64>(),
            ))
            .nest("/admin", admin::router(admin));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let client = Client::builder(TokioExecutor::new()).build_http();
        Server { addr, client }
    }

    async fn call(&self, method: Method, path: &str) -> (StatusCode, Value) {
        let request = Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.addr))
            .body(Empty::new())
            .unwrap();
        let response = self.client.request(request).await.unwrap();
        let status = response.status();
        let json = response.headers().get("content-type").cloned();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        if !path.starts_with("/admin/") {
            return (
                status,
                Value::from(String::from_utf8(body.to_vec()).unwrap()),
            );
        }
        if body.is_empty() {
            return (status, Value::Null); // axum's own 405
        }
        assert_eq!(json.unwrap(), "application/json", "{path}");
        (status, serde_json::from_slice(&body).unwrap())
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(Method::GET, path).await
    }

    async fn post(&self, path: &str) -> (StatusCode, Value) {
        self.call(Method::POST, path).await
    }
}

/// A filter named `users` built from `table`, and the source that re-reads it.
async fn users(
    table: &Table,
    snapshot: Option<&std::path::Path>,
) -> (
    SharedFilter<u64>,
    impl bloom_tower::KeySource<Key = u64> + Send + Sync + 'static,
) {
    let mut builder = SharedFilter::<u64>::builder().name("users");
    if let Some(path) = snapshot {
        builder = builder.snapshot(path);
    }
    let filter = builder.build(bloom(10_000));
    let source = key_source::from_iter({
        let table = Arc::clone(table);
        move || table.lock().unwrap().clone()
    });
    filter.reload_from(&source).await.unwrap();
    (filter, source)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_list_every_registered_filter() {
    let table: Table = Arc::new(Mutex::new((1..=500).collect()));
    let (filter, source) = users(&table, None).await;
    let orders = SharedFilter::<String>::builder()
        .name("orders")
        .build(bloom(1_000));
    let server = Server::start(
        &filter,
        admin::Admin::new()
            .filter(filter.clone(), source)
            .filter(orders, vec!["o-1"]),
    )
    .await;

    let (status, all) = server.get("/admin/filters").await;
    assert_eq!(status, StatusCode::OK);
    let names: Vec<&str> = all["filters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["users", "orders"]);

    let (status, users) = server.get("/admin/filters/users").await;
    assert_eq!(status, StatusCode::OK);
    let stats = filter.stats();
    assert_eq!(users["kind"], "plain");
    assert_eq!(users["bits"], stats.num_bits);
    assert_eq!(users["capacity"], 10_000);
    assert_eq!(users["approx_items"], stats.approx_items);
    assert_eq!(users["rebuilds"], 1);
    assert_eq!(users["failed_rebuilds"], 0);
    assert_eq!(users["last_rebuild"]["keys"], 500);
    assert_eq!(users["verifying"], false);
    assert_eq!(users["rebuilding"], false);
    assert_eq!(users["replicated"], false);
    assert_eq!(users["snapshot"], Value::Null);
    let estimated = users["estimated_items"].as_f64().unwrap();
    assert!((450.0..550.0).contains(&estimated), "{users}");
    let fpr = users["estimated_fpr"].as_f64().unwrap();
    assert!(fpr > 0.0 && fpr < 0.01, "{users}");
    assert!(users["fill_ratio"].as_f64().unwrap() > 0.0);
    assert_eq!(users["target_fpr"], 0.01);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_reads_the_source_again() {
    let table: Table = Arc::new(Mutex::new((1..=500).collect()));
    let (filter, source) = users(&table, None).await;
    let server = Server::start(&filter, admin::Admin::new().filter(filter.clone(), source)).await;

    // A user the filter has never seen: the guard rejects it.
    let added = (501u64..).find(|id| !filter.contains(id)).unwrap();
    assert_eq!(
        server.get(&format!("/users/{added}")).await.0,
        StatusCode::NOT_FOUND
    );
    // Added to the table behind the filter's back (another writer): a rebuild picks it up.
    table.lock().unwrap().push(added);

    let (status, outcome) = server.post("/admin/filters/users/rebuild").await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert_eq!(
        outcome,
        serde_json::json!({"filter": "users", "outcome": "rebuilt", "keys": 501})
    );
    assert!(filter.contains(&added));
    assert_eq!(filter.stats().rebuilds, 2);
    assert_eq!(
        server.get(&format!("/users/{added}")).await.0,
        StatusCode::OK
    );
    assert_eq!(server.get("/admin/filters/users").await.1["rebuilds"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_source_is_a_500_with_the_cause_and_the_old_filter_serves() {
    let table: Table = Arc::new(Mutex::new((1..=500).collect()));
    let (filter, _) = users(&table, None).await;
    let failing = key_source::from_stream(|| {
        futures_util::stream::iter([
            Ok(1u64),
            Ok(2),
            Err(io::Error::other("connection reset by the database")),
        ])
    });
    let server = Server::start(&filter, admin::Admin::new().filter(filter.clone(), failing)).await;

    let (status, outcome) = server.post("/admin/filters/users/rebuild").await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(outcome["filter"], "users");
    assert_eq!(outcome["kind"], "source");
    let error = outcome["error"].as_str().unwrap();
    assert!(
        error.contains("after 2 keys")
            && error.contains("previous filter keeps serving")
            && error.contains("connection reset by the database"),
        "{error}"
    );
    // Nothing lost: every user of the old filter still passes the guard.
    for id in [1u64, 250, 500] {
        assert!(filter.contains(&id));
        assert_eq!(server.get(&format!("/users/{id}")).await.0, StatusCode::OK);
    }
    let (_, stats) = server.get("/admin/filters/users").await;
    assert_eq!(
        (&stats["rebuilds"], &stats["failed_rebuilds"]),
        (&1.into(), &1.into())
    );
    // And the router is still there for the next try.
    assert_eq!(
        server.post("/admin/filters/users/rebuild").await.0,
        StatusCode::INTERNAL_SERVER_ERROR
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_is_written_where_configured_and_loads_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("users.bloom");
    let table: Table = Arc::new(Mutex::new((1..=500).collect()));
    let (filter, source) = users(&table, Some(&path)).await;
    let unsnapshotted = SharedFilter::<u64>::builder()
        .name("orders")
        .build(bloom(1_000));
    let server = Server::start(
        &filter,
        admin::Admin::new()
            .filter(filter.clone(), source)
            .filter(unsnapshotted, vec![1u64]),
    )
    .await;
    // The rebuild in `users` saved one already: start from no file.
    std::fs::remove_file(&path).unwrap();
    filter.insert(&9_999u64);

    let (status, outcome) = server.post("/admin/filters/users/snapshot").await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert_eq!(outcome["snapshot"], path.display().to_string());
    let loaded = SharedFilter::<u64>::load(&path).await.unwrap();
    assert!(loaded.contains(&9_999u64) && loaded.contains(&1u64));
    assert_eq!(loaded.current().to_bytes(), filter.current().to_bytes());
    assert_eq!(
        server.get("/admin/filters/users").await.1["snapshot"],
        path.display().to_string()
    );

    let (status, outcome) = server.post("/admin/filters/orders/snapshot").await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(
        outcome["error"]
            .as_str()
            .unwrap()
            .contains("no snapshot path"),
        "{outcome}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_filter_is_a_404() {
    let table: Table = Arc::new(Mutex::new(vec![1]));
    let (filter, source) = users(&table, None).await;
    let server = Server::start(&filter, admin::Admin::new().filter(filter.clone(), source)).await;
    for (method, path) in [
        (Method::GET, "/admin/filters/orders"),
        (Method::POST, "/admin/filters/orders/rebuild"),
        (Method::POST, "/admin/filters/orders/snapshot"),
    ] {
        let (status, body) = server.call(method, path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        assert!(
            body["error"].as_str().unwrap().contains("\"orders\""),
            "{body}"
        );
    }
    assert_eq!(filter.stats().rebuilds, 1);
    // A rebuild is a POST.
    assert_eq!(
        server.get("/admin/filters/users/rebuild").await.0,
        StatusCode::METHOD_NOT_ALLOWED
    );
}

/// A source that yields its keys only once `gate` hands out a permit: a rebuild that stays
/// running until the test lets it finish.
fn gated(
    gate: &Arc<Semaphore>,
    keys: Vec<u64>,
) -> impl bloom_tower::KeySource<Key = u64> + Send + Sync + use<> {
    let gate = Arc::clone(gate);
    key_source::from_stream(move || {
        let gate = Arc::clone(&gate);
        let keys = keys.clone();
        futures_util::stream::once(async move {
            gate.acquire().await.unwrap().forget();
            futures_util::stream::iter(keys.into_iter().map(Ok::<_, io::Error>))
        })
        .flatten()
    })
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_request_joins_the_running_rebuild() {
    let gate = Arc::new(Semaphore::new(0));
    let filter = SharedFilter::builder().name("users").build(bloom(1_000));
    let server = Arc::new(
        Server::start(
            &filter,
            admin::Admin::new().filter(filter.clone(), gated(&gate, vec![7, 8, 9])),
        )
        .await,
    );
    let first = tokio::spawn({
        let server = Arc::clone(&server);
        async move { server.post("/admin/filters/users/rebuild").await }
    });
    until("the first rebuild to start", || filter.stats().rebuilding).await;
    assert_eq!(
        server.get("/admin/filters/users").await.1["rebuilding"],
        true
    );
    let second = tokio::spawn({
        let server = Arc::clone(&server);
        async move { server.post("/admin/filters/users/rebuild").await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    gate.add_permits(1);

    let (status, outcome) = first.await.unwrap();
    assert_eq!(
        (status, &outcome["outcome"]),
        (StatusCode::OK, &"rebuilt".into())
    );
    let (status, outcome) = second.await.unwrap();
    assert_eq!(
        (status, &outcome["outcome"], &outcome["keys"]),
        (StatusCode::OK, &"joined".into(), &3.into())
    );
    assert_eq!(filter.stats().rebuilds, 1, "one rebuild, two answers");
    assert!(filter.contains(&8u64));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_does_not_cancel_the_rebuild() {
    let gate = Arc::new(Semaphore::new(0));
    let filter = SharedFilter::builder().name("users").build(bloom(1_000));
    let server = Server::start(
        &filter,
        admin::Admin::new().filter(filter.clone(), gated(&gate, vec![7, 8, 9])),
    )
    .await;
    let request = tokio::spawn(async move {
        server.post("/admin/filters/users/rebuild").await;
    });
    until("the rebuild to start", || filter.stats().rebuilding).await;
    // The client gives up (a timeout, Ctrl-C on curl): its connection closes.
    request.abort();
    let _ = request.await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    gate.add_permits(1);
    until("the rebuild to finish", || !filter.stats().rebuilding).await;
    let stats = filter.stats();
    assert_eq!((stats.rebuilds, stats.cancelled_rebuilds), (1, 0));
    assert!(filter.contains(&9u64));
}

/// A replication layer whose fleet runs the rebuild on another instance.
struct Fleet;

impl ExternalRebuild for Fleet {
    fn rebuild<'a>(
        &'a self,
        _source: &'a dyn ErasedKeySource,
    ) -> Pin<Box<dyn Future<Output = Result<Reloaded, BoxError>> + Send + 'a>> {
        Box::pin(async { Ok(Reloaded::Elsewhere) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicated_filter_reports_a_rebuild_run_elsewhere() {
    let filter = SharedFilter::builder().name("users").build(bloom(1_000));
    filter.set_external_rebuild(Some(Arc::new(Fleet)));
    let server = Server::start(
        &filter,
        admin::Admin::new().filter(filter.clone(), vec![1u64]),
    )
    .await;
    assert_eq!(
        server.get("/admin/filters/users").await.1["replicated"],
        true
    );
    let (status, outcome) = server.post("/admin/filters/users/rebuild").await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(
        outcome,
        serde_json::json!({"filter": "users", "outcome": "elsewhere"})
    );
    assert_eq!(filter.stats().rebuilds, 0, "nothing rebuilt here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_stats_are_listed() {
    let filter = SharedFilter::builder().name("users").build(bloom(1_000));
    filter.insert(&1u64);
    let cache: bloom_tower::GuardedCache<u64, String> =
        bloom_tower::GuardedCache::builder(filter.clone()).build();
    let found = cache
        .get_or_load(&1, |_| async { Ok::<_, io::Error>(Some("ada".to_owned())) })
        .await
        .unwrap();
    assert_eq!(found.as_deref(), Some("ada"));
    let server = Server::start(
        &filter,
        admin::Admin::new()
            .filter(filter.clone(), vec![1u64])
            .cache("users", cache),
    )
    .await;
    let (status, body) = server.get("/admin/caches").await;
    assert_eq!(status, StatusCode::OK);
    let users = &body["caches"][0];
    assert_eq!(
        (&users["name"], &users["loads"]),
        (&"users".into(), &1.into())
    );
    assert_eq!(users["loads_in_flight"], 0);
}

#[test]
#[should_panic(expected = "registered already")]
fn two_filters_of_one_name_are_refused() {
    let _ = admin::Admin::new()
        .filter(SharedFilter::<u64>::new(bloom(10)), vec![1u64])
        .filter(SharedFilter::<u64>::new(bloom(10)), vec![1u64]);
}

/// `GET /guards` shows a registered guard's counters as its requests move them, and a filter's
/// stats carry the measured false-positive rate once a cache reports false positives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guard_stats_and_the_filter_accuracy_are_listed() {
    let filter = SharedFilter::<u64>::builder()
        .name("users")
        .build(bloom(1_000));
    filter.insert(&1u64);
    filter.insert(&2u64); // a false positive: in the filter, not in the "database"
    let guard =
        BloomGuard::new(filter.clone(), key::path_param("id").parse::<u64>()).name("users-guard");
    let cache: bloom_tower::GuardedCache<u64, String> =
        bloom_tower::GuardedCache::builder(filter.clone()).build();
    let admin = admin::Admin::new()
        .filter(filter.clone(), vec![1u64])
        .guard(&guard);
    let app = Router::new()
        .route(
            "/users/{id}",
            get(|Path(id): Path<u64>| async move { format!("user {id}") }),
        )
        .route_layer(guard)
        .nest("/admin", admin::router(admin));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let server = Server {
        addr,
        client: Client::builder(TokioExecutor::new()).build_http(),
    };

    let absent = (3u64..).filter(|id| !filter.contains(id)).take(3);
    for id in [1, 2].into_iter().chain(absent) {
        server.get(&format!("/users/{id}")).await;
    }
    let (status, guards) = server.get("/admin/guards").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        guards,
        serde_json::json!({"guards": [{"name": "users-guard", "checked": 5, "passed": 2,
            "rejected": 3, "missing_key": 0}]})
    );

    // The loader does not find 2: one false positive against the guard's 3 rejections.
    let nobody = |_| async { Ok::<_, io::Error>(None) };
    assert_eq!(cache.get_or_load(&2, nobody).await.unwrap(), None);
    let (_, users) = server.get("/admin/filters/users").await;
    assert_eq!(
        (&users["rejections"], &users["false_positives"]),
        (&3.into(), &1.into())
    );
    assert_eq!(users["measured_fpr"], 0.25, "{users}");
}
