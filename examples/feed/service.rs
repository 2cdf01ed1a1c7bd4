//! The service: its store, state, routes and handlers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use bloom_core::windowed::{Clock, RingLayout, Window, WindowedFilter};
use bloom_redis::RedisFilterStore;
use bloom_tower::filter_set::{
    DirectoryStore, FilterSet, FilterSetError, FilterStore, SqliteStore, StoreError,
};
use serde_json::json;

/// Where evicted filters go: one SQLite file, a directory, or Redis.
#[derive(Clone, Debug)]
pub enum FeedStore {
    /// One row per user in `<dir>/filters.db` (`fsync` off: a killed process loses
    /// nothing, a power cut may); a flush writes 512 users a transaction.
    Sqlite(SqliteStore, std::path::PathBuf),
    /// One file per user (`fsync` off, as above).
    Directory(DirectoryStore),
    /// One Redis string per user.
    Redis(RedisFilterStore),
}

/// Where a feed without Redis keeps its filters (`--store`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LocalStore {
    /// One SQLite database file, `filters.db`, in the store directory.
    #[default]
    Sqlite,
    /// One file per user under the store directory.
    Files,
}

impl FeedStore {
    /// Redis when `redis_url` is set, else `local` in `dir`.
    pub async fn open(
        redis_url: Option<&str>,
        local: LocalStore,
        dir: &std::path::Path,
    ) -> anyhow::Result<Self> {
        Ok(match (redis_url, local) {
            (Some(url), _) => Self::Redis(
                RedisFilterStore::connect(url)
                    .await
                    .context("connecting to Redis for the filter store")?
                    .prefix("feed:shown:"),
            ),
            (None, LocalStore::Sqlite) => {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
                let file = dir.join("filters.db");
                let store = SqliteStore::builder(&file)
                    .table("feed_shown")
                    .sync(false)
                    .open()
                    .await
                    .with_context(|| format!("opening {}", file.display()))?;
                Self::Sqlite(store, file)
            }
            (None, LocalStore::Files) => Self::Directory(
                DirectoryStore::new(dir)
                    .with_context(|| format!("creating {}", dir.display()))?
                    .sync(false),
            ),
        })
    }

    /// `sqlite <file>`, `directory <path>` or `redis`.
    pub fn describe(&self) -> String {
        match self {
            Self::Sqlite(_, file) => format!("sqlite {}", file.display()),
            Self::Directory(d) => format!("directory {}", d.root().display()),
            Self::Redis(_) => "redis".to_owned(),
        }
    }
}

impl FilterStore for FeedStore {
    async fn load(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        match self {
            Self::Sqlite(s, _) => s.load(name).await,
            Self::Directory(s) => s.load(name).await,
            Self::Redis(s) => s.load(name).await,
        }
    }

    async fn store(&self, name: &str, bytes: Vec<u8>) -> Result<(), StoreError> {
        match self {
            Self::Sqlite(s, _) => s.store(name, bytes).await,
            Self::Directory(s) => s.store(name, bytes).await,
            Self::Redis(s) => s.store(name, bytes).await,
        }
    }

    /// The largest of the three's batches: each store splits what is over its own.
    const MAX_BATCH: usize = SqliteStore::MAX_BATCH;

    async fn store_many(&self, batch: Vec<(String, Vec<u8>)>) -> Result<(), StoreError> {
        match self {
            Self::Sqlite(s, _) => s.store_many(batch).await,
            Self::Directory(s) => store_in_batches(s, batch).await,
            Self::Redis(s) => store_in_batches(s, batch).await,
        }
    }
}

/// `batch` handed to `store` in batches of its own size.
async fn store_in_batches<S: FilterStore>(
    store: &S,
    mut batch: Vec<(String, Vec<u8>)>,
) -> Result<(), StoreError> {
    while !batch.is_empty() {
        let rest = batch.split_off(batch.len().min(S::MAX_BATCH.max(1)));
        store
            .store_many(std::mem::replace(&mut batch, rest))
            .await?;
    }
    Ok(())
}

/// The items on offer at a time: `per_day` new items every day, ids counting up; the
/// newest first.
#[derive(Clone, Copy, Debug)]
pub struct Catalog {
    /// New items per day.
    pub per_day: u64,
}

impl Catalog {
    /// The newest item id at `now_ms` (ids below it are older).
    pub fn newest(&self, now_ms: u64) -> u64 {
        let day_ms = 86_400_000;
        now_ms / day_ms * self.per_day + (now_ms % day_ms) * self.per_day / day_ms
    }
}

/// How the service is set up.
#[derive(Clone, Debug)]
pub struct FeedConfig {
    /// Bytes the users' filters may take in memory.
    pub budget_bytes: usize,
    /// Items a user is expected to be shown in one window (sizes each filter).
    pub items_per_window: u64,
    /// Target false-positive rate of each filter.
    pub fpr: f64,
    /// The window: an item shown within it is not shown again.
    pub window: Duration,
    /// Generations of each filter: an item fades out between the window and the window
    /// plus `window / (generations − 1)`.
    pub generations: u32,
    /// How each user's generations lie in memory, for the users it creates and those it
    /// loads (`feed` interleaves them: a page's lookups then follow no pointer per
    /// generation, and users shown items most days fill their generations anyway;
    /// `benches/feed_page.rs` times a page both ways).
    pub ring_layout: RingLayout,
    /// Items per response.
    pub page: usize,
    /// Candidates a response looks at, at most.
    pub scan: usize,
    /// The catalogue.
    pub catalog: Catalog,
    /// Store the user's filter before answering.
    pub durable: bool,
    /// Check and record the items through the filter set (the service). `false` is the
    /// baseline (`feed --serve --no-filter`): the same routes, locks, candidates and JSON,
    /// but no [`FilterSet`] call on a request: every candidate counts as not seen and
    /// nothing is recorded, so `GET /feed/{user}` always answers the newest `page` items
    /// and `GET /seen/{user}/{item}` always `false`.
    pub filter: bool,
}

/// The service's state.
pub struct Feed {
    shown: FilterSet<u64, FeedStore>,
    config: FeedConfig,
    clock: Arc<dyn Clock>,
    /// A request holds its user's stripe from the check to the insert.
    stripes: Vec<tokio::sync::Mutex<()>>,
    answered: Answered,
}

impl Feed {
    /// The service over `store`, on `clock`.
    pub fn new(
        store: FeedStore,
        config: FeedConfig,
        clock: Arc<dyn Clock>,
    ) -> anyhow::Result<Arc<Self>> {
        let week = WindowedFilter::builder(Window::Time(config.window))
            .expected_items(config.items_per_window)
            .false_positive_rate(config.fpr)
            .generations(config.generations)
            .ring_layout(config.ring_layout)
            .clock(clock.clone());
        let shown = FilterSet::builder(store)
            .windowed(week)?
            .budget_bytes(config.budget_bytes)
            .name("feed_shown")
            .build();
        Ok(Arc::new(Self {
            shown,
            config,
            clock,
            stripes: (0..4096).map(|_| tokio::sync::Mutex::new(())).collect(),
            answered: Answered::default(),
        }))
    }

    /// The filter set (stats, flush).
    pub fn shown(&self) -> &FilterSet<u64, FeedStore> {
        &self.shown
    }

    /// The routes.
    pub fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route("/feed/{user}", get(feed))
            .route("/seen/{user}/{item}", get(seen))
            .route("/stats", get(stats))
            .with_state(self.clone())
    }

    /// The page for `user`, and the candidates withheld as already shown.
    pub async fn page(&self, user: u64) -> Result<(Vec<u64>, Vec<u64>), FilterSetError> {
        let _turn = self.stripes[(user % self.stripes.len() as u64) as usize]
            .lock()
            .await;
        let newest = self.config.catalog.newest(self.clock.now_millis());
        let (page, scan) = (self.config.page, self.config.scan as u64);
        if !self.config.filter {
            // The baseline: `choose` with every candidate unseen and nothing recorded.
            let mut items = Vec::with_capacity(page);
            let withheld = Vec::new();
            for item in (newest.saturating_sub(scan)..newest).rev() {
                if items.len() == page {
                    break;
                }
                items.push(item);
            }
            self.answered.count(&items, &withheld);
            return Ok((items, withheld));
        }
        let chosen = self
            .shown
            .update(&user, |seen| {
                let seen = seen
                    .as_windowed()
                    .expect("the feed's filter set is built windowed (Feed::new)");
                choose(seen, newest, page, scan)
            })
            .await?;
        if self.config.durable {
            self.shown.flush_key(&user).await?;
        }
        self.answered.count(&chosen.0, &chosen.1);
        Ok(chosen)
    }
}

/// The page for a user whose filter is `seen`: the newest `page` of the `scan` candidates
/// below `newest` that `seen` does not hold, each recorded in it; and the candidates
/// withheld as seen, in the order looked at, up to where the page filled.
///
/// Rules: an item is shown only if `seen` answered "not seen" for it within this call, and
/// every item shown is in `seen` when this returns (the simulation's exact checker:
/// `tests/feed.rs` `the_simulated_feed_never_shows_an_item_twice_within_the_window`). The
/// newest `page` candidates are checked and recorded in one batch
/// ([`WindowedFilter::seen_or_insert_many_with`], one clock read); only if some of them
/// were seen are older candidates looked up, `2 × page` (at least 16) to a batch
/// ([`WindowedFilter::contains_many_with`]), and the first unseen ones of a batch recorded
/// in one more.
fn choose(seen: &WindowedFilter, newest: u64, page: usize, scan: u64) -> (Vec<u64>, Vec<u64>) {
    let lowest = newest.saturating_sub(scan);
    let mut items = Vec::with_capacity(page);
    let mut withheld = Vec::with_capacity(2 * page);
    // The candidates `lowest..next` are still to be looked at, newest first.
    let first = newest - (page as u64).min(newest - lowest);
    let mut item = newest;
    seen.seen_or_insert_many_with((first..newest).rev(), |was_seen| {
        item -= 1;
        if was_seen {
            withheld.push(item);
        } else {
            items.push(item);
        }
    });
    let mut next = first;
    // The older candidates, a chunk to a batch: a page's worth or more, so that most pages
    // take one more batch at most, and no batch looks far past where the page fills.
    let chunk = (2 * page as u64).max(16);
    // A batch's buffers, allocated by the first batch (if any) and reused by the next ones.
    let (mut picked, mut looked, mut now_seen) = (Vec::new(), Vec::new(), Vec::new());
    while items.len() < page && next > lowest {
        let want = page - items.len();
        let from = next - chunk.min(next - lowest);
        picked.clear();
        picked.reserve(want);
        looked.clear();
        looked.reserve((next - from) as usize);
        let mut item = next;
        seen.contains_many_with((from..next).rev(), |was_seen| {
            item -= 1;
            if picked.len() < want {
                looked.push((item, was_seen));
                if !was_seen {
                    picked.push(item);
                }
            }
        });
        // The candidates below the last one looked at are still to be looked at.
        next = match looked.last() {
            Some(&(item, _)) if picked.len() == want => item,
            _ => from,
        };
        if picked.is_empty() {
            withheld.extend(looked.iter().map(|&(item, _)| item));
            continue;
        }
        // Recorded in one batch: one now "seen" is a false positive of this batch's own
        // inserts, and is withheld as the item-by-item loop would have withheld it.
        now_seen.clear();
        now_seen.reserve(picked.len());
        seen.seen_or_insert_many_with(picked.iter(), |s| now_seen.push(s));
        let mut answers = now_seen.iter().copied();
        for &(item, was_seen) in &looked {
            if was_seen || answers.next() != Some(false) {
                withheld.push(item);
            } else {
                items.push(item);
            }
        }
    }
    (items, withheld)
}

/// Pages answered and the items they held, for `GET /stats`: what the load was.
#[derive(Default)]
struct Answered {
    pages: AtomicU64,
    items: AtomicU64,
    withheld: AtomicU64,
}

impl Answered {
    fn count(&self, items: &[u64], withheld: &[u64]) {
        self.pages.fetch_add(1, Ordering::Relaxed);
        self.items.fetch_add(items.len() as u64, Ordering::Relaxed);
        self.withheld
            .fetch_add(withheld.len() as u64, Ordering::Relaxed);
    }
}

/// The body of `GET /feed/{user}`, written straight from the page's ids.
#[derive(serde::Serialize)]
struct Page<'a> {
    items: &'a [u64],
    withheld: &'a [u64],
}

async fn feed(State(feed): State<Arc<Feed>>, Path(user): Path<u64>) -> Response {
    match feed.page(user).await {
        Ok((items, withheld)) => {
            // Room for every id at its longest: the body is written without growing.
            let mut body = Vec::with_capacity(32 + 21 * (items.len() + withheld.len()));
            let page = Page {
                items: &items,
                withheld: &withheld,
            };
            match serde_json::to_writer(&mut body, &page) {
                Ok(()) => ([(CONTENT_TYPE, "application/json")], body).into_response(),
                Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
            }
        }
        Err(e) => unavailable(e),
    }
}

async fn seen(State(feed): State<Arc<Feed>>, Path((user, item)): Path<(u64, u64)>) -> Response {
    let seen = if feed.config.filter {
        feed.shown.contains(&user, &item).await
    } else {
        Ok(false)
    };
    match seen {
        Ok(seen) => Json(json!({"seen": seen})).into_response(),
        Err(e) => unavailable(e),
    }
}

async fn stats(State(feed): State<Arc<Feed>>) -> Response {
    let s = feed.shown.stats();
    Json(json!({
        "filters_in_memory": s.filters_in_memory,
        "bytes_in_memory": s.bytes_in_memory,
        "budget_bytes": s.budget_bytes,
        "loads": s.loads,
        "creates": s.creates,
        "evictions": s.evictions,
        "stores": s.stores,
        "load_errors": s.load_errors,
        "store_errors": s.store_errors,
        "load_latency_mean_us": s.load_latency_mean.as_micros() as u64,
        "load_latency_max_us": s.load_latency_max.as_micros() as u64,
        "pages": feed.answered.pages.load(Ordering::Relaxed),
        "items_answered": feed.answered.items.load(Ordering::Relaxed),
        "items_withheld": feed.answered.withheld.load(Ordering::Relaxed),
    }))
    .into_response()
}

/// The store failed: 503, nothing shown (an item shown now could not be remembered).
fn unavailable(e: FilterSetError) -> Response {
    tracing::warn!(error = %e, "feed: the user's filter is unavailable");
    (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `choose` against an exact model: the candidates newest first, each seen one withheld
    /// and each unseen one shown, until the page fills.
    #[test]
    fn a_page_is_the_newest_unseen_candidates_over_any_number_of_batches() {
        let (page, scan, newest) = (10usize, 200u64, 1_000u64);
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for round in 0..200u64 {
            // A large filter with a fixed hash key: no false positive among these keys.
            let seen = WindowedFilter::builder(Window::Count(1_000_000))
                .expected_items(100_000)
                .false_positive_rate(1e-9)
                .seed(u128::from(round))
                .build()
                .unwrap();
            // Each round its own share of the candidates already shown, from none to all,
            // so that pages take one batch, several, or run out of candidates.
            let share = round % 11;
            let mut shown = std::collections::HashSet::new();
            for item in newest - scan..newest {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                if (state >> 33) % 10 < share {
                    seen.insert(&item);
                    shown.insert(item);
                }
            }
            let (mut want_items, mut want_withheld) = (Vec::new(), Vec::new());
            for item in (newest - scan..newest).rev() {
                if want_items.len() == page {
                    break;
                }
                if shown.contains(&item) {
                    want_withheld.push(item);
                } else {
                    want_items.push(item);
                }
            }
            let (items, withheld) = choose(&seen, newest, page, scan);
            assert_eq!(items, want_items, "round {round}");
            assert_eq!(withheld, want_withheld, "round {round}");
            assert!(
                items.iter().all(|item| seen.contains(item)),
                "round {round}"
            );
            // Asked again, none of them is shown twice.
            let (again, _) = choose(&seen, newest, page, scan);
            assert!(again.iter().all(|i| !items.contains(i)), "round {round}");
        }
    }
}
