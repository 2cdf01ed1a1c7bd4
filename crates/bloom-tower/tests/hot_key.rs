//! HotKeyCache on a real axum server, driven over TCP by a real HTTP client.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use bloom_tower::key::{self, PathParam};
use bloom_tower::{BloomFilter, BloomGuard, HotKeyCache, SharedFilter};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Empty<bytes::Bytes>>;

struct App {
    addr: SocketAddr,
    handler_runs: Arc<AtomicUsize>,
    release: Arc<tokio::sync::Notify>,
    cache: HotKeyCache<PathParam>,
}

/// `/users/{id}`: ids below 100 exist (the guard's filter holds 0..1000, so 100..1000 reach
/// the handler and get 404); `/nostore/{id}` answers with `no-store`. The handler holds each
/// `/users` response until `release` is notified, so concurrent requests really overlap.
async fn start() -> App {
    let handler_runs = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(tokio::sync::Notify::new());
    let cache = HotKeyCache::builder(key::path_param("id"))
        .negative_ttl(Duration::from_secs(60))
        .build();
    let filter = SharedFilter::new(
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
        let (runs, release) = (handler_runs.clone(), release.clone());
        move |Path(id): Path<u64>| async move {
            runs.fetch_add(1, Ordering::SeqCst);
            release.notified().await;
            if id < 100 {
                (StatusCode::OK, format!("user {id}")).into_response()
            } else {
                StatusCode::NOT_FOUND.into_response()
            }
        }
    };
    let nostore = {
        let runs = handler_runs.clone();
        move |Path(id): Path<u64>| async move {
            runs.fetch_add(1, Ordering::SeqCst);
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
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    App {
        addr,
        handler_runs,
        release,
        cache,
    }
}

async fn get_text(client: &HttpClient, addr: SocketAddr, path: &str) -> (StatusCode, String) {
    let response = client
        .get(format!("http://{addr}{path}").parse().unwrap())
        .await
        .unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(1_000)
        .build_http()
}

async fn eventually(mut cond: impl FnMut() -> bool) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("condition never became true");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_requests_for_one_cold_id_run_the_handler_once() {
    let app = start().await;
    let client = client();
    let requests: Vec<_> = (0..1_000)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { get_text(&client, app.addr, "/users/42").await })
        })
        .collect();
    eventually(|| app.cache.stats().coalesced_waiters == 999).await;
    app.release.notify_one();
    for r in requests {
        assert_eq!(r.await.unwrap(), (StatusCode::OK, "user 42".to_owned()));
    }
    assert_eq!(app.handler_runs.load(Ordering::SeqCst), 1);
    // Now hot: served from the cache without the handler.
    assert_eq!(
        get_text(&client, app.addr, "/users/42").await.0,
        StatusCode::OK
    );
    assert_eq!(app.handler_runs.load(Ordering::SeqCst), 1);
    assert_eq!(app.cache.stats().hits, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_found_is_negative_cached_and_no_store_never_is() {
    let app = start().await;
    let client = client();
    let first = tokio::spawn({
        let client = client.clone();
        async move { get_text(&client, app.addr, "/users/500").await.0 }
    });
    eventually(|| app.handler_runs.load(Ordering::SeqCst) == 1).await;
    app.release.notify_one();
    assert_eq!(first.await.unwrap(), StatusCode::NOT_FOUND);
    assert_eq!(
        get_text(&client, app.addr, "/users/500").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        app.handler_runs.load(Ordering::SeqCst),
        1,
        "the second 404 came from the cache"
    );
    assert_eq!(app.cache.stats().negative_hits, 1);

    for _ in 0..3 {
        assert_eq!(
            get_text(&client, app.addr, "/nostore/7").await,
            (StatusCode::OK, "secret 7".to_owned())
        );
    }
    assert_eq!(
        app.handler_runs.load(Ordering::SeqCst),
        4,
        "no-store responses reached the handler every time"
    );

    // An id the guard's filter does not hold never reaches the cache or the handler.
    let loads = app.cache.stats().loads;
    assert_eq!(
        get_text(&client, app.addr, "/users/123456789").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(app.cache.stats().loads, loads);
    assert_eq!(app.handler_runs.load(Ordering::SeqCst), 4);
}
