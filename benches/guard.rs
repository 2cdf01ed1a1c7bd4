//! What `BloomGuard` costs per request, in-process (no sockets), on a Tokio current-thread
//! runtime.
//!
//! * `guard_service/{bare,pass,reject}`: a `tower::service_fn` answering a small response,
//!   called with `ServiceExt::ready().call()`; `bare` without the layer, `pass` guarded with a
//!   key in the filter, `reject` guarded with a key the filter has never seen (the guard's
//!   404). `pass - bare` is what the guard adds to a request that goes through (target
//!   < 100 ns).
//! * `guard_axum/{bare_404,route_layer_404,guard_reject,bare_pass,guard_pass}`: an axum
//!   `Router` driven with `oneshot`: `bare_404` is the bare router's own 404 for an unknown
//!   route, `guard_reject` the guard rejecting `/users/{id}` under `route_layer` (target:
//!   ≤ 1.05 × `bare_404`), and `route_layer_404` a do-nothing middleware under `route_layer`
//!   that answers 404 at once, i.e. what axum itself charges for reaching any route layer
//!   (matching, `MatchedPath`, path parameters, cloning the boxed route per request); `bare_pass` / `guard_pass` a matched route
//!   with and without the guard; `guard_in_front_{reject,pass}` the guard wrapped around the
//!   whole router (`key::path_segment`), which rejects before any routing;
//!   `guard_route_{reject,pass}` the same placement naming its route with
//!   `key::route("/users/{id}", "id")` (target for the rejection: ≤ 1.1 × `bare_404`), and
//!   `guard_route_other_route` vs `bare_other_route` what that guard adds to a request for
//!   another route (`/health`) of the same router.
//!
//! The filter holds 1M `u64` ids at p = 1% (about 1.2 MB, in cache) with a fixed hash key.
//! Requests cycle through 1024 prebuilt URIs (present ids for `pass`, ids the filter answers
//! "absent" for `reject`), so successive lookups touch different cache lines; building the
//! request (a `Uri` clone) is inside the timing for every variant alike.
//!
//! Run:
//! ```text
//! CARGO_TARGET_DIR=… cargo bench -p bloom-benches --bench guard
//! cargo bench -p bloom-benches --bench guard -- --quick     # a fast, noisier pass
//! ```
//! Results: `$CARGO_TARGET_DIR/criterion/guard_*/<function>/new/estimates.json`.

use std::convert::Infallible;
use std::hint::black_box;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use bloom_tower::{BloomFilter, BloomGuard, SharedFilter, key};
use criterion::{Criterion, criterion_group, criterion_main};
use http::{Request, Response, Uri};
use tower::{Layer, Service, ServiceExt, service_fn};

const MEMBERS: u64 = 1_000_000;
const URIS: usize = 1024;

fn filter() -> SharedFilter<u64> {
    let filter = BloomFilter::builder()
        .expected_items(MEMBERS)
        .false_positive_rate(0.01)
        .seed(0xBE7C_u128)
        .build()
        .unwrap();
    filter.insert_many(0..MEMBERS);
    SharedFilter::<u64>::new(filter)
}

/// `/users/{id}` for ids spread over the members, and for ids the filter rejects.
fn uris(filter: &SharedFilter<u64>) -> (Vec<Uri>, Vec<Uri>) {
    let uri = |id: u64| format!("/users/{id}").parse::<Uri>().unwrap();
    let step = MEMBERS / URIS as u64;
    let present = (0..URIS as u64).map(|i| uri(i * step + 7)).collect();
    let absent = (MEMBERS..)
        .filter(|id| !filter.contains(id))
        .take(URIS)
        .map(uri)
        .collect();
    (present, absent)
}

fn request<B: Default>(uri: &Uri) -> Request<B> {
    let mut request = Request::new(B::default());
    *request.uri_mut() = uri.clone();
    request
}

/// Times `iters` requests through `service`, cycling through `uris`.
async fn drive<S>(mut service: S, uris: &[Uri], iters: u64) -> Duration
where
    S: Service<Request<()>, Response = Response<&'static str>, Error = Infallible>,
{
    let start = Instant::now();
    for (_, uri) in (0..iters).zip(uris.iter().cycle()) {
        let response = service.ready().await.unwrap().call(request(uri)).await;
        black_box(response.unwrap());
    }
    start.elapsed()
}

fn service_paths(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let filter = filter();
    let (present, absent) = uris(&filter);
    let bare =
        service_fn(|_req: Request<()>| async { Ok::<_, Infallible>(Response::new("a user")) });
    let guard = BloomGuard::new(filter, key::path_segment(1).parse::<u64>());
    let guarded = guard.layer(bare);

    let mut group = c.benchmark_group("guard_service");
    group.bench_function("bare", |b| {
        b.to_async(&runtime)
            .iter_custom(|iters| drive(bare, &present, iters));
    });
    group.bench_function("pass", |b| {
        b.to_async(&runtime)
            .iter_custom(|iters| drive(guarded.clone(), &present, iters));
    });
    group.bench_function("reject", |b| {
        b.to_async(&runtime)
            .iter_custom(|iters| drive(guarded.clone(), &absent, iters));
    });
    group.finish();
}

/// A middleware that answers every request 404 itself, never calling `S`.
#[derive(Clone)]
struct Answer404<S>(S);

impl<S: Service<Request<Body>>> Service<Request<Body>> for Answer404<S> {
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = std::future::Ready<Result<Response<Body>, S::Error>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, _req: Request<Body>) -> Self::Future {
        let mut response = Response::new(Body::from("Not Found"));
        *response.status_mut() = http::StatusCode::NOT_FOUND;
        std::future::ready(Ok(response))
    }
}

/// Times `iters` requests through `router` (a `Router`, or a service wrapping one) with
/// `oneshot`, cycling through `uris`.
async fn drive_router<S>(router: S, uris: &[Uri], iters: u64, expect: u16) -> Duration
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone,
{
    let start = Instant::now();
    for (_, uri) in (0..iters).zip(uris.iter().cycle()) {
        let response = router.clone().oneshot(request::<Body>(uri)).await.unwrap();
        debug_assert_eq!(response.status(), expect);
        black_box(response);
    }
    start.elapsed()
}

fn axum_paths(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let filter = filter();
    let (present, absent) = uris(&filter);
    let unknown: Vec<Uri> = (0..URIS)
        .map(|i| format!("/nope/{i}").parse().unwrap())
        .collect();
    let bare = Router::new().route("/users/{id}", get(|| async { "a user" }));
    let guarded = bare.clone().route_layer(BloomGuard::new(
        filter.clone(),
        key::path_param("id").parse::<u64>(),
    ));
    // The guard wrapped around the whole router: it answers before any routing.
    let in_front =
        BloomGuard::new(filter.clone(), key::path_segment(1).parse::<u64>()).layer(bare.clone());
    // The same placement, naming its route: `key::route` matches the template itself.
    let with_health = bare.clone().route("/health", get(|| async { "ok" }));
    let ids = key::route("/users/{id}", "id").unwrap().parse::<u64>();
    let around = BloomGuard::new(filter, ids).layer(with_health.clone());
    let health: Vec<Uri> = vec!["/health".parse().unwrap(); URIS];

    // What any middleware that answers early costs under `route_layer`: it holds the inner
    // route (which axum clones per request) and answers 404 without calling it. The gap to
    // `bare_404` is axum's, not the guard's.
    let rejecting = bare.clone().route_layer(tower::layer::layer_fn(Answer404));

    let mut group = c.benchmark_group("guard_axum");
    let mut bench = |name: &str, router: &Router, uris: &[Uri], expect: u16| {
        group.bench_function(name, |b| {
            b.to_async(&runtime)
                .iter_custom(|iters| drive_router(router.clone(), uris, iters, expect));
        });
    };
    bench("bare_404", &bare, &unknown, 404);
    bench("route_layer_404", &rejecting, &absent, 404);
    bench("guard_reject", &guarded, &absent, 404);
    bench("bare_pass", &bare, &present, 200);
    bench("guard_pass", &guarded, &present, 200);
    group.bench_function("guard_in_front_reject", |b| {
        b.to_async(&runtime)
            .iter_custom(|iters| drive_router(in_front.clone(), &absent, iters, 404));
    });
    group.bench_function("guard_in_front_pass", |b| {
        b.to_async(&runtime)
            .iter_custom(|iters| drive_router(in_front.clone(), &present, iters, 200));
    });
    group.bench_function("guard_route_reject", |b| {
        b.to_async(&runtime)
            .iter_custom(|iters| drive_router(around.clone(), &absent, iters, 404));
    });
    group.bench_function("guard_route_pass", |b| {
        b.to_async(&runtime)
            .iter_custom(|iters| drive_router(around.clone(), &present, iters, 200));
    });
    group.bench_function("bare_other_route", |b| {
        b.to_async(&runtime)
            .iter_custom(|iters| drive_router(with_health.clone(), &health, iters, 200));
    });
    group.bench_function("guard_route_other_route", |b| {
        b.to_async(&runtime)
            .iter_custom(|iters| drive_router(around.clone(), &health, iters, 200));
    });
    group.finish();
}

criterion_group! {
    name = guard;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30);
    targets = service_paths, axum_paths
}
criterion_main!(guard);
