//! The feed service: `GET /feed/{user}` never returns an item the user was shown within the
//! last 7 days. One windowed filter per user in a [`FilterSet`](bloom_tower::filter_set::FilterSet)
//! under a memory budget, evicted to one SQLite file (`./data/feed-filters/filters.db`; a
//! file per user with `--store files`) or, when `REDIS_URL` is set, to Redis.
//!
//! | route | what it does |
//! | --- | --- |
//! | `GET /feed/{user}` | the newest `page` items of the catalogue the user's filter has not seen; marks them seen. JSON `{"items": [...], "withheld": [...]}` (`withheld`: candidates skipped as already shown, for the checker) |
//! | `GET /seen/{user}/{item}` | JSON `{"seen": bool}`: whether the user's filter holds the item |
//! | `GET /stats` | the filter set's [`FilterSetStats`](bloom_tower::filter_set::FilterSetStats) as JSON, and `pages`, `items_answered`, `items_withheld` since the start |
//!
//! Two requests of one user run one after the other (a striped lock per user): a check and
//! the insert that follows it are one step, so two tabs cannot both be shown an item.
//!
//! `feed` interleaves each user's ring ([`FeedConfig::ring_layout`]): one allocation per
//! user, allocated whole when the user is first shown an item or is loaded, with a key's line
//! of every generation side by side, so a page's lookups follow no pointer per generation. A
//! small ring is otherwise separate, each generation allocated when it first takes a key;
//! users shown items most days fill their generations anyway. `benches/feed_page.rs` times a
//! page both ways.
//!
//! [`simulate()`] drives the service over TCP with a simulated clock: a million users of whom
//! 10 % are active each day, over two weeks, and checks every answer against an exact record
//! of what each user was shown. `--durable` stores the user's filter before each response
//! ([`FilterSet::flush_key`](bloom_tower::filter_set::FilterSet::flush_key)), so a killed
//! process forgets nothing it answered (`tests/feed.rs`
//! `a_killed_feed_service_loses_no_item_it_acknowledged`). Without it the filters changed
//! since the last flush are stored every 30 s (`--flush-secs`) and at a graceful stop: a
//! process killed outright forgets what it showed since its last flush (at most
//! `--flush-secs`), and may show those items again; a stop by signal forgets nothing. A
//! flush stores one row (a file with `--store files`, a Redis key) per user changed, so a
//! user's requests within one interval cost one store; rows go 512 to a transaction.
//!
//! `feed --serve --no-filter` ([`FeedConfig::filter`] `false`) serves the same routes with the
//! filter set calls removed: every candidate counts as not seen and nothing is recorded. It is
//! the baseline `benches/feed_http.sh` measures the filtered service against over HTTP (`wrk`),
//! to show what the filters cost per request. The catalogue grows by `--items-per-day`
//! (2,000) and `--window-secs` replaces `--window-days`: the script runs a week compressed
//! into seconds (10 new items a second, a 10 s window), so that pages hold fresh items.
//! `GET /stats` also counts the pages answered and the items they showed and withheld.

mod service;
mod simulate;

pub use service::{Catalog, Feed, FeedConfig, FeedStore, LocalStore};
pub use simulate::{Report, SimulationConfig, simulate};
