//! A key given more than once with values that differ, on a real axum server over TCP: the
//! guard answers it `400 Bad Request` itself, whatever its missing-key policy. It never lets
//! it reach the handler unchecked (whose map of the query keeps the *last* value, so the first
//! says nothing about the id it looks up) and never answers it "absent" from one value.
//!
//! Rule: `bloom_tower::reject` (module docs); the extractors' side: `key::query`, `key::header`.
#![cfg(feature = "axum")]

#[path = "support/logs.rs"]
mod logs;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bloom_tower::reject::{REJECTION_HEADER, RejectedKey};
use bloom_tower::{BloomFilter, BloomGuard, SharedFilter, key};
use http::header::HeaderName;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// The "database": users 1 to 100, and how often a handler looked one up.
#[derive(Clone)]
struct Db {
    users: Arc<HashSet<u64>>,
    lookups: Arc<AtomicUsize>,
}

impl Db {
    fn lookup(&self, id: Option<&String>) -> (StatusCode, String) {
        let Some(id) = id.and_then(|id| id.parse::<u64>().ok()) else {
            return (StatusCode::BAD_REQUEST, "no id (from the handler)".into());
        };
        self.lookups.fetch_add(1, SeqCst);
        if self.users.contains(&id) {
            (StatusCode::OK, format!("user {id}"))
        } else {
            (
                StatusCode::NOT_FOUND,
                "no such user (from the handler)".into(),
            )
        }
    }
}

/// `/users?id=`: a map of the query, as many handlers read it; a repeated `id` is its last
/// value.
async fn user(State(db): State<Db>, Query(query): Query<HashMap<String, String>>) -> Response {
    db.lookup(query.get("id")).into_response()
}

/// `/me` with `x-user`: the last field line, as a handler behind a proxy that appends may read
/// it.
async fn me(State(db): State<Db>, headers: HeaderMap) -> Response {
    let last = headers.get_all("x-user").iter().next_back();
    let id = last
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    db.lookup(id.as_ref()).into_response()
}

struct Server {
    addr: SocketAddr,
    client: Client<HttpConnector, Empty<Bytes>>,
    lookups: Arc<AtomicUsize>,
    filter: SharedFilter<u64>,
}

/// The filter of users 1 to 100, with a fixed hash key.
async fn users_filter() -> SharedFilter<u64> {
    let filter = SharedFilter::new(
        BloomFilter::builder()
            .expected_items(10_000)
            .false_positive_rate(0.01)
            .seed(0xD0_0B1E_u128)
            .build()
            .unwrap(),
    );
    filter
        .reload_from(&(1..=100).collect::<Vec<u64>>())
        .await
        .unwrap();
    filter
}

/// `/users?id=` (`user`), guarded by the test's guard over `key::query("id")`.
fn users() -> Router<Db> {
    Router::new().route("/users", get(user))
}

impl Server {
    /// Serves `users_route` (the test's guarded `/users`) and `/me` behind a guard over the
    /// `x-user` header with the default policies, both over `filter`.
    async fn start(filter: SharedFilter<u64>, users_route: Router<Db>) -> Self {
        let lookups = Arc::new(AtomicUsize::new(0));
        let db = Db {
            users: Arc::new((1..=100).collect()),
            lookups: Arc::clone(&lookups),
        };
        let by_header = key::header(HeaderName::from_static("x-user")).parse::<u64>();
        let app = users_route
            .merge(
                Router::new()
                    .route("/me", get(me))
                    .route_layer(BloomGuard::new(filter.clone(), by_header)),
            )
            .with_state(db);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Server {
            addr,
            client: Client::builder(TokioExecutor::new()).build_http(),
            lookups,
            filter,
        }
    }

    /// Status, `x-bloom-guard` header and body of `GET path` with these `x-user` lines.
    async fn get(&self, path: &str, users: &[&str]) -> (StatusCode, Option<String>, String) {
        let mut request = Request::get(format!("http://{}{path}", self.addr));
        for user in users {
            request = request.header("x-user", *user);
        }
        let response = self
            .client
            .request(request.body(Empty::new()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let marked = response
            .headers()
            .get(REJECTION_HEADER)
            .map(|value| value.to_str().unwrap().to_owned());
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, marked, String::from_utf8(body.to_vec()).unwrap())
    }

    fn lookups(&self) -> usize {
        self.lookups.load(SeqCst)
    }

    /// Ids the filter says are definitely absent.
    fn absent_ids(&self, n: usize) -> Vec<u64> {
        (1_000u64..)
            .filter(|id| !self.filter.contains(id))
            .take(n)
            .collect()
    }
}

/// The query strings that name two different ids, or an id beside an empty value.
fn ambiguous_queries(existing: u64, absent: u64) -> Vec<String> {
    vec![
        format!("/users?id=&id={existing}"),
        format!("/users?id=&id={absent}"),
        format!("/users?id={absent}&id={existing}"),
        format!("/users?id={existing}&id={absent}"),
        format!("/users?id={existing}&id="),
        format!("/users?id={existing}&id={}", existing + 1),
        format!("/users?id={existing}&id={existing}&id={absent}"),
        format!("/users?id={absent}&page=2&%69d={existing}"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_id_given_twice_with_different_values_is_answered_400_by_the_guard() {
    let filter = users_filter().await;
    let guard = BloomGuard::new(filter.clone(), key::query("id").parse::<u64>())
        .rejection_header(REJECTION_HEADER);
    let server = Server::start(filter, users().route_layer(guard.clone())).await;
    let absent = server.absent_ids(1)[0];
    let queries = ambiguous_queries(5, absent);

    for path in &queries {
        let (status, marked, body) = server.get(path, &[]).await;
        assert_eq!(
            (status, marked.as_deref(), body.as_str()),
            (StatusCode::BAD_REQUEST, Some("rejected"), "Bad Request"),
            "{path}: neither passed unchecked nor answered absent"
        );
    }
    assert_eq!(server.lookups(), 0, "an ambiguous id reached the handler");
    let stats = guard.stats();
    assert_eq!(
        (stats.ambiguous_key, stats.checked, stats.missing_key),
        (queries.len() as u64, 0, 0)
    );
    assert_eq!(server.get("/users?id=5", &[]).await.0, StatusCode::OK);
    assert_eq!(server.lookups(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_id_repeated_is_served_and_a_single_absent_id_is_still_rejected() {
    let filter = users_filter().await;
    let guard = BloomGuard::new(filter.clone(), key::query("id").parse::<u64>());
    let server = Server::start(filter, users().route_layer(guard)).await;
    let absent = server.absent_ids(20);

    for path in ["/users?id=5&id=5", "/users?id=5&id=%35", "/users?id=5"] {
        assert_eq!(
            server.get(path, &[]).await,
            (StatusCode::OK, None, "user 5".into()),
            "{path}"
        );
    }
    assert_eq!(server.lookups(), 3);
    for id in &absent {
        for path in [format!("/users?id={id}"), format!("/users?id={id}&id={id}")] {
            assert_eq!(
                server.get(&path, &[]).await,
                (StatusCode::NOT_FOUND, None, "Not Found".into()),
                "{path}: the guard's 404"
            );
        }
    }
    assert_eq!(server.lookups(), 3, "an absent id reached the handler");
    // No id, or only empty ones: the default missing-key policy passes, the handler answers.
    for path in ["/users", "/users?id=", "/users?id=&id="] {
        let (status, _, body) = server.get(path, &[]).await;
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::BAD_REQUEST, "no id (from the handler)"),
            "{path}"
        );
    }
    assert_eq!(server.lookups(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_given_twice_with_different_values_is_answered_400_by_the_guard() {
    let filter = users_filter().await;
    let server = Server::start(filter, users()).await;
    let absent = server.absent_ids(1)[0].to_string();

    for users in [
        &["", "5"][..],
        &[&absent, "5"],
        &["5", &absent],
        &["5", "6"],
    ] {
        let (status, _, body) = server.get("/me", users).await;
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::BAD_REQUEST, "Bad Request"),
            "{users:?}"
        );
    }
    assert_eq!(
        server.lookups(),
        0,
        "an ambiguous header reached the handler"
    );
    assert_eq!(
        server.get("/me", &["5", "5"]).await,
        (StatusCode::OK, None, "user 5".into())
    );
    assert_eq!(server.get("/me", &[&absent]).await.0, StatusCode::NOT_FOUND);
    assert_eq!(server.lookups(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closure_rejection_on_a_pass_through_guard_is_told_the_key_is_ambiguous() {
    // The closure has no answer of its own for an ambiguous key: with the pass-through policy
    // it is called with a key that says so, and the guard logs a WARN once.
    let _ = logs::logs();
    let filter = users_filter().await;
    let guard = BloomGuard::new(filter.clone(), key::query("id").parse::<u64>())
        .name("ambiguous-closure")
        .on_reject(|key: RejectedKey<'_>| {
            if key.is_ambiguous() {
                (StatusCode::BAD_REQUEST, "which id?").into_response()
            } else {
                (StatusCode::NOT_FOUND, "no such user").into_response()
            }
        });
    let server = Server::start(filter, users().route_layer(guard)).await;
    let absent = server.absent_ids(1)[0];

    for path in ambiguous_queries(5, absent) {
        let (status, _, body) = server.get(&path, &[]).await;
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::BAD_REQUEST, "which id?"),
            "{path}"
        );
    }
    assert_eq!(server.lookups(), 0, "an ambiguous id reached the handler");
    let (status, _, body) = server.get(&format!("/users?id={absent}"), &[]).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::NOT_FOUND, "no such user")
    );
    let warnings = logs::warnings_of("ambiguous-closure");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("is_ambiguous()"), "{warnings:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closure_rejection_leaves_an_ambiguous_key_to_a_missing_key_policy_that_answers() {
    let filter = users_filter().await;
    let guard = BloomGuard::new(filter.clone(), key::query("id").parse::<u64>())
        .on_reject(|_key: RejectedKey<'_>| (StatusCode::NOT_FOUND, "no such user").into_response())
        .on_missing_key(StatusCode::UNPROCESSABLE_ENTITY);
    let server = Server::start(filter, users().route_layer(guard)).await;
    let absent = server.absent_ids(1)[0];

    for path in ambiguous_queries(5, absent) {
        let (status, _, body) = server.get(&path, &[]).await;
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, "Unprocessable Entity"),
            "{path}"
        );
    }
    assert_eq!(server.lookups(), 0, "an ambiguous id reached the handler");
}
