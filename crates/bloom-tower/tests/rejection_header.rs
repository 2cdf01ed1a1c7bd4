//! `BloomGuard::rejection_header` over a real TCP port and a real hyper client: the header
//! is on the guard's own rejections when enabled, and on nothing else (the handler's answers,
//! its own 404s, missing-key answers, a guard without it).
#![cfg(feature = "axum")]

use std::net::SocketAddr;

use axum::Router;
use axum::body::Bytes;
use axum::extract::Path;
use axum::response::IntoResponse;
use axum::routing::get;
use bloom_tower::reject::REJECTION_HEADER;
use bloom_tower::{BloomFilter, BloomGuard, SharedFilter, key};
use http::header::HeaderName;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Ids 1..=10 exist; 11 is in the filter but not in the "database" (a false positive, or a
/// user deleted since the last rebuild): the handler's own 404.
async fn user(Path(id): Path<u64>) -> (StatusCode, String) {
    if (1..=10).contains(&id) {
        (StatusCode::OK, format!("user {id}"))
    } else {
        (StatusCode::NOT_FOUND, "no such user (handler)".into())
    }
}

struct Server {
    addr: SocketAddr,
    client: Client<HttpConnector, Empty<Bytes>>,
    filter: SharedFilter<u64>,
}

impl Server {
    /// `/marked/users/{id}` with the header (and `400` for a bad id), `/plain/users/{id}`
    /// without.
    async fn start() -> Self {
        let filter = SharedFilter::new(
            BloomFilter::builder()
                .expected_items(1_000)
                .false_positive_rate(0.01)
                .seed(0x4EAD_u128)
                .build()
                .unwrap(),
        );
        filter
            .reload_from(&(1..=11u64).collect::<Vec<_>>())
            .await
            .unwrap();
        let ids = || key::path_param("id").parse::<u64>();
        let app = Router::new()
            .route("/marked/users/{id}", get(user))
            .route_layer(
                BloomGuard::new(filter.clone(), ids())
                    .on_missing_key(StatusCode::BAD_REQUEST)
                    .rejection_header(REJECTION_HEADER),
            )
            .merge(
                Router::new()
                    .route("/plain/users/{id}", get(user))
                    .route_layer(BloomGuard::new(filter.clone(), ids())),
            )
            .merge(
                Router::new()
                    .route("/custom/users/{id}", get(user))
                    .route_layer(
                        BloomGuard::new(filter.clone(), ids())
                            .on_reject(|_key| (StatusCode::GONE, "gone").into_response())
                            .rejection_header(HeaderName::from_static("x-answered-by")),
                    ),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let client = Client::builder(TokioExecutor::new()).build_http();
        Server {
            addr,
            client,
            filter,
        }
    }

    async fn get(&self, path: &str) -> (StatusCode, HeaderMap, String) {
        let request = Request::get(format!("http://{}{path}", self.addr))
            .body(Empty::new())
            .unwrap();
        let response = self.client.request(request).await.unwrap();
        let (parts, body) = response.into_parts();
        let body = body.collect().await.unwrap().to_bytes();
        (
            parts.status,
            parts.headers,
            String::from_utf8(body.to_vec()).unwrap(),
        )
    }

    fn absent(&self) -> u64 {
        (1_000u64..).find(|id| !self.filter.contains(id)).unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_header_marks_the_guards_rejections_only() {
    let server = Server::start().await;
    let absent = server.absent();

    // The guard's rejection: marked.
    let (status, headers, body) = server.get(&format!("/marked/users/{absent}")).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::NOT_FOUND, "Not Found")
    );
    assert_eq!(headers["x-bloom-guard"], "rejected");
    assert_eq!(headers.get_all("x-bloom-guard").iter().count(), 1);

    // Passed through to the handler: never marked, whatever it answers.
    let (status, headers, _) = server.get("/marked/users/7").await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers.get("x-bloom-guard").is_none());
    let (status, headers, body) = server.get("/marked/users/11").await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::NOT_FOUND, "no such user (handler)")
    );
    assert!(
        headers.get("x-bloom-guard").is_none(),
        "the handler's 404 is not the guard's"
    );

    // The guard's missing-key answer is not a rejection of an absent key.
    let (status, headers, _) = server.get("/marked/users/abc").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(headers.get("x-bloom-guard").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_by_default() {
    let server = Server::start().await;
    let (status, headers, _) = server
        .get(&format!("/plain/users/{}", server.absent()))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(headers.get("x-bloom-guard").is_none());
    let (status, headers, _) = server.get("/plain/users/7").await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers.get("x-bloom-guard").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_name_on_a_custom_rejection() {
    let server = Server::start().await;
    let (status, headers, body) = server
        .get(&format!("/custom/users/{}", server.absent()))
        .await;
    assert_eq!((status, body.as_str()), (StatusCode::GONE, "gone"));
    assert_eq!(headers["x-answered-by"], "rejected");
    assert!(headers.get("x-bloom-guard").is_none());
    let (status, headers, _) = server.get("/custom/users/7").await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers.get("x-answered-by").is_none());
}
