//! The smallest guarded service: a filter of the user ids that exist, in front of an axum
//! route. `cargo run --release --example quickstart`, then `curl -i localhost:3000/users/7`
//! (the handler answers) and `curl -i localhost:3000/users/5000` (the guard answers 404).
//! The workspace README shows this file as its example; `tests/readme.rs` keeps them equal.

use axum::{Router, extract::Path, routing::get};
use bloom_tower::{BloomFilter, BloomGuard, SharedFilter, key, key_source};

async fn get_user(Path(id): Path<u64>) -> String {
    format!("user {id}") // the database lookup the guard spares for ids that do not exist
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The ids that exist, read afresh at every rebuild (`key_source::sqlx::query` for a table).
    let user_ids = key_source::from_iter(|| 1..=1_000u64);
    let filter = SharedFilter::<u64>::new(BloomFilter::new(1_000_000, 0.01)?);
    filter.reload_from(&user_ids).await?;
    let _rebuilds = filter.rebuild_every(std::time::Duration::from_secs(600), user_ids);
    // Ids the filter has never seen are answered 404 by the guard; the handler is not called.
    let guard = BloomGuard::new(filter, key::path_param("id").parse::<u64>());
    let app: Router = Router::new()
        .route("/users/{id}", get(get_user))
        .route_layer(guard);
    axum::serve(tokio::net::TcpListener::bind("127.0.0.1:3000").await?, app).await?;
    Ok(())
}
