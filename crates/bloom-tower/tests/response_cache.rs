//! ResponseCache on a real axum server, driven over TCP by a real HTTP client.
//!
//! Each handler counts its runs: a request that reached the handler was not served from
//! the cache. No test depends on timing; timeouts only bound liveness.
#![cfg(feature = "axum")]

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query};
use axum::http::{HeaderMap, HeaderValue, Method, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bloom_tower::key::{self, PathParam};
use bloom_tower::{BloomFilter, BloomGuard, ResponseCache, SharedFilter};
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::sync::Notify;

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

/// How long a request may take before a test calls it stuck: a liveness bound, far above
/// anything a passing run needs.
const STUCK: Duration = Duration::from_secs(20);

/// Serves `app` on 127.0.0.1 and returns its address and a client for it.
async fn serve(app: Router) -> (SocketAddr, HttpClient) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let client = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(1_000)
        .build_http();
    (addr, client)
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Reply {
    fn text(&self) -> &str {
        std::str::from_utf8(&self.body).unwrap()
    }
}

async fn send(
    client: &HttpClient,
    addr: SocketAddr,
    method: Method,
    path: &str,
    headers: &[(&'static str, &'static str)],
) -> Reply {
    let mut request = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = tokio::time::timeout(STUCK, client.request(request.body(Empty::new()).unwrap()))
        .await
        .expect("request stuck")
        .unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        headers,
        body,
    }
}

async fn get_with(
    client: &HttpClient,
    addr: SocketAddr,
    path: &str,
    headers: &[(&'static str, &'static str)],
) -> Reply {
    send(client, addr, Method::GET, path, headers).await
}

async fn get_text(client: &HttpClient, addr: SocketAddr, path: &str) -> (StatusCode, String) {
    let reply = get_with(client, addr, path, &[]).await;
    (reply.status, reply.text().to_owned())
}

async fn eventually(mut cond: impl FnMut() -> bool) {
    tokio::time::timeout(STUCK, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("condition never became true");
}

/// Counts handler runs.
#[derive(Clone, Default)]
struct Runs(Arc<AtomicUsize>);

impl Runs {
    /// Counts a run; returns how many ran before it.
    fn count(&self) -> usize {
        self.0.fetch_add(1, SeqCst)
    }

    fn get(&self) -> usize {
        self.0.load(SeqCst)
    }
}

fn who(headers: &HeaderMap) -> String {
    headers
        .get(header::AUTHORIZATION)
        .map_or("anonymous".into(), |v| v.to_str().unwrap().to_owned())
}

// --- kept from the hot-key tests: coalescing, negative caching, behind the guard -----------

struct GuardedApp {
    addr: SocketAddr,
    client: HttpClient,
    runs: Runs,
    release: Arc<Notify>,
    cache: ResponseCache<PathParam>,
}

/// `/users/{id}`: ids below 100 exist (the guard's filter holds 0..1000, so 100..1000 reach
/// the handler and get 404); `/nostore/{id}` answers with `no-store`. The handler holds each
/// `/users` response until `release` is notified, so concurrent requests really overlap.
async fn start_guarded() -> GuardedApp {
    let runs = Runs::default();
    let release = Arc::new(Notify::new());
    let cache = ResponseCache::builder(key::path_param("id"))
        .negative_ttl(Duration::from_secs(60))
        .build();
    // The ids are inserted as text, as the guard's `path_param("id")` finds them.
    let filter = SharedFilter::<String>::new(
        BloomFilter::builder()
            .expected_items(1_000)
            .false_positive_rate(0.01)
            .seed(1)
            .build()
            .unwrap(),
    );
    for id in 0..1_000u64 {
        filter.insert(&id.to_string());
    }
    let user = {
        let (runs, release) = (runs.clone(), release.clone());
        move |Path(id): Path<u64>| async move {
            runs.count();
            release.notified().await;
            if id < 100 {
                (StatusCode::OK, format!("user {id}")).into_response()
            } else {
                StatusCode::NOT_FOUND.into_response()
            }
        }
    };
    let nostore = {
        let runs = runs.clone();
        move |Path(id): Path<u64>| async move {
            runs.count();
            (
                [(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))],
                format!("secret {id}"),
            )
        }
    };
    let app = Router::new()
        .route("/users/{id}", get(user))
        .route("/nostore/{id}", get(nostore))
        .route_layer(cache.clone())
        .route_layer(BloomGuard::new(filter, key::path_param("id")));
    let (addr, client) = serve(app).await;
    GuardedApp {
        addr,
        client,
        runs,
        release,
        cache,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_requests_for_one_cold_url_run_the_handler_once() {
    let app = start_guarded().await;
    let requests: Vec<_> = (0..1_000)
        .map(|_| {
            let client = app.client.clone();
            tokio::spawn(async move { get_text(&client, app.addr, "/users/42").await })
        })
        .collect();
    eventually(|| app.cache.stats().coalesced_waiters == 999).await;
    app.release.notify_one();
    for r in requests {
        assert_eq!(r.await.unwrap(), (StatusCode::OK, "user 42".to_owned()));
    }
    assert_eq!(app.runs.get(), 1);
    // Now hot: served from the cache without the handler, with its age.
    let hit = get_with(&app.client, app.addr, "/users/42", &[]).await;
    assert_eq!((hit.status, hit.text()), (StatusCode::OK, "user 42"));
    assert!(hit.headers.contains_key(header::AGE));
    assert_eq!(app.runs.get(), 1);
    assert_eq!(app.cache.stats().hits, 1);
    assert_eq!(app.cache.loads_in_flight(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_found_is_negative_cached_and_no_store_never_is() {
    let app = start_guarded().await;
    let first = tokio::spawn({
        let client = app.client.clone();
        async move { get_text(&client, app.addr, "/users/500").await.0 }
    });
    eventually(|| app.runs.get() == 1).await;
    app.release.notify_one();
    assert_eq!(first.await.unwrap(), StatusCode::NOT_FOUND);
    assert_eq!(
        get_text(&app.client, app.addr, "/users/500").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(app.runs.get(), 1, "the second 404 came from the cache");
    assert_eq!(app.cache.stats().negative_hits, 1);

    for _ in 0..3 {
        assert_eq!(
            get_text(&app.client, app.addr, "/nostore/7").await,
            (StatusCode::OK, "secret 7".to_owned())
        );
    }
    assert_eq!(
        app.runs.get(),
        4,
        "no-store responses reached the handler every time"
    );

    // An id the guard's filter does not hold never reaches the cache or the handler.
    let loads = app.cache.stats().loads;
    assert_eq!(
        get_text(&app.client, app.addr, "/users/123456789").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(app.cache.stats().loads, loads);
    assert_eq!(app.runs.get(), 4);
}

// --- what identifies the resource ----------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_not_shared_unless_the_response_is_public() {
    let runs = Runs::default();
    // The same handler three times: no directive, `public`, `s-maxage`.
    let route = |cache_control: Option<&'static str>| {
        let runs = runs.clone();
        get(move |Path(id): Path<u64>, headers: HeaderMap| async move {
            runs.count();
            let mut response = format!("user {id} for {}", who(&headers)).into_response();
            if let Some(value) = cache_control {
                let value = HeaderValue::from_static(value);
                response.headers_mut().insert(header::CACHE_CONTROL, value);
            }
            response
        })
    };
    let cache = ResponseCache::new(key::path_param("id"));
    let app = Router::new()
        .route("/users/{id}", route(None))
        .route("/public/{id}", route(Some("public, max-age=60")))
        .route("/shared/{id}", route(Some("s-maxage=60")))
        .route_layer(cache.clone());
    let (addr, client) = serve(app).await;
    const ALICE: &[(&str, &str)] = &[("authorization", "Bearer alice")];
    const BOB: &[(&str, &str)] = &[("authorization", "Bearer bob")];

    let alice = get_with(&client, addr, "/users/1", ALICE).await;
    assert_eq!(alice.text(), "user 1 for Bearer alice");
    let anonymous = get_with(&client, addr, "/users/1", &[]).await;
    assert_eq!(
        anonymous.text(),
        "user 1 for anonymous",
        "alice's response leaked"
    );
    assert_eq!(runs.get(), 2);
    // The anonymous response is stored (a second anonymous request is a hit)…
    assert_eq!(
        get_with(&client, addr, "/users/1", &[]).await.text(),
        "user 1 for anonymous"
    );
    assert_eq!(runs.get(), 2);
    // …but it does not answer a request with credentials.
    let alice = get_with(&client, addr, "/users/1", ALICE).await;
    assert_eq!(
        alice.text(),
        "user 1 for Bearer alice",
        "served a shared response to alice"
    );
    assert_eq!(runs.get(), 3);

    // `public` and `s-maxage` responses to alice may be shared, with anyone.
    for path in ["/public/1", "/shared/1"] {
        let before = runs.get();
        assert_eq!(
            get_with(&client, addr, path, ALICE).await.text(),
            "user 1 for Bearer alice"
        );
        for headers in [&[][..], BOB] {
            let reply = get_with(&client, addr, path, headers).await;
            assert_eq!(reply.text(), "user 1 for Bearer alice", "{path} not shared");
        }
        assert_eq!(runs.get(), before + 1, "{path}");
    }
    let stats = cache.stats();
    assert_eq!(stats.not_stored, 2, "alice's two private responses");
    assert_eq!(stats.hits, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_query_is_part_of_the_key_unless_sharing_by_key_only() {
    let runs = Runs::default();
    let route = || {
        let runs = runs.clone();
        get(
            move |Path(id): Path<u64>, Query(query): Query<HashMap<String, String>>| async move {
                runs.count();
                format!(
                    "user {id}: {}",
                    query.get("fields").map_or("all", String::as_str)
                )
            },
        )
    };
    let by_url = ResponseCache::new(key::path_param("id"));
    let by_key = ResponseCache::builder(key::path_param("id"))
        .share_by_key_only()
        .build();
    let app = Router::new()
        .route("/users/{id}", route().route_layer(by_url.clone()))
        .route("/shared/{id}", route().route_layer(by_key.clone()));
    let (addr, client) = serve(app).await;

    let text = |path: &'static str| {
        let client = client.clone();
        async move { get_text(&client, addr, path).await.1 }
    };
    assert_eq!(text("/users/2?fields=email").await, "user 2: email");
    assert_eq!(
        text("/users/2?fields=name").await,
        "user 2: name",
        "served another query's"
    );
    assert_eq!(text("/users/2").await, "user 2: all");
    assert_eq!(runs.get(), 3);
    assert_eq!(text("/users/2?fields=email").await, "user 2: email");
    assert_eq!(text("/users/2?fields=name").await, "user 2: name");
    assert_eq!(runs.get(), 3, "each query variant is stored");

    // One invalidation drops every variant of the record.
    by_url.invalidate("2").await;
    assert_eq!(text("/users/2?fields=email").await, "user 2: email");
    assert_eq!(text("/users/2?fields=name").await, "user 2: name");
    assert_eq!(runs.get(), 5);

    // Opting in to key-only sharing: every URL with key 2 gets the first response.
    assert_eq!(text("/shared/2?fields=email").await, "user 2: email");
    assert_eq!(text("/shared/2?fields=name").await, "user 2: email");
    assert_eq!(text("/shared/2").await, "user 2: email");
    assert_eq!(runs.get(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vary_keys_responses_by_the_request_headers_it_names() {
    let runs = Runs::default();
    let route = |vary: &'static str| {
        let runs = runs.clone();
        get(move |headers: HeaderMap| async move {
            runs.count();
            let greeting = match headers.get(header::ACCEPT_LANGUAGE).map(|v| v.as_bytes()) {
                Some(b"de") => "hallo",
                Some(_) => "hello",
                None => "hi",
            };
            ([(header::VARY, vary)], greeting)
        })
    };
    let app = Router::new()
        .route("/greeting/{id}", route("Accept-Language"))
        .route("/star/{id}", route("*"))
        .route_layer(ResponseCache::new(key::path_param("id")));
    let (addr, client) = serve(app).await;
    const EN: &[(&str, &str)] = &[("accept-language", "en")];
    const DE: &[(&str, &str)] = &[("accept-language", "de")];

    let greet = |headers: &'static [(&'static str, &'static str)]| {
        let client = client.clone();
        async move {
            get_with(&client, addr, "/greeting/1", headers)
                .await
                .text()
                .to_owned()
        }
    };
    assert_eq!(greet(EN).await, "hello");
    assert_eq!(
        greet(DE).await,
        "hallo",
        "served the English variant to German"
    );
    assert_eq!(greet(&[]).await, "hi");
    assert_eq!(runs.get(), 3);
    assert_eq!(greet(EN).await, "hello");
    assert_eq!(greet(DE).await, "hallo");
    assert_eq!(greet(&[]).await, "hi");
    assert_eq!(runs.get(), 3, "equal values hit");

    for _ in 0..2 {
        assert_eq!(get_with(&client, addr, "/star/1", EN).await.text(), "hello");
    }
    assert_eq!(runs.get(), 5, "Vary: * is never stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_no_store_no_cache_and_set_cookie_responses_are_not_stored() {
    let runs = Runs::default();
    let handler = {
        let runs = runs.clone();
        move |Path((kind, id)): Path<(String, u64)>| async move {
            runs.count();
            let (name, value) = match kind.as_str() {
                "private" => (header::CACHE_CONTROL, "private, max-age=60"),
                "no-store" => (header::CACHE_CONTROL, "no-store"),
                "no-cache" => (header::CACHE_CONTROL, "no-cache"),
                "cookie" => (header::SET_COOKIE, "session=abc"),
                "zero-age" => (header::CACHE_CONTROL, "public, max-age=0"),
                _ => (header::CACHE_CONTROL, "public, max-age=60"),
            };
            ([(name, value)], format!("{kind} {id}"))
        }
    };
    let cache = ResponseCache::new(key::path_param("id"));
    let app = Router::new()
        .route("/{kind}/{id}", get(handler))
        .route_layer(cache.clone());
    let (addr, client) = serve(app).await;

    for kind in ["private", "no-store", "no-cache", "cookie", "zero-age"] {
        let path = format!("/{kind}/1");
        let before = runs.get();
        for _ in 0..2 {
            assert_eq!(get_text(&client, addr, &path).await.1, format!("{kind} 1"));
        }
        assert_eq!(
            runs.get(),
            before + 2,
            "a {kind} response was served from the cache"
        );
    }
    assert_eq!(cache.stats().not_stored, 10);

    // A plain public response is stored; a request that asks for the origin bypasses it.
    for _ in 0..2 {
        get_text(&client, addr, "/plain/1").await;
    }
    assert_eq!(runs.get(), 11);
    for directive in ["no-cache", "no-store"] {
        get_with(&client, addr, "/plain/1", &[("cache-control", directive)]).await;
    }
    assert_eq!(runs.get(), 13);
    assert_eq!(cache.stats().bypassed, 2);
    // HEAD is not served from (nor stored in) the cache.
    send(&client, addr, Method::HEAD, "/plain/1", &[]).await;
    assert_eq!(runs.get(), 14);
}

// --- invalidation, waiting, size ----------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_404_read_before_a_create_commits_does_not_outlive_the_invalidate() {
    let db: Arc<Mutex<HashSet<u64>>> = Arc::default();
    let runs = Runs::default();
    let (read_absent, respond) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let handler = {
        let (db, runs) = (db.clone(), runs.clone());
        let (read_absent, respond) = (read_absent.clone(), respond.clone());
        move |Path(id): Path<u64>| async move {
            let exists = db.lock().unwrap().contains(&id);
            if runs.count() == 0 {
                // The first load has read "absent"; the create commits before it answers.
                read_absent.notify_one();
                respond.notified().await;
            }
            if exists {
                (StatusCode::OK, "item").into_response()
            } else {
                StatusCode::NOT_FOUND.into_response()
            }
        }
    };
    let cache = ResponseCache::new(key::path_param("id"));
    let app = Router::new()
        .route("/items/{id}", get(handler))
        .route_layer(cache.clone());
    let (addr, client) = serve(app).await;

    let stale = tokio::spawn({
        let client = client.clone();
        async move { get_text(&client, addr, "/items/7").await.0 }
    });
    read_absent.notified().await;
    db.lock().unwrap().insert(7); // the create commits…
    cache.invalidate("7").await; // …and invalidates, while the 404 is still on its way
    respond.notify_one();
    assert_eq!(stale.await.unwrap(), StatusCode::NOT_FOUND);

    assert_eq!(
        get_text(&client, addr, "/items/7").await,
        (StatusCode::OK, "item".to_owned()),
        "the 404 loaded before the create was served after its invalidate"
    );
    assert_eq!(runs.get(), 2);
    assert_eq!(cache.stats().stale_loads_discarded, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successful_unsafe_request_invalidates_its_key() {
    let runs = Runs::default();
    let version = Arc::new(AtomicUsize::new(1));
    let read = {
        let (runs, version) = (runs.clone(), version.clone());
        move |Path(id): Path<u64>| async move {
            runs.count();
            format!("user {id} v{}", version.load(SeqCst))
        }
    };
    let write = {
        let version = version.clone();
        move || async move {
            version.fetch_add(1, SeqCst);
            StatusCode::NO_CONTENT
        }
    };
    let app = Router::new()
        .route("/users/{id}", get(read).put(write))
        .route_layer(ResponseCache::new(key::path_param("id")));
    let (addr, client) = serve(app).await;

    assert_eq!(get_text(&client, addr, "/users/3").await.1, "user 3 v1");
    assert_eq!(get_text(&client, addr, "/users/3").await.1, "user 3 v1");
    assert_eq!(runs.get(), 1);
    let put = send(&client, addr, Method::PUT, "/users/3", &[]).await;
    assert_eq!(put.status, StatusCode::NO_CONTENT);
    assert_eq!(get_text(&client, addr, "/users/3").await.1, "user 3 v2");
    assert_eq!(runs.get(), 2);
}

/// `/slow/{id}`: the first run never answers (a hung handler), every later run answers.
async fn start_with_hung_first_run(
    cache: ResponseCache<PathParam>,
) -> (SocketAddr, HttpClient, Runs) {
    let runs = Runs::default();
    let handler = {
        let runs = runs.clone();
        move |Path(id): Path<u64>| async move {
            if runs.count() == 0 {
                std::future::pending::<()>().await;
            }
            format!("user {id}")
        }
    };
    let app = Router::new()
        .route("/slow/{id}", get(handler))
        .route_layer(cache);
    let (addr, client) = serve(app).await;
    (addr, client, runs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_leader_does_not_strand_its_waiters() {
    let cache = ResponseCache::builder(key::path_param("id"))
        .wait_timeout(Duration::from_millis(200))
        .build();
    let (addr, client, runs) = start_with_hung_first_run(cache.clone()).await;
    let hung = tokio::spawn({
        let client = client.clone();
        async move { get_text(&client, addr, "/slow/1").await }
    });
    eventually(|| runs.get() == 1).await;

    // Waits on the hung load, gives up after `wait_timeout`, calls the handler itself
    // (`send` fails the test if this takes longer than its liveness bound).
    assert_eq!(
        get_text(&client, addr, "/slow/1").await,
        (StatusCode::OK, "user 1".to_owned())
    );
    let stats = cache.stats();
    assert_eq!((stats.coalesced_waiters, stats.wait_timeouts), (1, 1));
    assert_eq!(runs.get(), 2);
    // What the waiter loaded was stored.
    assert_eq!(get_text(&client, addr, "/slow/1").await.1, "user 1");
    assert_eq!(runs.get(), 2);

    hung.abort();
    eventually(|| cache.loads_in_flight() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_credentials_never_waits_on_another_load() {
    // A wait this long would fail the liveness bound: the request must not wait at all.
    let cache = ResponseCache::builder(key::path_param("id"))
        .wait_timeout(STUCK * 10)
        .build();
    let (addr, client, runs) = start_with_hung_first_run(cache.clone()).await;
    let hung = tokio::spawn({
        let client = client.clone();
        async move { get_text(&client, addr, "/slow/1").await }
    });
    eventually(|| runs.get() == 1).await;

    let alice = get_with(
        &client,
        addr,
        "/slow/1",
        &[("authorization", "Bearer alice")],
    )
    .await;
    assert_eq!(alice.text(), "user 1");
    let stats = cache.stats();
    assert_eq!((stats.coalesced_waiters, stats.bypassed), (0, 1));
    hung.abort();
}

/// A body that streams `len` bytes in 4 KiB frames while its `size_hint` claims exactly 10.
struct LyingBody {
    sent: usize,
    len: usize,
}

const FRAME: usize = 4 * 1024;

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

impl http_body::Body for LyingBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.sent == self.len {
            return Poll::Ready(None);
        }
        let end = (self.sent + FRAME).min(self.len);
        let chunk: Vec<u8> = (self.sent..end).map(|i| (i % 251) as u8).collect();
        self.sent = end;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(chunk)))))
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(10)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_limit_reaches_the_client_whole_and_is_not_stored() {
    const LEN: usize = 200 * 1024;
    let runs = Runs::default();
    let handler = {
        let runs = runs.clone();
        move || async move {
            runs.count();
            Response::new(axum::body::Body::new(LyingBody { sent: 0, len: LEN }))
        }
    };
    let cache = ResponseCache::builder(key::path_param("id"))
        .max_body_bytes(64 * 1024)
        .build();
    let app = Router::new()
        .route("/blobs/{id}", get(handler))
        .route_layer(cache.clone());
    let (addr, client) = serve(app).await;

    for round in 1..=2 {
        let reply = get_with(&client, addr, "/blobs/1", &[]).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.body.len(), LEN, "bytes lost");
        assert!(reply.body == pattern(LEN), "bytes corrupted");
        assert_eq!(runs.get(), round, "an over-limit body was stored");
    }
    assert_eq!(cache.stats().not_stored, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_byte_budget_bounds_what_is_held() {
    const BUDGET: u64 = 32 * 1024;
    let runs = Runs::default();
    let handler = {
        let runs = runs.clone();
        move |Path(id): Path<u64>, Query(query): Query<HashMap<String, usize>>| async move {
            runs.count();
            let len = query.get("len").copied().unwrap_or(1024);
            format!("{id}:{}", "x".repeat(len))
        }
    };
    let cache = ResponseCache::builder(key::path_param("id"))
        .max_bytes(BUDGET)
        .max_body_bytes(1024 * 1024)
        .build();
    let app = Router::new()
        .route("/blobs/{id}", get(handler))
        .route_layer(cache.clone());
    let (addr, client) = serve(app).await;

    get_text(&client, addr, "/blobs/0").await;
    cache.run_pending_tasks().await;
    assert!(
        cache.stats().bytes > 1024,
        "the body is weighed: {:?}",
        cache.stats()
    );
    for id in 1..100 {
        get_text(&client, addr, &format!("/blobs/{id}")).await;
        cache.run_pending_tasks().await;
        let bytes = cache.stats().bytes;
        assert!(bytes <= BUDGET, "{bytes} bytes held after {id} responses");
    }

    // A response that alone weighs more than the budget is never stored.
    let not_stored = cache.stats().not_stored;
    let runs_before = runs.get();
    for _ in 0..2 {
        get_text(&client, addr, "/blobs/1000?len=40000").await;
    }
    assert_eq!(runs.get(), runs_before + 2);
    assert_eq!(cache.stats().not_stored, not_stored + 2);
}

/// An upstream `Age` past what a cache can count (`u64::MAX`): the hit's `Age` is the
/// largest an HTTP cache sends, 2147483648 (RFC 9111 §1.2.2), not an overflowed sum.
#[tokio::test]
async fn an_age_past_any_counter_is_sent_as_the_largest_delta_seconds() {
    let runs = Runs::default();
    let handler = {
        let runs = runs.clone();
        move |Path(id): Path<u64>| async move {
            runs.count();
            (
                [(header::AGE, "18446744073709551615")],
                format!("user {id}"),
            )
        }
    };
    let cache = ResponseCache::new(key::path_param("id"));
    let app = Router::new()
        .route("/users/{id}", get(handler))
        .route_layer(cache.clone());
    let (addr, client) = serve(app).await;
    assert_eq!(get_text(&client, addr, "/users/7").await.1, "user 7");
    tokio::time::sleep(Duration::from_millis(1_100)).await; // the age counts on
    let hit = get_with(&client, addr, "/users/7", &[]).await;
    assert_eq!(hit.text(), "user 7");
    assert_eq!(runs.get(), 1, "served from the cache");
    assert_eq!(
        hit.headers.get(header::AGE).unwrap().to_str().unwrap(),
        "2147483648"
    );
}

/// `GET http://victim/…` sent with `Host: evil` (what a client can put on the wire) to a
/// handler that answers for its `Host`: the response is not stored under `victim`, so a later
/// request for `victim` gets `victim`'s own answer. `X-Forwarded-Host` is part of the key.
#[tokio::test]
async fn a_target_authority_that_disagrees_with_host_is_not_cached() {
    let handler = |headers: HeaderMap, Path(id): Path<u64>| async move {
        let host = headers
            .get("x-forwarded-host")
            .or(headers.get(header::HOST))
            .map(|h| h.to_str().unwrap().to_owned())
            .unwrap_or_default();
        format!("{host} {id}")
    };
    let cache = ResponseCache::new(key::path_param("id"));
    let app = Router::new()
        .route("/users/{id}", get(handler))
        .route_layer(cache.clone());
    let (addr, _client) = serve(app).await;
    // Raw HTTP/1.1: an absolute-form target with another Host.
    let raw = |request: String| async move {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer.rsplit("\r\n\r\n").next().unwrap().to_owned()
    };
    let get = |target: &str, headers: &str| {
        format!("GET {target} HTTP/1.1\r\n{headers}Connection: close\r\n\r\n")
    };
    assert_eq!(
        raw(get("http://victim/users/1", "Host: evil\r\n")).await,
        "evil 1"
    );
    assert_eq!(raw(get("/users/1", "Host: victim\r\n")).await, "victim 1");
    // Forwarded for another host: its own entry, both ways.
    let forwarded = "Host: victim\r\nX-Forwarded-Host: evil\r\n";
    assert_eq!(raw(get("/users/2", forwarded)).await, "evil 2");
    assert_eq!(raw(get("/users/2", "Host: victim\r\n")).await, "victim 2");
    assert_eq!(raw(get("/users/2", forwarded)).await, "evil 2");
    assert!(cache.stats().hits >= 1, "{:?}", cache.stats());
}
