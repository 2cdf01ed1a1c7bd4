//! Plain hyper 1.x and tower, no axum: `GET /items/{id}` behind a `BloomGuard` whose key
//! extractor is a closure. Ids the filter has never seen get the guard's `404` and never reach
//! the item table; the rest go to the handler. The connections are hyper's HTTP/1, one task
//! each, served by `bloom_examples::serve`, which also stops them on one Ctrl-C or SIGTERM
//! within a grace period.
//!
//! ```sh
//! cargo run --release --example hyper_service   # then the printed curl commands
//! BIND=127.0.0.1:0 cargo run --release --example hyper_service   # any free port
//! ```
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use bloom_examples::serve;
use bloom_tower::{BloomFilter, BloomGuard, SharedFilter};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use tokio::net::TcpListener;
use tower::{Service, ServiceBuilder, service_fn};

/// The "database": item id → name.
type Items = Arc<HashMap<u64, String>>;

/// Items 3, 6, 9, …, 30,000: every id that is not a multiple of 3 is absent.
fn items() -> Items {
    Arc::new(
        (1..=10_000u64)
            .map(|i| (3 * i, format!("item #{}", 3 * i)))
            .collect(),
    )
}

/// A filter of the item ids (1% false positives, random secret hash key).
fn filter_of(items: &Items) -> Result<SharedFilter<u64>, bloom_tower::bloom_core::BuildError> {
    let filter = SharedFilter::<u64>::new(BloomFilter::new(items.len() as u64, 0.01)?);
    for id in items.keys() {
        filter.insert(id);
    }
    Ok(filter)
}

/// The guarded service: a `ServiceBuilder` with the guard in front of a `service_fn`.
fn app(
    items: Items,
    filter: SharedFilter<u64>,
) -> impl Service<Request<Incoming>, Response = Response<Full<Bytes>>, Error = Infallible, Future: Send>
+ Clone
+ Send
+ 'static {
    // The key is the id in `/items/{id}`, as the u64 that was inserted; other paths have no
    // key and pass through.
    let item_id = |req: &Request<Incoming>| -> Option<u64> {
        req.uri().path().strip_prefix("/items/")?.parse().ok()
    };
    ServiceBuilder::new()
        .layer(BloomGuard::new(filter, item_id))
        .service(service_fn(move |req: Request<Incoming>| {
            let items = Arc::clone(&items);
            async move { Ok::<_, Infallible>(lookup(&items, &req)) }
        }))
}

/// The handler: what the guard spares for absent ids.
fn lookup(items: &Items, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let found = req
        .uri()
        .path()
        .strip_prefix("/items/")
        .and_then(|id| items.get(&id.parse::<u64>().ok()?));
    match found {
        Some(name) => Response::new(Full::from(format!("{name}\n"))),
        // A false positive of the filter, or another path.
        None => {
            let mut response = Response::new(Full::from("no such item (from the handler)\n"));
            *response.status_mut() = StatusCode::NOT_FOUND;
            response
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let bind = std::env::var("BIND").unwrap_or_else(|_| "127.0.0.1:3001".into());
    let listener = TcpListener::bind(&bind).await?;
    let addr = listener.local_addr()?;
    // Installed before it says it listens: a signal from then on stops it gracefully.
    let signal = serve::shutdown_signal()?;
    println!("listening on http://{addr}; items are 3, 6, 9, …, 30000. Try:");
    println!("  curl -i http://{addr}/items/42   # 200 from the handler");
    println!("  curl -i http://{addr}/items/43   # 404 from the guard: the handler never runs");
    let items = items();
    let filter = filter_of(&items)?;
    // One SIGINT or SIGTERM stops it within the grace period (`bloom_examples::serve`).
    let stopped = serve::serve(
        listener,
        app(items, filter),
        async move {
            let stop = signal.await;
            println!("{stop}: stopping");
        },
        serve::GRACE,
    )
    .await?;
    println!(
        "stopped ({} connections open, {} dropped after the grace period)",
        stopped.open, stopped.dropped
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Empty};
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;

    #[tokio::test]
    async fn present_ids_get_the_item_and_absent_ids_get_404_from_the_guard() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let items = items();
        let filter = filter_of(&items).unwrap();
        tokio::spawn(serve::serve(
            listener,
            app(items, filter.clone()),
            std::future::pending(),
            serve::GRACE,
        ));
        let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
        let get = |path: &str| {
            let request = client.get(format!("http://{addr}{path}").parse().unwrap());
            async move {
                let response = request.await.unwrap();
                let status = response.status();
                let body = response.into_body().collect().await.unwrap().to_bytes();
                (status, String::from_utf8(body.to_vec()).unwrap())
            }
        };

        assert_eq!(
            get("/items/42").await,
            (StatusCode::OK, "item #42\n".into())
        );
        assert_eq!(
            get("/items/30000").await,
            (StatusCode::OK, "item #30000\n".into())
        );
        // Absent ids are answered by the guard ("Not Found"), except the filter's false
        // positives, which reach the handler and get its own 404.
        let mut from_guard = 0;
        for id in (1..=3_000u64).filter(|id| id % 3 != 0) {
            let expected = if filter.contains(&id) {
                "no such item (from the handler)\n"
            } else {
                from_guard += 1;
                "Not Found"
            };
            assert_eq!(
                get(&format!("/items/{id}")).await,
                (StatusCode::NOT_FOUND, expected.into()),
                "id {id}"
            );
        }
        assert!(from_guard > 1_000, "{from_guard} of 2000 from the guard");
        // No key (not a number): passes through to the handler.
        assert_eq!(
            get("/items/abc").await,
            (
                StatusCode::NOT_FOUND,
                "no such item (from the handler)\n".into()
            )
        );
    }
}
