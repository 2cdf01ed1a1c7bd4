//! Rejections that wait for a confirmation (`Rejection::Confirm`, what bloom-redis installs):
//! the guard and `GuardedCache` hold the answer until the confirmation resolves, look at the
//! filter (or the cache) again, and only then answer "absent"; a confirmation that fails lets
//! the key through. `contains`, which cannot wait, lets it through.
#![cfg(feature = "guarded-cache")]

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bloom_tower::shared_filter::{Confirmation, Rejection};
use bloom_tower::{BloomFilter, BloomGuard, GuardedCache, SharedFilter, key};
use http::{Request, Response, StatusCode};
use tokio::sync::oneshot;
use tower::{Layer, ServiceExt, service_fn};

/// The answers the would-be rejections wait for, newest last.
type Pending = Arc<Mutex<Vec<oneshot::Sender<bool>>>>;

/// A filter whose would-be rejections wait for a confirmation the test gives: each one takes
/// the next sender's answer (`true`: the local answer stands).
fn confirmed_filter() -> (SharedFilter<u64>, Pending) {
    let filter = SharedFilter::<u64>::new(BloomFilter::new(10_000, 0.001).unwrap());
    let senders: Pending = Arc::default();
    let pending = Arc::clone(&senders);
    filter.set_rejection_override(Some(Arc::new(move || {
        let (tx, rx) = oneshot::channel();
        pending.lock().unwrap().push(tx);
        Rejection::Confirm(Confirmation::new(async move { rx.await.unwrap_or(false) }))
    })));
    (filter, senders)
}

/// Answers the confirmation the newest would-be rejection waits for.
async fn confirm(senders: &Mutex<Vec<oneshot::Sender<bool>>>, stands: bool) {
    let sender = loop {
        if let Some(sender) = senders.lock().unwrap().pop() {
            break sender;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let _ = sender.send(stands);
}

/// An id the filter does not hold.
fn absent(filter: &SharedFilter<u64>, from: u64) -> u64 {
    (from..).find(|id| !filter.current().contains(id)).unwrap()
}

#[tokio::test]
async fn the_guard_answers_a_waiting_rejection_only_once_confirmed_and_looked_at_again() {
    let (filter, senders) = confirmed_filter();
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let service = BloomGuard::new(filter.clone(), key::path_segment(1).parse::<u64>()).layer(
        service_fn(move |_req: Request<String>| {
            counted.fetch_add(1, SeqCst);
            async { Ok::<_, Infallible>(Response::new(String::from("a user"))) }
        }),
    );
    let get = |id: u64| {
        let service = service.clone();
        tokio::spawn(async move {
            let req = Request::get(format!("/users/{id}"))
                .body(String::new())
                .unwrap();
            service.oneshot(req).await.unwrap().status()
        })
    };
    assert!(
        filter.contains(&absent(&filter, 0)),
        "contains cannot wait: lets through"
    );
    // `contains` dropped the confirmation it was given: nobody waits for that answer.
    senders.lock().unwrap().clear();

    // Confirmed, still absent: the guard's 404, the service not called.
    let id = absent(&filter, 1_000);
    let answer = get(id);
    confirm(&senders, true).await;
    assert_eq!(answer.await.unwrap(), StatusCode::NOT_FOUND);
    assert_eq!(calls.load(SeqCst), 0);

    // The key arrived while the confirmation was on its way: found at the second look.
    let id = absent(&filter, 2_000);
    let answer = get(id);
    while senders.lock().unwrap().is_empty() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    filter.insert(&id);
    confirm(&senders, true).await;
    assert_eq!(answer.await.unwrap(), StatusCode::OK);
    assert_eq!(calls.load(SeqCst), 1);

    // Not confirmed: let through.
    let id = absent(&filter, 3_000);
    let answer = get(id);
    confirm(&senders, false).await;
    assert_eq!(answer.await.unwrap(), StatusCode::OK);
    assert_eq!(calls.load(SeqCst), 2);
}

#[tokio::test]
async fn a_negative_entry_answers_only_once_confirmed_and_still_fresh() {
    let (filter, senders) = confirmed_filter();
    let cache = GuardedCache::<u64, String>::builder(filter.clone())
        .negative_ttl(Duration::from_secs(60))
        .build();
    let loads = Arc::new(AtomicUsize::new(0));
    let load = |answer: Option<&'static str>| {
        let loads = Arc::clone(&loads);
        move |_id: u64| {
            loads.fetch_add(1, SeqCst);
            std::future::ready(Ok::<_, Infallible>(answer.map(str::to_owned)))
        }
    };
    // A false positive of the filter: the loader finds nothing, "not found" is cached.
    let id = absent(&filter, 0);
    filter.insert(&id);
    assert_eq!(cache.get_or_load(&id, load(None)).await.unwrap(), None);
    assert_eq!(loads.load(SeqCst), 1);

    // The negative entry waits for its confirmation: confirmed, it answers.
    let lookup = {
        let (cache, load) = (cache.clone(), load(None));
        tokio::spawn(async move { cache.get_or_load(&id, load).await.unwrap() })
    };
    confirm(&senders, true).await;
    assert_eq!(lookup.await.unwrap(), None);
    assert_eq!(loads.load(SeqCst), 1, "answered from the negative entry");

    // Not confirmed: a miss, the loader runs (and finds the user created elsewhere).
    let lookup = {
        let (cache, load) = (cache.clone(), load(Some("created elsewhere")));
        tokio::spawn(async move { cache.get_or_load(&id, load).await.unwrap() })
    };
    confirm(&senders, false).await;
    assert_eq!(lookup.await.unwrap().as_deref(), Some("created elsewhere"));
    assert_eq!(loads.load(SeqCst), 2);

    // A create elsewhere made the entry stale while the confirmation was on its way: the
    // second look finds it stale, and the loader runs.
    let other = absent(&filter, 10_000);
    filter.insert(&other);
    assert_eq!(cache.get_or_load(&other, load(None)).await.unwrap(), None);
    let lookup = {
        let (cache, load) = (cache.clone(), load(Some("created elsewhere")));
        tokio::spawn(async move { cache.get_or_load(&other, load).await.unwrap() })
    };
    while senders.lock().unwrap().is_empty() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    filter.forget_remote(filter.key_digest(&other));
    confirm(&senders, true).await;
    assert_eq!(lookup.await.unwrap().as_deref(), Some("created elsewhere"));
}
