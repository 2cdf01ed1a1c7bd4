//! The user service: axum 0.8, `GET /users/{id}` guarded by a Bloom filter and a cache,
//! on embedded SQLite (`./data/users.sqlite`) or PostgreSQL (`DATABASE_URL=postgres://…`).
//!
//! ```sh
//! cargo run --release --example user_service -- --port 3000
//! curl localhost:3000/users/1
//! curl -X POST localhost:3000/users -H 'content-type: application/json' \
//!      -d '{"name": "Ada", "email": "ada@example.com"}'
//! curl localhost:3000/metrics
//! ```
//!
//! `--admin-port 3001` also serves the operator's routes (`bloom_tower::admin`) on
//! 127.0.0.1:3001 only, a listener of their own because they have no authentication:
//!
//! ```sh
//! curl localhost:3001/filters
//! curl -X POST localhost:3001/filters/users/rebuild
//! curl -X POST localhost:3001/filters/users/snapshot
//! ```
//!
//! An empty database gets 10,000 users first (`--seed` to choose). One Ctrl-C or SIGTERM
//! stops it gracefully: it stops accepting, gives open connections at most 5 seconds
//! (`bloom_examples::serve`, whose docs state the rule and name its test), and saves the
//! filter snapshot (`./data/users.bloom`; it is also saved after
//! every rebuild and every `--snapshot-secs`). The next start loads the snapshot and reads
//! only the users created since it was saved, instead of every id, before it listens.
#![forbid(unsafe_code)]

use anyhow::Context as _;
use bloom_examples::user_service::{App, Config};
use clap::Parser;

/// Command line.
#[derive(Debug, Parser)]
#[command(about = "The user service, guarded by a Bloom filter")]
struct Cli {
    /// Port on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 3000)]
    port: u16,
    /// Also serve the admin routes (filter stats, rebuild, snapshot; no authentication) on
    /// this port of 127.0.0.1.
    #[arg(long)]
    admin_port: Option<u16>,
    /// Users to create if the database is empty.
    #[arg(long, default_value_t = 10_000)]
    seed: u64,
    #[command(flatten)]
    config: Config,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,sqlx::query=error".into()),
        )
        .init();
    let cli = Cli::parse();

    // Seed an empty database before the filter is built from it.
    let url = cli.config.resolved_database_url()?;
    let db = bloom_examples::db::Db::connect(&url, 1, &cli.config.name).await?;
    if db.count_users().await? == 0 && cli.seed > 0 {
        tracing::info!(users = cli.seed, "seeding an empty database");
        db.seed(cli.seed, |_| {}).await?;
    }
    db.close().await;

    let app = App::new(cli.config).await?;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", cli.port))
        .await
        .with_context(|| format!("binding 127.0.0.1:{}", cli.port))?;
    // Installed before it says it listens: a signal from then on stops it gracefully.
    let signal =
        bloom_examples::serve::shutdown_signal().context("installing the signal handlers")?;
    tracing::info!(
        addr = %listener.local_addr()?,
        guarded = app.filter().is_some(),
        users = app.db().count_users().await?,
        "listening; ctrl-c to stop"
    );
    if let (Some(port), Some(admin)) = (cli.admin_port, app.admin_router()) {
        // Localhost only, and apart from the public port: the admin routes have no auth.
        let admin_listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .with_context(|| format!("binding the admin port 127.0.0.1:{port}"))?;
        tracing::info!(addr = %admin_listener.local_addr()?, "admin routes listening");
        tokio::spawn(async move {
            if let Err(error) = axum::serve(admin_listener, admin).await {
                tracing::warn!(%error, "the admin listener stopped");
            }
        });
    }
    app.serve(listener, async move {
        let stop = signal.await;
        tracing::info!(%stop, "shutting down");
    })
    .await
}
