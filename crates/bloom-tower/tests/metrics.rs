//! The metrics contract, through the `metrics` facade:
//!
//! * every name in `bloom_tower::stats::names` is described (`# HELP` text and unit) with the
//!   kind and unit its name promises (`_total` counters, `_seconds` histograms, gauges
//!   neither), and the descriptions reach the recorder the first time the crate emits, with
//!   no call from the application;
//! * the measured false-positive rate is right with a `BloomGuard` in front of a
//!   `GuardedCache` (the recommended setup): the guard stops most absent keys before the
//!   cache sees them, so a rate over the cache's own lookups reads 1.0.
//!
//! One recorder for the whole binary, installed globally (descriptions go, once per process,
//! to the recorder installed when the crate first emits), and the tests that read it run one
//! at a time (a snapshot resets what it reads).
#![cfg(feature = "metrics")]

#[path = "support/descriptions.rs"]
mod descriptions;

use std::convert::Infallible;
use std::sync::{Mutex, OnceLock, PoisonError};

use bloom_tower::stats::names;
use bloom_tower::{BloomFilter, BloomGuard, GuardedCache, SharedFilter, key};
use descriptions::{Descriptions, declared_names};
use http::{Request, Response, StatusCode};
use metrics::{SharedString, Unit};
use metrics_util::CompositeKey;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tower::{ServiceExt, service_fn};

/// The binary's recorder, installed on first use.
fn recorder() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::set_global_recorder(recorder).expect("the only recorder of this binary");
        snapshotter
    })
}

/// Held by each test that reads the global recorder.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// What Prometheus's naming conventions (and `promtool check metrics`) ask of a series of
/// `kind` called `name`, with `unit`.
fn check_convention(name: &str, kind: &str, unit: Option<Unit>) {
    assert!(
        name.starts_with("bloom_")
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
        "{name}: a snake_case name with the crate's prefix"
    );
    match kind {
        "counter" => {
            assert!(
                name.ends_with("_total"),
                "counter {name} must end in _total"
            );
            assert_eq!(unit, Some(Unit::Count), "{name}");
        }
        "histogram" => {
            assert!(name.ends_with("_seconds"), "histogram {name}: base unit");
            assert_eq!(unit, Some(Unit::Seconds), "{name}");
        }
        _ => assert!(!name.ends_with("_total"), "gauge {name} ends in _total"),
    }
    for reserved in ["_count", "_sum", "_bucket"] {
        assert!(!name.ends_with(reserved), "{name}: reserved suffix");
    }
    let not_base = [
        "ms",
        "us",
        "ns",
        "sec",
        "secs",
        "kb",
        "mb",
        "milliseconds",
        "microseconds",
        "nanoseconds",
        "minutes",
        "hours",
        "kilobytes",
        "megabytes",
        "percent",
    ];
    for word in name.split('_') {
        assert!(
            !not_base.contains(&word),
            "{name}: {word} is not a base unit"
        );
    }
}

#[test]
fn every_name_is_described_with_its_kind_and_unit() {
    let descriptions = Descriptions::default();
    metrics::with_local_recorder(&descriptions, bloom_tower::stats::describe);
    let described = descriptions.0.into_inner().unwrap();
    let declared = declared_names(include_str!("../src/stats.rs"));
    assert!(declared.len() >= 30, "parsed {} names", declared.len());
    for (constant, name) in &declared {
        let Some((kind, unit, text)) = described.get(name) else {
            panic!("names::{constant} ({name}) has no description")
        };
        assert!(text.len() > 20, "{name}: a real HELP text, not {text:?}");
        check_convention(name, kind, *unit);
    }
    assert_eq!(
        described.len(),
        declared.len(),
        "described names that names does not declare"
    );
}

type Entry = (CompositeKey, Option<Unit>, Option<SharedString>, DebugValue);

/// The value of the series `name{label="value"}`, if it was emitted.
fn value<'a>(entries: &'a [Entry], name: &str, label: &str, value: &str) -> Option<&'a DebugValue> {
    entries
        .iter()
        .find(|(key, ..)| {
            key.key().name() == name
                && key
                    .key()
                    .labels()
                    .any(|l| l.key() == label && l.value() == value)
        })
        .map(|(.., value)| value)
}

fn gauge(entries: &[Entry], name: &str, label: &str, label_value: &str) -> Option<f64> {
    match value(entries, name, label, label_value)? {
        DebugValue::Gauge(value) => Some(value.into_inner()),
        other => panic!("{name} is not a gauge: {other:?}"),
    }
}

/// A 1% filter named `name` holding ids `0..1_000`.
fn users_filter(name: &'static str) -> SharedFilter<u64> {
    let filter = SharedFilter::builder().name(name).build(
        BloomFilter::builder()
            .expected_items(1_000)
            .false_positive_rate(0.01)
            .seed(0x5EED)
            .build()
            .unwrap(),
    );
    for id in 0..1_000u64 {
        filter.insert(&id);
    }
    filter
}

/// `GET /users/{id}` guarded by `filter`, answered through a cache over the same filter
/// whose loader finds the ids below 1,000: the recommended setup.
fn guarded_service(
    filter: &SharedFilter<u64>,
    cache: GuardedCache<u64, u64>,
) -> impl tower::Service<Request<String>, Response = Response<String>, Error = Infallible> + Clone {
    let handler = service_fn(move |request: Request<String>| {
        let cache = cache.clone();
        async move {
            let id: u64 = request.uri().path()[7..].parse().unwrap();
            let found = cache
                .get_or_load(&id, |id| async move {
                    Ok::<_, Infallible>((id < 1_000).then_some(id))
                })
                .await
                .unwrap();
            let status = if found.is_some() {
                StatusCode::OK
            } else {
                StatusCode::NOT_FOUND
            };
            let mut response = Response::new(String::new());
            *response.status_mut() = status;
            Ok::<_, Infallible>(response)
        }
    });
    tower::Layer::layer(
        &BloomGuard::new(filter.clone(), key::path_segment(1).parse::<u64>()),
        handler,
    )
}

async fn get<S>(service: &S, id: u64) -> StatusCode
where
    S: tower::Service<Request<String>, Response = Response<String>, Error = Infallible> + Clone,
{
    let request = Request::get(format!("/users/{id}"))
        .body(String::new())
        .unwrap();
    service.clone().oneshot(request).await.unwrap().status()
}

#[test]
fn the_measured_fpr_behind_a_guard_is_the_true_rate() {
    let _serial = serial();
    let recorder = recorder();
    let filter = users_filter("behind-guard");
    let cache: GuardedCache<u64, u64> = GuardedCache::builder(filter.clone())
        .name("behind-guard")
        .build();
    let service = guarded_service(&filter, cache.clone());

    // Known absent ids: the true rate is the fraction the filter answers "maybe" for.
    let absent = 1_000_000..1_020_000u64;
    let passed = absent.clone().filter(|id| filter.contains(id)).count() as u64;
    let total = absent.end - absent.start;
    let true_rate = passed as f64 / total as f64;
    assert!(
        (0.002..0.03).contains(&true_rate),
        "a 1% filter: {true_rate}"
    );
    runtime().block_on(async {
        for id in [1, 2, 1] {
            assert_eq!(get(&service, id).await, StatusCode::OK);
        }
        for id in absent {
            assert_eq!(get(&service, id).await, StatusCode::NOT_FOUND);
        }
    });

    let stats = filter.stats();
    assert_eq!(stats.false_positives, passed);
    assert_eq!(stats.rejections, total - passed, "the guard's rejections");
    assert_eq!(stats.measured_fpr, Some(true_rate));
    let cache_stats = cache.stats();
    assert_eq!(
        cache_stats.filter_rejections, 0,
        "the guard stopped them all"
    );
    assert_eq!(cache_stats.false_positives, passed);
    assert_eq!(cache_stats.measured_fpr, true_rate);

    let entries = recorder.snapshot().into_vec();
    let exported = gauge(
        &entries,
        names::FILTER_MEASURED_FPR,
        "filter",
        "behind-guard",
    );
    assert_eq!(
        exported,
        Some(true_rate),
        "bloom_filter_measured_fpr behind a guard (the cache alone sees only false positives: 1.0)"
    );
    assert_eq!(
        gauge(&entries, names::FILTER_TARGET_FPR, "filter", "behind-guard"),
        Some(0.01)
    );
    assert_eq!(
        value(&entries, names::FILTER_REJECTIONS, "filter", "behind-guard"),
        Some(&DebugValue::Counter(total - passed))
    );
}

#[test]
fn a_guard_without_a_cache_claims_no_measured_rate() {
    let _serial = serial();
    let recorder = recorder();
    let filter = users_filter("guard-only");
    let guard = BloomGuard::new(filter.clone(), key::path_segment(1).parse::<u64>());
    let service = tower::Layer::layer(
        &guard,
        service_fn(|_: Request<String>| async {
            Ok::<_, Infallible>(Response::new(String::new()))
        }),
    );
    runtime().block_on(async {
        for id in 1_000_000..1_001_000u64 {
            let _ = get(&service, id).await;
        }
    });
    let stats = filter.stats();
    assert!(stats.rejections > 900, "{stats:?}");
    assert_eq!(stats.measured_fpr, None, "nobody reports false positives");
    let entries = recorder.snapshot().into_vec();
    assert_eq!(
        gauge(&entries, names::FILTER_MEASURED_FPR, "filter", "guard-only"),
        None
    );
    assert!(value(&entries, names::FILTER_REJECTIONS, "filter", "guard-only").is_some());
}

#[test]
fn series_are_described_the_first_time_the_crate_emits() {
    let _serial = serial();
    let recorder = recorder();
    let filter = users_filter("described");
    let cache: GuardedCache<u64, u64> = GuardedCache::builder(filter.clone())
        .name("described")
        .build();
    let service = guarded_service(&filter, cache.clone());
    runtime().block_on(async {
        filter
            .reload_from(&(0..1_000u64).collect::<Vec<_>>())
            .await
            .unwrap();
        let failing = bloom_tower::key_source::from_stream(|| {
            futures_util::stream::iter([Err::<u64, _>(std::io::Error::other("down"))])
        });
        filter.reload_from(&failing).await.unwrap_err();
        for id in [1, 1, 5_000_000] {
            let _ = get(&service, id).await;
        }
        for id in 2_000_000..2_000_300u64 {
            let _ = get(&service, id).await;
        }
        let _ = cache
            .get_or_load(&3, |_| async {
                Err::<Option<u64>, _>(std::io::Error::other("x"))
            })
            .await;
    });
    let entries = recorder.snapshot().into_vec();
    let mut seen = Vec::new();
    for (key, unit, description, value) in &entries {
        let name = key.key().name();
        if !name.starts_with("bloom_") {
            continue;
        }
        let kind = match key.kind() {
            metrics_util::MetricKind::Counter => "counter",
            metrics_util::MetricKind::Gauge => "gauge",
            metrics_util::MetricKind::Histogram => "histogram",
        };
        assert!(
            description.is_some(),
            "{kind} {name} reached the recorder without a description"
        );
        check_convention(name, kind, *unit);
        // A histogram is registered with its cache or filter; count it once it has samples.
        if !matches!(value, DebugValue::Histogram(samples) if samples.is_empty()) {
            seen.push(name.to_owned());
        }
    }
    for name in [
        names::GUARD_CHECKED,
        names::GUARD_PASSED,
        names::GUARD_REJECTED,
        names::FILTER_REBUILDS,
        names::FILTER_REBUILD_DURATION,
        names::FILTER_KEYS,
        names::FILTER_REJECTIONS,
        names::FILTER_FALSE_POSITIVES,
        names::FILTER_MEASURED_FPR,
        names::FILTER_TARGET_FPR,
        names::CACHE_HITS,
        names::CACHE_LOADS,
        names::CACHE_LOAD_ERRORS,
        names::CACHE_LOAD_DURATION,
    ] {
        assert!(
            seen.iter().any(|seen| seen == name),
            "{name} was not emitted (or has no sample)"
        );
    }
}
