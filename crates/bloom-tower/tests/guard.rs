//! `BloomGuardService` against tower-test's mock service: which requests reach the inner
//! service, what the guard answers instead, and that readiness is the inner service's.

use std::task::Poll;

use bloom_tower::reject::{OnReject, RejectedKey};
use bloom_tower::{BloomFilter, BloomGuard, SharedFilter, key};
use http::{Request, Response, StatusCode, header};
use tower_test::mock;

type Mock = mock::Mock<Request<String>, Response<String>>;
type Handle = mock::Handle<Request<String>, Response<String>>;

/// The guard over a mock HTTP service.
fn spawn<L: tower::Layer<Mock>>(guard: L) -> (mock::Spawn<L::Service>, Handle) {
    mock::spawn_layer(guard)
}

/// An empty filter of `K` keys with a fixed hash key.
fn seeded<K: ?Sized>() -> SharedFilter<K> {
    let filter = BloomFilter::builder()
        .expected_items(1_000)
        .false_positive_rate(0.01)
        .seed(0xB100_u128)
        .build()
        .unwrap();
    SharedFilter::new(filter)
}

/// A filter of text keys with a fixed hash key holding `keys`.
fn filter_with(keys: &[&str]) -> SharedFilter<String> {
    let filter = seeded();
    for key in keys {
        filter.insert(*key);
    }
    filter
}

/// An id the filter answers "definitely absent" for (a given id could be a false positive).
fn absent_id(filter: &SharedFilter<String>) -> String {
    (1_000u64..)
        .map(|id| id.to_string())
        .find(|id| !filter.contains(id.as_str()))
        .unwrap()
}

fn get(uri: &str) -> Request<String> {
    Request::get(uri).body(String::new()).unwrap()
}

fn ready<T>(poll: Poll<Result<(), T>>) -> bool {
    matches!(poll, Poll::Ready(Ok(())))
}

#[tokio::test]
async fn a_key_that_may_be_present_reaches_the_inner_service() {
    let guard = BloomGuard::new(filter_with(&["42"]), key::path_segment(1));
    let (mut service, mut handle) = spawn(guard.clone());
    handle.allow(1);
    assert!(ready(service.poll_ready()));

    let response = service.call(get("/users/42"));
    let (request, send) = handle.next_request().await.unwrap();
    assert_eq!(request.uri(), "/users/42");
    send.send_response(Response::new("user 42".to_owned()));

    let response = response.await.unwrap();
    assert_eq!(
        (response.status(), response.body().as_str()),
        (StatusCode::OK, "user 42")
    );
    let stats = guard.stats();
    assert_eq!((stats.checked, stats.passed, stats.rejected), (1, 1, 0));
}

#[tokio::test]
async fn an_absent_key_is_answered_404_without_calling_the_inner_service() {
    let filter = filter_with(&["42"]);
    let guard = BloomGuard::new(filter.clone(), key::path_segment(1));
    let (mut service, mut handle) = spawn(guard.clone());
    handle.allow(1);
    assert!(ready(service.poll_ready()));

    let response = service
        .call(get(&format!("/users/{}", absent_id(&filter))))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert_eq!(response.body(), "Not Found");
    assert!(
        handle.poll_request().is_pending(),
        "the inner service was called"
    );
    let stats = guard.stats();
    assert_eq!((stats.checked, stats.passed, stats.rejected), (1, 0, 1));
}

#[tokio::test]
async fn a_request_without_a_key_passes_through_by_default() {
    let guard = BloomGuard::new(filter_with(&[]), key::query("id"));
    let (mut service, mut handle) = spawn(guard.clone());
    handle.allow(1);
    assert!(ready(service.poll_ready()));

    let response = service.call(get("/items"));
    let (_, send) = handle.next_request().await.unwrap();
    send.send_response(Response::new("inner".to_owned()));
    assert_eq!(response.await.unwrap().body(), "inner");
    assert_eq!(guard.stats().missing_key, 1);
    assert_eq!(guard.stats().checked, 0);
}

#[tokio::test]
async fn a_request_without_a_key_can_be_answered_with_a_status() {
    let filter = seeded::<u64>();
    filter.insert(&7u64);
    let guard = BloomGuard::new(filter, key::path_segment(1).parse::<u64>())
        .on_missing_key(StatusCode::BAD_REQUEST);
    let (mut service, mut handle) = spawn(guard.clone());
    handle.allow(1);

    for uri in ["/users/not-a-number", "/users/", "/users"] {
        assert!(ready(service.poll_ready()));
        let response = service.call(get(uri)).await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{uri}");
        assert_eq!(response.body(), "Bad Request");
    }
    assert!(
        handle.poll_request().is_pending(),
        "the inner service was called"
    );
    assert_eq!(guard.stats().missing_key, 3);
}

#[tokio::test]
async fn the_missing_key_policy_can_be_a_closure_that_decides_per_request() {
    // Only GETs need a key; anything else goes through.
    let policy = |req: &Request<String>| {
        (req.method() == http::Method::GET).then(|| {
            let mut response = Response::new("id required".to_owned());
            *response.status_mut() = StatusCode::UNPROCESSABLE_ENTITY;
            response
        })
    };
    let guard = BloomGuard::new(filter_with(&[]), key::query("id")).on_missing_key(policy);
    let (mut service, mut handle) = spawn(guard);
    handle.allow(2);

    assert!(ready(service.poll_ready()));
    let response = service.call(get("/items")).await.unwrap();
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);

    assert!(ready(service.poll_ready()));
    let post = Request::post("/items").body(String::new()).unwrap();
    let response = service.call(post);
    let (request, send) = handle.next_request().await.unwrap();
    assert_eq!(request.method(), http::Method::POST);
    send.send_response(Response::new(String::new()));
    assert_eq!(response.await.unwrap().status(), StatusCode::OK);
}

#[tokio::test]
async fn poll_ready_is_the_inner_services_readiness() {
    let guard = BloomGuard::new(filter_with(&["1"]), key::path_segment(0));
    let (mut service, mut handle) = spawn(guard);

    handle.allow(0);
    assert!(
        service.poll_ready().is_pending(),
        "inner not ready, guard ready"
    );
    handle.allow(1);
    assert!(
        service.is_woken(),
        "the inner service's wake-up did not reach the caller"
    );
    assert!(ready(service.poll_ready()));

    handle.send_error("inner failed");
    match service.poll_ready() {
        Poll::Ready(Err(error)) => assert_eq!(error.to_string(), "inner failed"),
        other => panic!("the inner service's error was not passed on: {other:?}"),
    }
}

#[tokio::test]
async fn a_rejection_leaves_the_inner_services_reserved_capacity_for_the_next_call() {
    let filter = filter_with(&["1"]);
    let absent = absent_id(&filter);
    let guard = BloomGuard::new(filter, key::path_segment(0));
    let (mut service, mut handle) = spawn(guard);
    // One call's worth of capacity: the mock panics on a call it did not make ready.
    handle.allow(1);

    assert!(ready(service.poll_ready()));
    let rejected = service.call(get(&format!("/{absent}"))).await.unwrap();
    assert_eq!(rejected.status(), StatusCode::NOT_FOUND);

    assert!(
        ready(service.poll_ready()),
        "the rejection used the inner capacity up"
    );
    let passed = service.call(get("/1"));
    let (_, send) = handle.next_request().await.unwrap();
    send.send_response(Response::new("ok".to_owned()));
    assert_eq!(passed.await.unwrap().body(), "ok");
}

#[tokio::test]
async fn on_reject_builds_a_custom_response_from_the_key() {
    let filter = filter_with(&[]);
    let guard = BloomGuard::new(filter.clone(), key::path_segment(1)).on_reject(|key| {
        let mut response = Response::new(format!("no user {}", key.to_str().unwrap()));
        *response.status_mut() = StatusCode::GONE;
        response
    });
    let (mut service, mut handle) = spawn(guard);
    handle.allow(1);
    assert!(ready(service.poll_ready()));

    let id = absent_id(&filter);
    let response = service.call(get(&format!("/users/{id}"))).await.unwrap();
    assert_eq!(response.status(), StatusCode::GONE);
    assert_eq!(response.body(), &format!("no user {id}"));
    assert!(handle.poll_request().is_pending());
}

/// A rejection that looks at the request: JSON for clients that ask for it.
#[derive(Clone)]
struct Negotiated;

impl OnReject<Request<String>, Response<String>> for Negotiated {
    fn on_reject(&mut self, req: &Request<String>, _key: RejectedKey<'_>) -> Response<String> {
        let json = req
            .headers()
            .get(header::ACCEPT)
            .is_some_and(|accept| accept == "application/json");
        let body = if json {
            r#"{"error":"not found"}"#
        } else {
            "not found"
        };
        let mut response = Response::new(body.to_owned());
        *response.status_mut() = StatusCode::NOT_FOUND;
        response
    }
}

#[tokio::test]
async fn reject_with_takes_any_rejection_type_including_a_status_code() {
    let filter = filter_with(&[]);
    let uri = format!("/{}", absent_id(&filter));

    let guard = BloomGuard::new(filter.clone(), key::path_segment(0)).reject_with(Negotiated);
    let (mut service, _handle) = spawn(guard);
    let json = Request::get(&uri)
        .header(header::ACCEPT, "application/json")
        .body(String::new())
        .unwrap();
    assert_eq!(
        service.call(json).await.unwrap().body(),
        r#"{"error":"not found"}"#
    );
    assert_eq!(service.call(get(&uri)).await.unwrap().body(), "not found");

    let guard = BloomGuard::new(filter, key::path_segment(0)).reject_with(StatusCode::GONE);
    let (mut service, _handle) = spawn(guard);
    let response = service.call(get(&uri)).await.unwrap();
    assert_eq!(
        (response.status(), response.body().as_str()),
        (StatusCode::GONE, "Gone")
    );
}

#[tokio::test]
async fn a_non_http_service_gets_the_rejection_value() {
    // The request is a user id; the response says whether the user exists.
    let filter = SharedFilter::<u64>::new(BloomFilter::new(1_000, 0.01).unwrap());
    filter.insert(&5u64);
    let absent = (6u64..).find(|id| !filter.contains(id)).unwrap();
    let guard = BloomGuard::new(filter, key::identity()).on_reject(|_key| None);
    let (mut service, mut handle) = mock::spawn_layer::<u64, Option<&'static str>, _>(guard);
    handle.allow(1);

    assert!(ready(service.poll_ready()));
    assert_eq!(service.call(absent).await.unwrap(), None);
    assert!(handle.poll_request().is_pending());

    assert!(ready(service.poll_ready()));
    let found = service.call(5);
    let (request, send) = handle.next_request().await.unwrap();
    assert_eq!(request, 5);
    send.send_response(Some("user 5"));
    assert_eq!(found.await.unwrap(), Some("user 5"));
}

#[tokio::test]
async fn a_closure_extractor_works_for_any_request() {
    let filter = filter_with(&["ACME"]);
    let tenant = |req: &Request<String>| {
        Some(
            req.headers()
                .get("x-tenant")?
                .to_str()
                .ok()?
                .to_ascii_uppercase(),
        )
    };
    let guard = BloomGuard::new(filter, tenant);
    let (mut service, mut handle) = spawn(guard);
    handle.allow(1);
    assert!(ready(service.poll_ready()));
    let req = Request::get("/")
        .header("x-tenant", "acme")
        .body(String::new())
        .unwrap();
    let response = service.call(req);
    let (_, send) = handle.next_request().await.unwrap();
    send.send_response(Response::new(String::new()));
    assert_eq!(response.await.unwrap().status(), StatusCode::OK);
}

#[test]
fn layers_and_services_are_clone_and_debug_with_closures_inside() {
    fn clone_debug<T: Clone + std::fmt::Debug>(_: &T) {}
    // Closures are neither `Debug` nor needed to be: only `Clone` is asked of them.
    let guard = BloomGuard::new(filter_with(&[]), |req: &Request<String>| {
        Some(req.uri().path().to_owned())
    })
    .on_reject(|_key: RejectedKey<'_>| Response::new(String::new()))
    .on_missing_key(|_req: &Request<String>| None::<Response<String>>)
    .name("users");
    clone_debug(&guard);
    let debug = format!("{guard:?}");
    assert!(debug.contains("users"), "{debug}");
    let service = tower::Layer::layer(
        &guard,
        tower::service_fn(|_: Request<String>| async {
            Ok::<_, std::convert::Infallible>(Response::new(String::new()))
        }),
    );
    clone_debug(&service);
    assert!(format!("{service:?}").contains("BloomGuardService"));
}

/// The one subscriber of this test binary, installed as the global default the first time
/// [`captured`] runs. It is interested in every callsite at every level, so no cached
/// interest, whichever thread computed it, can turn an event away: a scoped subscriber
/// (`with_default`) was, whenever a thread of another test with no subscriber rebuilt the
/// cache at the wrong moment. It keeps the fields of events emitted on a thread that is
/// inside [`captured`], as `name=value` strings, and drops the others.
struct Capture;

thread_local! {
    static CAPTURED: std::cell::RefCell<Option<Vec<Vec<String>>>> =
        const { std::cell::RefCell::new(None) };
}

impl tracing::Subscriber for Capture {
    fn register_callsite(
        &self,
        _: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::always()
    }
    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Fields(Vec<String>);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push(format!("{}={value:?}", field.name()));
            }
        }
        let _ = CAPTURED.try_with(|captured| {
            if let Some(events) = captured.borrow_mut().as_mut() {
                let mut fields = Fields(Vec::new());
                event.record(&mut fields);
                events.push(fields.0);
            }
        });
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// The events `f` emits on this thread.
fn captured(f: impl FnOnce()) -> Vec<Vec<String>> {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        tracing::subscriber::set_global_default(Capture).expect("no other global subscriber")
    });
    CAPTURED.with(|captured| *captured.borrow_mut() = Some(Vec::new()));
    f();
    CAPTURED.with(|captured| captured.borrow_mut().take().unwrap())
}

#[test]
fn each_rejection_logs_a_debug_event_without_the_key_unless_asked() {
    // Not empty: a guard over an empty filter also warns that it rejects everyone.
    let filter = filter_with(&["42"]);
    let id = absent_id(&filter);
    let uri = format!("/users/{id}");
    let events = |guard: BloomGuard<String, key::PathSegment>| {
        let (mut service, _handle) = spawn(guard);
        captured(|| drop(service.call(get(&uri))))
    };

    let quiet = events(BloomGuard::new(filter.clone(), key::path_segment(1)).name("users"));
    assert_eq!(quiet.len(), 1, "{quiet:?}");
    assert!(quiet[0].contains(&"guard=users".to_owned()), "{quiet:?}");
    assert!(
        !quiet[0].iter().any(|field| field.contains(&id)),
        "the key was logged: {quiet:?}"
    );

    let verbose = events(BloomGuard::new(filter, key::path_segment(1)).log_rejected_keys(true));
    assert!(verbose[0].contains(&format!("key={id}")), "{verbose:?}");
}
