//! [`router`]: the admin routes, each answered by a function in `handlers.rs`.

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

use super::{Admin, handlers};

/// The admin routes over what `admin` registered (see the [module docs](super) for the
/// routes and their answers). **No authentication**: mount it behind yours, e.g.
/// `app.nest("/admin", admin::router(admin).layer(your_auth))`, or serve it on a listener
/// bound to localhost.
///
/// ```
/// use bloom_tower::{BloomFilter, SharedFilter, admin};
/// use http::{Request, StatusCode};
/// use tower::ServiceExt;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let filter = SharedFilter::<u64>::builder().name("users").build(BloomFilter::new(1_000, 0.01)?);
/// let router = admin::router(admin::Admin::new().filter(filter, vec![1u64]));
/// let missing = Request::post("/filters/orders/rebuild").body(axum::body::Body::empty())?;
/// assert_eq!(router.oneshot(missing).await?.status(), StatusCode::NOT_FOUND);
/// # Ok(())
/// # }
/// ```
pub fn router(admin: Admin) -> Router {
    Router::new()
        .route("/filters", get(handlers::filters))
        .route("/filters/{name}", get(handlers::filter))
        .route("/filters/{name}/rebuild", post(handlers::rebuild))
        .route("/filters/{name}/snapshot", post(handlers::snapshot))
        .route("/guards", get(handlers::guards))
        .route("/caches", get(handlers::caches))
        .with_state(Arc::new(admin))
}
