//! [`GuardedCache::get_or_load`](super::GuardedCache::get_or_load)'s result as an axum
//! response: [`CacheResponse`], and [`LoadError`] on its own.

use std::fmt;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::StatusCode;

use super::{LoadError, LoadErrorKind};

/// The result of [`GuardedCache::get_or_load`](super::GuardedCache::get_or_load) as an axum
/// response, so that a handler can end with `cache.get_or_load(…).await.into()`:
///
/// * `Ok(Some(v))`: `v`'s own response (`200` for a `String`, a `Json(…)`, …);
/// * `Ok(None)`: `404 Not Found`, body `Not Found`, the same bytes and headers as the guard's
///   default rejection ([`NotFound`](crate::reject::NotFound)), so a client cannot tell which one
///   answered;
/// * an error of kind [`Loader`](super::LoadErrorKind::Loader) or
///   [`Timeout`](super::LoadErrorKind::Timeout): `503 Service Unavailable`,
///   body `Service Unavailable`;
/// * [`Panicked`](super::LoadErrorKind::Panicked): `500 Internal Server Error`, body
///   `Internal Server Error`.
///
/// An error's body never holds the loader's error text (a database error can name tables,
/// hosts and values); the error is logged through `tracing` at `WARN` instead. Use
/// [`map`](Self::map) to turn the value into a response (`.map(Json)`), or match the result
/// yourself for any other mapping.
///
/// ```
/// use axum::{Router, extract::{Path, State}, routing::get};
/// use bloom_tower::{BloomFilter, guarded_cache::CacheResponse, GuardedCache, SharedFilter};
///
/// #[derive(Clone)]
/// struct User { name: String }
/// # #[derive(Debug)] struct DbError;
/// # impl std::fmt::Display for DbError {
/// #     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str("db") } }
/// async fn find_user(id: u64) -> Result<Option<User>, DbError> {
///     // SELECT … FROM users WHERE id = $1
/// #   Ok((id == 42).then(|| User { name: "Ada".into() }))
/// }
///
/// async fn get_user(
///     State(users): State<GuardedCache<u64, User>>,
///     Path(id): Path<u64>,
/// ) -> CacheResponse<String, DbError> {
///     let user = users.get_or_load(&id, find_user).await;
///     CacheResponse::from(user).map(|user| user.name) // or `.map(Json)`, with axum's `json`
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let filter = SharedFilter::<u64>::new(BloomFilter::new(1_000, 0.01)?);
/// filter.insert(&42u64);
/// let users = GuardedCache::builder(filter).build();
/// let app: Router = Router::new()
///     .route("/users/{id}", get(get_user))
///     .with_state(users);
/// # use tower::ServiceExt;
/// # let get = |uri: &str| app.clone().oneshot(
/// #     axum::http::Request::get(uri).body(axum::body::Body::empty()).unwrap());
/// # assert_eq!(get("/users/42").await?.status(), 200);
/// # assert_eq!(get("/users/7").await?.status(), 404);
/// # Ok(())
/// # }
/// ```
#[must_use = "a response does nothing until it is returned from a handler"]
pub struct CacheResponse<V, E>(pub Result<Option<V>, LoadError<E>>);

impl<V, E> CacheResponse<V, E> {
    /// Maps the value, if there is one (into a response type: `.map(Json)`).
    pub fn map<U>(self, f: impl FnOnce(V) -> U) -> CacheResponse<U, E> {
        CacheResponse(self.0.map(|value| value.map(f)))
    }

    /// The result.
    pub fn into_inner(self) -> Result<Option<V>, LoadError<E>> {
        self.0
    }
}

impl<V, E> From<Result<Option<V>, LoadError<E>>> for CacheResponse<V, E> {
    fn from(result: Result<Option<V>, LoadError<E>>) -> Self {
        Self(result)
    }
}

impl<V: fmt::Debug, E: fmt::Debug> fmt::Debug for CacheResponse<V, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CacheResponse").field(&self.0).finish()
    }
}

impl<V: IntoResponse, E: fmt::Display> IntoResponse for CacheResponse<V, E> {
    fn into_response(self) -> Response {
        match self.0 {
            Ok(Some(value)) => value.into_response(),
            Ok(None) => plain_text(StatusCode::NOT_FOUND),
            Err(error) => error.into_response(),
        }
    }
}

/// `503 Service Unavailable` for a failed or timed-out load, `500 Internal Server Error` for a
/// panicked one, with the status's reason as the body and never the error's text (which is
/// logged through `tracing` at `WARN`). What [`CacheResponse`] answers for an error; also lets a
/// handler use `?` on [`get_or_load`](super::GuardedCache::get_or_load).
impl<E: fmt::Display> IntoResponse for LoadError<E> {
    fn into_response(self) -> Response {
        let status = match self.kind() {
            LoadErrorKind::Loader | LoadErrorKind::Timeout => StatusCode::SERVICE_UNAVAILABLE,
            // A panic, or a kind this match does not know yet: not the database's fault.
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        tracing::warn!(error = %self, status = status.as_u16(), "a guarded cache load failed");
        plain_text(status)
    }
}

/// `status` with its reason as the body and no headers, as [`NotFound`](crate::reject::NotFound)
/// answers.
fn plain_text(status: StatusCode) -> Response {
    let mut response = Response::new(Body::from(status.canonical_reason().unwrap_or("")));
    *response.status_mut() = status;
    response
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use axum::Router;
    use axum::extract::Path;
    use axum::routing::get;
    use http::Request;
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;

    use super::*;

    /// A loader error whose text must never reach a client.
    #[derive(Debug)]
    struct Secret;

    impl fmt::Display for Secret {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("password authentication failed for user \"admin\"")
        }
    }

    fn outcome(n: u8) -> Result<Option<String>, LoadError<Secret>> {
        match n {
            0 => Ok(Some("ada".to_owned())),
            1 => Ok(None),
            2 => Err(LoadError::loader(Arc::new(Secret))),
            3 => Err(LoadError::timed_out(Duration::from_secs(2))),
            _ => Err(LoadError::panicked()),
        }
    }

    fn app() -> Router {
        Router::new()
            .route(
                "/into/{n}",
                get(|Path(n): Path<u8>| async move { CacheResponse::from(outcome(n)) }),
            )
            .route(
                "/mapped/{n}",
                get(|Path(n): Path<u8>| async move {
                    CacheResponse::from(outcome(n)).map(|name| (StatusCode::CREATED, name))
                }),
            )
            // `?` on the error alone.
            .route(
                "/try/{n}",
                get(|Path(n): Path<u8>| async move {
                    Ok::<_, LoadError<Secret>>(outcome(n)?.unwrap_or_default())
                }),
            )
    }

    async fn get_path(uri: &str) -> (StatusCode, bool, String) {
        let response = app()
            .oneshot(Request::get(uri).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let typed = response.headers().contains_key(http::header::CONTENT_TYPE);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, typed, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn each_outcome_has_its_status_and_a_generic_body() {
        let ok = (StatusCode::OK, true, "ada".to_owned());
        assert_eq!(get_path("/into/0").await, ok);
        let not_found = (StatusCode::NOT_FOUND, false, "Not Found".to_owned());
        assert_eq!(get_path("/into/1").await, not_found);
        let unavailable = (
            StatusCode::SERVICE_UNAVAILABLE,
            false,
            "Service Unavailable".to_owned(),
        );
        assert_eq!(get_path("/into/2").await, unavailable);
        assert_eq!(get_path("/into/3").await, unavailable);
        let internal = (
            StatusCode::INTERNAL_SERVER_ERROR,
            false,
            "Internal Server Error".to_owned(),
        );
        assert_eq!(get_path("/into/4").await, internal);

        assert_eq!(
            get_path("/mapped/0").await,
            (StatusCode::CREATED, true, "ada".to_owned())
        );
        assert_eq!(get_path("/mapped/1").await, not_found);
        assert_eq!(get_path("/mapped/2").await, unavailable);
        assert_eq!(get_path("/try/2").await, unavailable);
        assert_eq!(get_path("/try/4").await, internal);
    }

    #[test]
    fn the_404_is_the_guards_rejection() {
        use crate::reject::{NotFound, OnReject, RejectedKey};

        let guard: Response = NotFound.on_reject(&Request::new(()), RejectedKey::new(b"7"));
        let cache = CacheResponse::<String, Secret>::from(Ok(None)).into_response();
        assert_eq!(guard.status(), cache.status());
        assert_eq!(guard.headers(), cache.headers());
    }

    #[test]
    fn map_and_into_inner() {
        let mapped = CacheResponse::<u8, Secret>::from(Ok(Some(2))).map(|n| n * 2);
        assert!(matches!(mapped.into_inner(), Ok(Some(4))));
        let missing = CacheResponse::<u8, Secret>::from(Ok(None)).map(|n| n * 2);
        assert!(matches!(missing.into_inner(), Ok(None)));
    }
}
