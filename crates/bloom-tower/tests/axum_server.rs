//! An axum app served on a real TCP port, driven by a real hyper client: the guard answers
//! absent ids itself (the handler never runs for them) and lets existing ones through.
#![cfg(feature = "axum")]

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::routing::get;
use bloom_tower::{BloomFilter, BloomGuard, SharedFilter, key};
use http::header::HeaderName;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// What the handlers share: the "database" and how often a handler ran.
#[derive(Clone)]
struct Db {
    users: Arc<HashSet<u64>>,
    calls: Arc<AtomicUsize>,
}

impl Db {
    fn lookup(&self, id: u64) -> (StatusCode, String) {
        self.calls.fetch_add(1, SeqCst);
        if self.users.contains(&id) {
            (StatusCode::OK, format!("user {id}"))
        } else {
            // A false positive of the filter: the handler's own 404.
            (
                StatusCode::NOT_FOUND,
                "no such user (from the handler)".into(),
            )
        }
    }
}

async fn user(State(db): State<Db>, Path(id): Path<u64>) -> (StatusCode, String) {
    db.lookup(id)
}

async fn org_user(
    State(db): State<Db>,
    Path((_, _, id)): Path<(String, String, u64)>,
) -> (StatusCode, String) {
    db.lookup(id)
}

async fn file(State(db): State<Db>, Path(path): Path<String>) -> String {
    db.calls.fetch_add(1, SeqCst);
    format!("file {path}")
}

async fn search(State(db): State<Db>, RawQuery(query): RawQuery) -> String {
    db.calls.fetch_add(1, SeqCst);
    format!("search {query:?}")
}

async fn me(State(db): State<Db>) -> &'static str {
    db.calls.fetch_add(1, SeqCst);
    "me"
}

struct Server {
    addr: SocketAddr,
    client: Client<HttpConnector, Empty<Bytes>>,
    calls: Arc<AtomicUsize>,
    /// User ids (`/users/{id}`, the nested route).
    filter: SharedFilter<u64>,
    /// Text keys: file paths (`/files/{*path}`) and user names (`/search?user=`).
    names: SharedFilter<String>,
    /// Raw `x-user` header values (`/me`).
    header_users: SharedFilter<Vec<u8>>,
}

/// An empty filter of `K` keys with a fixed hash key.
fn seeded<K: ?Sized>() -> SharedFilter<K> {
    SharedFilter::new(
        BloomFilter::builder()
            .expected_items(10_000)
            .false_positive_rate(0.01)
            .seed(0xA11CE_u128)
            .build()
            .unwrap(),
    )
}

impl Server {
    async fn start() -> Self {
        let users: HashSet<u64> = (1..=100).collect();
        let filter = seeded::<u64>();
        filter
            .reload_from(&users.iter().copied().collect::<Vec<u64>>())
            .await
            .unwrap();
        let names = seeded::<String>();
        for text_key in ["docs/a b.txt", "ada"] {
            names.insert(text_key);
        }
        let header_users = seeded::<Vec<u8>>();
        header_users.insert(b"user-7".as_slice());
        let calls = Arc::new(AtomicUsize::new(0));
        let db = Db {
            users: Arc::new(users),
            calls: Arc::clone(&calls),
        };

        let ids = || key::path_param("id").parse::<u64>();
        let nested = Router::new()
            .route("/orgs/{org}/users/{id}", get(org_user))
            .route_layer(BloomGuard::new(filter.clone(), ids()));
        let app = Router::new()
            .route("/users/{id}", get(user))
            .route_layer(
                BloomGuard::new(filter.clone(), ids())
                    .name("users")
                    .on_missing_key(StatusCode::BAD_REQUEST),
            )
            .merge(
                Router::new()
                    .route("/files/{*path}", get(file))
                    .route_layer(BloomGuard::new(names.clone(), key::path_param("path"))),
            )
            .merge(
                Router::new()
                    .route("/search", get(search))
                    .route_layer(BloomGuard::new(names.clone(), key::query("user"))),
            )
            .merge(
                Router::new().route("/me", get(me)).route_layer(
                    BloomGuard::new(
                        header_users.clone(),
                        key::header(HeaderName::from_static("x-user")),
                    )
                    .on_missing_key(StatusCode::UNAUTHORIZED),
                ),
            )
            .nest("/api/{version}", nested)
            .with_state(db);

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let client = Client::builder(TokioExecutor::new()).build_http();
        Server {
            addr,
            client,
            calls,
            filter,
            names,
            header_users,
        }
    }

    async fn get(&self, path: &str) -> (StatusCode, String) {
        self.get_with(path, None).await
    }

    async fn get_with(&self, path: &str, user: Option<&str>) -> (StatusCode, String) {
        let mut request = Request::get(format!("http://{}{path}", self.addr));
        if let Some(user) = user {
            request = request.header("x-user", user);
        }
        let response = self
            .client
            .request(request.body(Empty::new()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    fn calls(&self) -> usize {
        self.calls.load(SeqCst)
    }

    /// `n` ids the filter says are definitely absent.
    fn absent_ids(&self, n: usize) -> Vec<u64> {
        (1_000u64..)
            .filter(|id| !self.filter.contains(id))
            .take(n)
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn existing_ids_reach_the_handler_and_absent_ones_get_404_from_the_guard() {
    let server = Server::start().await;

    for id in [1, 42, 100] {
        assert_eq!(
            server.get(&format!("/users/{id}")).await,
            (StatusCode::OK, format!("user {id}"))
        );
    }
    assert_eq!(server.calls(), 3);

    for id in server.absent_ids(20) {
        let (status, body) = server.get(&format!("/users/{id}")).await;
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::NOT_FOUND, "Not Found"),
            "id {id}"
        );
    }
    assert_eq!(server.calls(), 3, "the handler ran for an absent id");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_or_missing_key_follows_the_routes_policy() {
    let server = Server::start().await;

    // `/users/{id}`: not a u64 → the guard's 400, handler not called.
    assert_eq!(server.get("/users/abc").await.0, StatusCode::BAD_REQUEST);
    assert_eq!(server.get("/users/-1").await.0, StatusCode::BAD_REQUEST);
    // `/me`: no header → 401; a known user → through; an unknown one → 404.
    assert_eq!(server.get("/me").await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(server.calls(), 0);
    assert_eq!(
        server.get_with("/me", Some("user-7")).await,
        (StatusCode::OK, "me".into())
    );
    let stranger = (0..)
        .map(|i| format!("user-{i}"))
        .find(|user| !server.header_users.contains(user.as_bytes()))
        .unwrap();
    assert_eq!(
        server.get_with("/me", Some(&stranger)).await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(server.calls(), 1);
    // `/search`: no `user` parameter → passes through (the default policy).
    assert_eq!(
        server.get("/search").await,
        (StatusCode::OK, "search None".into())
    );
    assert_eq!(server.calls(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_params_are_found_in_nested_routers_wildcards_and_queries() {
    let server = Server::start().await;

    assert_eq!(
        server.get("/api/v1/orgs/acme/users/5").await,
        (StatusCode::OK, "user 5".into())
    );
    let absent = server.absent_ids(1)[0];
    let (status, body) = server
        .get(&format!("/api/v1/orgs/acme/users/{absent}"))
        .await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::NOT_FOUND, "Not Found")
    );
    assert_eq!(server.calls(), 1);

    // A wildcard captures the rest of the path, percent-decoded as axum's `Path` does.
    assert_eq!(
        server.get("/files/docs/a%20b.txt").await,
        (StatusCode::OK, "file docs/a b.txt".into())
    );
    assert_eq!(server.calls(), 2);
    let missing = (0..)
        .map(|i| format!("docs/missing-{i}.txt"))
        .find(|path| !server.names.contains(path.as_str()))
        .unwrap();
    assert_eq!(
        server.get(&format!("/files/{missing}")).await.0,
        StatusCode::NOT_FOUND
    );

    assert_eq!(server.get("/search?user=ada").await.0, StatusCode::OK);
    let stranger = (0..)
        .map(|i| format!("nobody{i}"))
        .find(|user| !server.names.contains(user.as_str()))
        .unwrap();
    assert_eq!(
        server.get(&format!("/search?user={stranger}")).await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(server.calls(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_inserted_while_serving_is_let_through_at_once() {
    let server = Server::start().await;
    let new_id = server.absent_ids(1)[0];
    assert_eq!(
        server.get(&format!("/users/{new_id}")).await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(server.calls(), 0);

    server.filter.insert(&new_id); // the record is being created
    let (status, _) = server.get(&format!("/users/{new_id}")).await;
    // The handler ran (its "database" does not have the id, hence its own 404).
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(server.calls(), 1);
}

/// `key::route`: the guard wraps the whole app (served by `axum::serve` as a plain service)
/// and names one route itself. Absent ids on that route never reach a handler; every other
/// route, and ids that exist, are served as if there were no guard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_around_the_whole_router_checks_only_the_route_it_names() {
    use tower::Layer;

    let users: HashSet<u64> = (1..=100).collect();
    let filter = seeded::<u64>();
    filter
        .reload_from(&users.iter().copied().collect::<Vec<u64>>())
        .await
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let db = Db {
        users: Arc::new(users),
        calls: Arc::clone(&calls),
    };
    let app = Router::new()
        .route("/users/{id}", get(user))
        .route("/me", get(me))
        .with_state(db);
    let ids = key::route("/users/{id}", "id").unwrap().parse::<u64>();
    let guarded = BloomGuard::new(filter.clone(), ids).layer(app);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, tower::make::Shared::new(guarded))
            .await
            .unwrap()
    });
    let client: Client<HttpConnector, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let get = |path: String| {
        let client = client.clone();
        async move {
            let uri = format!("http://{addr}{path}").parse().unwrap();
            client.get(uri).await.unwrap().status()
        }
    };

    assert_eq!(get("/users/42".into()).await, StatusCode::OK);
    assert_eq!(calls.load(SeqCst), 1);
    let absent: Vec<u64> = (1_000u64..)
        .filter(|id| !filter.contains(id))
        .take(50)
        .collect();
    for id in &absent {
        assert_eq!(get(format!("/users/{id}")).await, StatusCode::NOT_FOUND);
    }
    assert_eq!(calls.load(SeqCst), 1, "an absent id reached the handler");
    // Other routes have no key: served. Not a number: the handler's `Path` answers 400.
    assert_eq!(get("/me".into()).await, StatusCode::OK);
    assert_eq!(get("/users/abc".into()).await, StatusCode::BAD_REQUEST);
    assert_eq!(get("/nowhere".into()).await, StatusCode::NOT_FOUND);
    assert_eq!(calls.load(SeqCst), 2);
}
