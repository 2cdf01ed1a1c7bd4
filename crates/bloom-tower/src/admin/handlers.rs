//! The admin routes' handlers and their JSON.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use serde_json::{Value, json};

use super::{Admin, FilterEntry};
use crate::SharedFilter;
use crate::key::AnyKey;
use crate::shared_filter::Chain;
use crate::shared_filter::{ReloadErrorKind, Reloaded};

/// The handlers' state: what was registered.
type AdminState = State<Arc<Admin>>;

/// `GET /filters`.
pub(super) async fn filters(State(admin): AdminState) -> Response {
    let all = scan(admin, |admin| {
        let filters: Vec<Value> = admin.filters.iter().map(|e| stats(&e.filter)).collect();
        json!({ "filters": filters })
    });
    match all.await {
        Ok(all) => answer(StatusCode::OK, all),
        Err(response) => response,
    }
}

/// `GET /filters/{name}`.
pub(super) async fn filter(State(admin): AdminState, Path(name): Path<String>) -> Response {
    let one = scan(admin, move |admin| {
        admin
            .find(&name)
            .map(|entry| stats(&entry.filter))
            .ok_or(name)
    });
    match one.await {
        Ok(Ok(one)) => answer(StatusCode::OK, one),
        Ok(Err(name)) => unknown(&name),
        Err(response) => response,
    }
}

/// `POST /filters/{name}/rebuild`.
pub(super) async fn rebuild(State(admin): AdminState, Path(name): Path<String>) -> Response {
    let Some(FilterEntry { filter, source }) = admin.find(&name) else {
        return unknown(&name);
    };
    let (filter, source) = (filter.clone(), Arc::clone(source));
    // In its own task: an operator's client that hangs up or times out must not cancel the
    // rebuild it asked for (dropping `reload_from` abandons it).
    let run = tokio::spawn(async move { filter.reload_from(&*source).await });
    let (status, mut outcome) = match run.await {
        Ok(Ok(Reloaded::Rebuilt { keys })) => {
            (StatusCode::OK, json!({"outcome": "rebuilt", "keys": keys}))
        }
        Ok(Ok(Reloaded::Joined { keys })) => {
            (StatusCode::OK, json!({"outcome": "joined", "keys": keys}))
        }
        // Accepted, not done: this instance switches when the fleet publishes the new filter.
        Ok(Ok(Reloaded::Elsewhere)) => (StatusCode::ACCEPTED, json!({"outcome": "elsewhere"})),
        Ok(Err(error)) => {
            tracing::warn!(filter = %name, error = %Chain(&error), "rebuild requested through the admin router failed");
            let kind = match error.kind() {
                ReloadErrorKind::Size => "size",
                ReloadErrorKind::Source => "source",
                ReloadErrorKind::Concurrent => "concurrent",
                ReloadErrorKind::External => "external",
            };
            let error = Chain(&error).to_string();
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({"error": error, "kind": kind}),
            )
        }
        // A source that panicked: the rebuild was dropped midway, so the old filter serves.
        Err(join) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"error": format!("the rebuild task failed ({join}); the previous filter keeps serving"), "kind": "panic"}),
        ),
    };
    outcome["filter"] = Value::from(name);
    answer(status, outcome)
}

/// `POST /filters/{name}/snapshot`.
pub(super) async fn snapshot(State(admin): AdminState, Path(name): Path<String>) -> Response {
    let Some(FilterEntry { filter, .. }) = admin.find(&name) else {
        return unknown(&name);
    };
    let Some(path) = filter.snapshot_path() else {
        let error =
            format!("the filter {name:?} has no snapshot path (set SharedFilterBuilder::snapshot)");
        return answer(
            StatusCode::CONFLICT,
            json!({"filter": name, "error": error}),
        );
    };
    let path = path.display().to_string();
    match filter.save_snapshot().await {
        Ok(()) => answer(StatusCode::OK, json!({"filter": name, "snapshot": path})),
        Err(error) => {
            let error = Chain(&error).to_string();
            answer(
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({"filter": name, "error": error}),
            )
        }
    }
}

/// `GET /guards`.
pub(super) async fn guards(State(admin): AdminState) -> Response {
    let guards: Vec<Value> = admin
        .guards
        .iter()
        .map(|entry| {
            let stats = (entry.stats)();
            json!({
                "name": entry.name,
                "checked": stats.checked,
                "passed": stats.passed,
                "rejected": stats.rejected,
                "missing_key": stats.missing_key,
            })
        })
        .collect();
    answer(StatusCode::OK, json!({ "guards": guards }))
}

/// `GET /caches`.
pub(super) async fn caches(State(admin): AdminState) -> Response {
    let caches: Vec<Value> = admin
        .caches
        .iter()
        .map(|entry| {
            let (stats, loads_in_flight) = (entry.stats)();
            json!({
                "name": entry.name,
                "filter_rejections": stats.filter_rejections,
                "hits": stats.hits,
                "negative_hits": stats.negative_hits,
                "loads": stats.loads,
                "load_errors": stats.load_errors,
                "coalesced_waiters": stats.coalesced_waiters,
                "false_positives": stats.false_positives,
                "measured_fpr": stats.measured_fpr,
                "loads_in_flight": loads_in_flight,
            })
        })
        .collect();
    answer(StatusCode::OK, json!({ "caches": caches }))
}

/// Runs `read` on the blocking pool: it scans filters' bits, O(size) each.
async fn scan<T: Send + 'static>(
    admin: Arc<Admin>,
    read: impl FnOnce(&Admin) -> T + Send + 'static,
) -> Result<T, Response> {
    tokio::task::spawn_blocking(move || read(&admin))
        .await
        .map_err(|join| {
            let error = format!("reading the filters failed: {join}");
            answer(StatusCode::INTERNAL_SERVER_ERROR, json!({"error": error}))
        })
}

/// One filter's stats and fill (a scan of its bits).
fn stats(filter: &SharedFilter<AnyKey>) -> Value {
    let stats = filter.stats();
    let current = filter.current();
    let last_rebuild = stats
        .last_rebuild
        .map(|(keys, took)| json!({"keys": keys, "seconds": took.as_secs_f64()}));
    // Non-finite floats (an all-ones filter estimates +∞ keys) become `null`.
    json!({
        "name": stats.name,
        "kind": stats.kind,
        "bits": stats.num_bits,
        "bytes": current.size_in_bytes(),
        "capacity": stats.capacity,
        "approx_items": stats.approx_items,
        "estimated_items": current.estimated_items(),
        "fill_ratio": current.fill_ratio(),
        "estimated_fpr": current.current_fpr(),
        "target_fpr": current.target_fpr(),
        "inserts": stats.inserts,
        "removes": stats.removes,
        "rebuilds": stats.rebuilds,
        "failed_rebuilds": stats.failed_rebuilds,
        "cancelled_rebuilds": stats.cancelled_rebuilds,
        "last_rebuild": last_rebuild,
        "saturation_warnings": stats.saturation_warnings,
        "rebuilding": stats.rebuilding,
        "verifying": stats.verifying,
        "unverified_passes": stats.unverified_passes,
        "rejections": stats.rejections,
        "false_positives": stats.false_positives,
        "measured_fpr": stats.measured_fpr,
        "snapshot": filter.snapshot_path().map(|path| path.display().to_string()),
        "replicated": filter.external_rebuild().is_some(),
    })
}

fn unknown(name: &str) -> Response {
    let error = format!("no filter named {name:?} is registered with the admin router");
    answer(StatusCode::NOT_FOUND, json!({"error": error}))
}

fn answer(status: StatusCode, body: Value) -> Response {
    let headers = [
        (CONTENT_TYPE, HeaderValue::from_static("application/json")),
        // Counters and outcomes of actions: never for a shared cache to keep.
        (CACHE_CONTROL, HeaderValue::from_static("no-store")),
    ];
    (status, headers, body.to_string()).into_response()
}
