//! The route handlers.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bloom_tower::guarded_cache::LoadErrorKind;
use serde::Deserialize;
use serde_json::json;

use super::{App, metrics as names};

/// `POST /users` body.
#[derive(Debug, Deserialize)]
pub(super) struct NewUser {
    name: String,
    email: String,
}

/// `404 {"error": "no such user"}`: for ids the filter rejects and ids the database lacks.
pub(super) fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({ "error": "no such user" })),
    )
        .into_response()
}

fn internal(error: impl std::fmt::Display) -> Response {
    tracing::error!(%error, "request failed");
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        Json(json!({ "error": "internal error" })),
    )
        .into_response()
}

/// `GET /users/{id}`. Guarded: the guard has already stopped ids the filter has never seen;
/// the rest go through the cache (one database load per id at a time, "not found" cached
/// for `negative_ttl`). Unguarded: straight to the database.
pub(super) async fn get_user(State(app): State<App>, Path(id): Path<u64>) -> Response {
    let db = app.db().clone();
    let found = match app.cache() {
        Some(cache) => {
            match cache
                .get_or_load(&id, move |id| async move { db.find_user(id).await })
                .await
            {
                Ok(found) => found,
                Err(error) if error.kind() == LoadErrorKind::Timeout => {
                    return (
                        StatusCode::SERVICE_UNAVAILABLE,
                        Json(json!({ "error": "database timeout" })),
                    )
                        .into_response();
                }
                Err(error) => return internal(error),
            }
        }
        None => match db.find_user(id).await {
            Ok(found) => found,
            Err(error) => return internal(error),
        },
    };
    match found {
        Some(user) => Json(user).into_response(),
        None => not_found(),
    }
}

/// `POST /users` `{"name", "email"}` → `201 Created` with the user.
///
/// The order is what keeps the guard from ever rejecting a user that exists:
/// 1. the database hands the id out (PostgreSQL: `INSERT … RETURNING id` in a transaction not
///    yet committed; SQLite: the id reserved from the table's `AUTOINCREMENT` counter);
/// 2. `prepare_insert`: the id goes into the Bloom filter (and with `--redis`, into Redis and
///    every other instance) **before** the row becomes visible, so from the moment any reader
///    can find the row, the guard lets it through;
/// 3. `COMMIT` (SQLite: the `INSERT`): the row is visible to every reader;
/// 4. `committed`: the id goes into any filter a rebuild published since step 2 (its
///    `SELECT id` may have run before the row was visible; with no rebuild in between it
///    writes nothing, so a counting filter counts the id once), and any "not found" a lookup
///    cached between 2 and 3 is dropped, so the very next `GET` finds the user.
///
/// If the client goes away after step 3, this future is dropped: the `PendingInsert` then
/// does step 4 in its `Drop`, so a cancelled create never leaves a user the guard rejects.
/// Dropped before step 3, the transaction rolls back and the id stays a harmless false
/// positive until the next rebuild.
pub(super) async fn create_user(State(app): State<App>, Json(new): Json<NewUser>) -> Response {
    let (name, email) = (new.name.trim(), new.email.trim());
    if name.is_empty() || !email.contains('@') {
        return (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({ "error": "name must not be empty and email must contain '@'" })),
        )
            .into_response();
    }
    match app.create_user(name, email).await {
        Ok(user) => (
            StatusCode::CREATED,
            [(header::LOCATION, format!("/users/{}", user.id))],
            Json(user),
        )
            .into_response(),
        Err(error) => internal(format!("{error:#}")),
    }
}

/// `DELETE /users/{id}` → `204`, or `404`.
///
/// With `--cuckoo` or `--counting` the id is removed from the filter once the row is gone,
/// and the guard rejects it again. A plain filter cannot forget: the id passes it until the next rebuild,
/// which costs one database lookup per cache expiry, then a negative-cache entry.
pub(super) async fn delete_user(State(app): State<App>, Path(id): Path<u64>) -> Response {
    // Before the delete: `remove` only decrements the filter that held the row's id.
    let before = app.filter().map(|filter| filter.generation());
    match app.db().delete_user(id).await {
        Ok(true) => {
            if let (Some(filter), Some(before)) = (app.filter(), before) {
                match filter.remove(&id, before) {
                    Ok(outcome) => tracing::debug!(id, ?outcome, "removed from the filter"),
                    Err(_plain) => {} // kept until the next rebuild
                }
            }
            if let Some(cache) = app.cache() {
                cache.invalidate(&id).await;
            }
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(false) => not_found(),
        Err(error) => internal(error),
    }
}

/// `GET /metrics`: refreshes this instance's gauges, then renders the process's registry.
pub(super) async fn metrics(State(app): State<App>) -> Response {
    let service = app.config().name.clone();
    if let Some(filter) = app.filter() {
        let current = filter.current();
        let label = [("service", service.clone())];
        metrics::gauge!(names::FILTER_FILL, &label).set(current.fill_ratio());
        metrics::gauge!(names::FILTER_ESTIMATED_FPR, &label).set(current.current_fpr());
        metrics::gauge!(names::FILTER_ESTIMATED_KEYS, &label).set(current.estimated_items());
        metrics::gauge!(names::FILTER_BYTES, &label).set(current.size_in_bytes() as f64);
        if let Some(capacity) = current.capacity() {
            metrics::gauge!(names::FILTER_CAPACITY, &label).set(capacity as f64);
        }
        metrics::gauge!(names::MEASURED_FPR, &label).set(app.stats().measured_fpr);
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        names::prometheus().render(),
    )
        .into_response()
}

/// `GET /health`: `ok` when the database answers, else `503` with a fixed message (the
/// error itself, which may name hosts, users or paths, goes to the log only).
pub(super) async fn health(State(app): State<App>) -> Response {
    match app.db().ping().await {
        Ok(()) => "ok".into_response(),
        Err(error) => {
            tracing::warn!(%error, "health check: the database does not answer");
            (StatusCode::SERVICE_UNAVAILABLE, "database unavailable").into_response()
        }
    }
}
