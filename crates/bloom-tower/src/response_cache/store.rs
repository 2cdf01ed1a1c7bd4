//! What the response cache keeps: per record key, the few stored variants of that record
//! (one per URL and `Vary` values), and the invalidation epochs that keep a load which raced
//! with an invalidation from storing its response.
//!
//! # Why records hold variants
//!
//! `invalidate(&key)` must drop every stored response about that record (`/users/7`,
//! `/users/7?fields=name`, its English and German variants) at once, without scanning the
//! cache. So moka is keyed by the extracted record key, and each value is a [`Record`]: an
//! immutable list of [`Variant`]s, replaced as a whole (copy-on-write) when a variant is
//! added. Invalidation is one moka `invalidate`; a lookup scans the record's variants, at most
//! [`MAX_VARIANTS`].

use std::borrow::Cow;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode, Version, header};
use moka::ops::compute::{CompResult, Op};

use super::ResponseBody;
use super::policy::{RequestUse, StoreRules};

/// Most variants kept per record: every lookup scans them, and every store copies the list.
/// Beyond it the oldest goes (a URL with many query variants keeps its most recent ones).
pub(crate) const MAX_VARIANTS: usize = 16;

/// Independent invalidation epochs; a record uses the one its key hashes to. With one
/// global epoch (as `GuardedCache` has) every invalidation would discard every load in
/// flight; with stripes, only loads of keys that share the stripe.
const EPOCH_STRIPES: usize = 64;

/// HPACK's per-field overhead estimate (RFC 7541 §4.1): what a header costs beyond its bytes.
const HEADER_OVERHEAD: u64 = 32;

/// One stored response, and what identifies the requests it may answer.
pub(crate) struct Variant {
    /// Authority + path + query of the request that loaded it; empty when the cache
    /// shares by key only.
    url: Bytes,
    /// That request's value of each header the response varies on (`None`: absent).
    vary: Box<[(HeaderName, Option<Bytes>)]>,
    answers_credentials: bool,
    status: StatusCode,
    version: Version,
    headers: HeaderMap,
    body: Bytes,
    stored_at: Instant,
    expires_at: Instant,
    upstream_age: u64,
    /// The invalidation epoch of its record when its load began.
    epoch: u64,
    weight: u64,
}

impl Variant {
    pub(crate) fn new(
        url: Bytes,
        request_headers: &HeaderMap,
        rules: StoreRules,
        parts: http::response::Parts,
        body: Bytes,
        epoch: u64,
    ) -> Self {
        let vary: Box<[_]> = rules
            .vary
            .into_iter()
            .map(|name| {
                let value =
                    field_value(request_headers, &name).map(|v| Bytes::from(v.into_owned()));
                (name, value)
            })
            .collect();
        let stored_at = Instant::now();
        let mut variant = Self {
            url,
            vary,
            answers_credentials: rules.answers_credentials,
            status: parts.status,
            version: parts.version,
            headers: parts.headers,
            body,
            stored_at,
            expires_at: stored_at + rules.time_to_live,
            upstream_age: rules.upstream_age,
            epoch,
            weight: 0,
        };
        variant.weight = variant.measure();
        variant
    }

    /// What the byte budget charges for it: body, headers, keys and the struct itself.
    fn measure(&self) -> u64 {
        let headers: u64 = self
            .headers
            .iter()
            .map(|(name, value)| (name.as_str().len() + value.len()) as u64 + HEADER_OVERHEAD)
            .sum();
        let vary: u64 = self
            .vary
            .iter()
            .map(|(name, value)| {
                (name.as_str().len() + value.as_ref().map_or(0, Bytes::len)) as u64
            })
            .sum();
        size_of::<Self>() as u64 + self.url.len() as u64 + self.body.len() as u64 + headers + vary
    }

    pub(crate) fn weight(&self) -> u64 {
        self.weight
    }

    pub(crate) fn is_not_found(&self) -> bool {
        self.status == StatusCode::NOT_FOUND
    }

    /// May it answer this request (RFC 9111 §4: same URL, fresh, the same values of the
    /// varied headers, and §3.5 for credentials)?
    pub(crate) fn answers(
        &self,
        url: &[u8],
        request_headers: &HeaderMap,
        request: RequestUse,
        now: Instant,
    ) -> bool {
        *self.url == *url
            && now < self.expires_at
            && (request != RequestUse::Credentials || self.answers_credentials)
            && self.vary.iter().all(|(name, stored)| {
                field_value(request_headers, name).as_deref() == stored.as_deref()
            })
    }

    /// Would a request it answers also be answered by `other` (so `other` replaces it)?
    fn same_slot(&self, other: &Self) -> bool {
        self.url == other.url && self.vary == other.vary
    }

    /// The response as the inner service gave it (for the request that loaded it).
    pub(crate) fn response<B: http_body::Body>(&self) -> Response<ResponseBody<B>> {
        let mut response = Response::new(ResponseBody::cached(self.body.clone()));
        *response.status_mut() = self.status;
        *response.version_mut() = self.version;
        *response.headers_mut() = self.headers.clone();
        response
    }

    /// The response served from the cache, with its `Age` (RFC 9111 §5.1).
    pub(crate) fn response_from_cache<B: http_body::Body>(&self) -> Response<ResponseBody<B>> {
        let mut response = self.response();
        // At most 2^31 (RFC 9111 §1.2.2), whatever the upstream sent
        // (tests/response_cache.rs `an_age_past_any_counter_is_sent_as_the_largest_delta_seconds`).
        let age = self
            .upstream_age
            .saturating_add(self.stored_at.elapsed().as_secs())
            .min(MAX_DELTA_SECONDS);
        response
            .headers_mut()
            .insert(header::AGE, HeaderValue::from(age));
        response
    }
}

/// The largest delta-seconds a cache sends (RFC 9111 §1.2.2).
const MAX_DELTA_SECONDS: u64 = 1 << 31;

/// A header's value as a cache compares it: field lines joined by `", "` (RFC 9110 §5.3).
fn field_value<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Option<Cow<'h, [u8]>> {
    let mut lines = headers.get_all(name).iter();
    let first = lines.next()?;
    let Some(second) = lines.next() else {
        return Some(Cow::Borrowed(first.as_bytes()));
    };
    let mut joined = first.as_bytes().to_vec();
    for line in std::iter::once(second).chain(lines) {
        joined.extend_from_slice(b", ");
        joined.extend_from_slice(line.as_bytes());
    }
    Some(Cow::Owned(joined))
}

/// Every stored variant of one record key, newest first. Never modified: adding a variant
/// builds a new `Record`.
struct Record {
    variants: Vec<Arc<Variant>>,
    weight: u64,
}

impl Record {
    /// `newest` in front of what it may keep of `existing`: variants of the same epoch (an
    /// older one was loaded before an invalidation, and must not be carried over), fresh, not
    /// replaced by `newest`; at most [`MAX_VARIANTS`], and weighing at most `budget`.
    fn with(existing: Option<&Record>, newest: Arc<Variant>, now: Instant, budget: u64) -> Self {
        let mut weight = size_of::<Self>() as u64 + newest.weight;
        let mut variants = vec![newest];
        for variant in existing.into_iter().flat_map(|r| &r.variants) {
            let keep = variant.epoch == variants[0].epoch
                && now < variant.expires_at
                && !variant.same_slot(&variants[0])
                && variants.len() < MAX_VARIANTS
                && weight + variant.weight <= budget;
            if keep {
                weight += variant.weight;
                variants.push(Arc::clone(variant));
            }
        }
        Self { variants, weight }
    }

    /// The newest variant that answers this request.
    fn find(
        &self,
        url: &[u8],
        headers: &HeaderMap,
        request: RequestUse,
        now: Instant,
    ) -> Option<Arc<Variant>> {
        self.variants
            .iter()
            .find(|variant| variant.answers(url, headers, request, now))
            .cloned()
    }

    fn expires_at(&self) -> Option<Instant> {
        self.variants.iter().map(|v| v.expires_at).max()
    }
}

/// A record lives as long as its longest-lived variant; the others are skipped once stale.
struct RecordExpiry;

impl moka::Expiry<Bytes, Arc<Record>> for RecordExpiry {
    fn expire_after_create(
        &self,
        _: &Bytes,
        record: &Arc<Record>,
        now: Instant,
    ) -> Option<Duration> {
        record
            .expires_at()
            .map(|at| at.saturating_duration_since(now))
    }

    fn expire_after_update(
        &self,
        _: &Bytes,
        record: &Arc<Record>,
        now: Instant,
        _: Option<Duration>,
    ) -> Option<Duration> {
        record
            .expires_at()
            .map(|at| at.saturating_duration_since(now))
    }
}

/// How [`Store::store`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stored {
    Kept,
    /// An invalidation of the record ran since the load began: the response is not kept.
    Stale,
}

/// The stored responses, within a byte budget.
pub(crate) struct Store {
    cache: moka::future::Cache<Bytes, Arc<Record>>,
    /// Bumped by every invalidation of a key in the stripe, so a load that raced with one
    /// does not leave its response behind (see [`Store::store`]).
    epochs: Box<[AtomicU64]>,
    stripe_hasher: std::hash::RandomState,
    max_bytes: u64,
}

impl Store {
    /// An empty store holding at most `max_bytes`.
    pub(crate) fn new(max_bytes: u64) -> Self {
        let cache = moka::future::Cache::builder()
            .max_capacity(max_bytes)
            .weigher(|key: &Bytes, record: &Arc<Record>| {
                u32::try_from(key.len() as u64 + record.weight).unwrap_or(u32::MAX)
            })
            .expire_after(RecordExpiry)
            .build();
        Self {
            cache,
            epochs: (0..EPOCH_STRIPES).map(|_| AtomicU64::new(0)).collect(),
            stripe_hasher: std::hash::RandomState::new(),
            max_bytes,
        }
    }

    fn epoch_stripe(&self, record: &[u8]) -> &AtomicU64 {
        let stripe = self.stripe_hasher.hash_one(record) as usize % EPOCH_STRIPES;
        &self.epochs[stripe]
    }

    /// The record's invalidation epoch: read it before the load begins.
    pub(crate) fn epoch(&self, record: &[u8]) -> u64 {
        self.epoch_stripe(record).load(Ordering::SeqCst)
    }

    /// The newest stored variant of `record` that answers this request.
    pub(crate) async fn answer(
        &self,
        record: &[u8],
        url: &[u8],
        headers: &HeaderMap,
        request: RequestUse,
    ) -> Option<Arc<Variant>> {
        let stored = self.cache.get(record).await?;
        stored.find(url, headers, request, Instant::now())
    }

    /// Would `variant` fit in the byte budget on its own?
    pub(crate) fn fits(&self, record: &[u8], variant: &Variant) -> bool {
        record.len() as u64 + size_of::<Record>() as u64 + variant.weight() <= self.max_bytes
    }

    /// Adds `variant` to its record, unless the record was invalidated since its load began.
    ///
    /// The epoch is checked inside the copy-on-write (an invalidation that ran before it:
    /// nothing is written) and again after it (an invalidation that ran while it was
    /// written: the record is dropped). So whichever order the store and an `invalidate`
    /// run in, a response loaded before the invalidation does not survive it; nor do older
    /// variants the copy carried over, since only variants of the same epoch are kept.
    pub(crate) async fn store(&self, record: Bytes, variant: Arc<Variant>) -> Stored {
        let epoch = variant.epoch;
        // The weigher adds the key to the record's own weight.
        let budget = self.max_bytes.saturating_sub(record.len() as u64);
        let outcome = self
            .cache
            .entry(record.clone())
            .and_compute_with(|existing| {
                let op = if self.epoch(&record) != epoch {
                    Op::Nop
                } else {
                    let existing = existing.map(|entry| entry.into_value());
                    let updated =
                        Record::with(existing.as_deref(), variant, Instant::now(), budget);
                    Op::Put(Arc::new(updated))
                };
                std::future::ready(op)
            })
            .await;
        if self.epoch(&record) != epoch {
            self.cache.invalidate(&record).await;
            return Stored::Stale;
        }
        match outcome {
            CompResult::Inserted(_) | CompResult::ReplacedWith(_) => Stored::Kept,
            _ => Stored::Stale,
        }
    }

    /// Forgets every variant of `record`, and fences off the loads in flight for it.
    pub(crate) async fn invalidate(&self, record: &[u8]) {
        self.epoch_stripe(record).fetch_add(1, Ordering::SeqCst);
        self.cache.invalidate(record).await;
    }

    /// Bytes held, as the budget counts them.
    pub(crate) fn bytes(&self) -> u64 {
        self.cache.weighted_size()
    }

    pub(crate) async fn run_pending_tasks(&self) {
        self.cache.run_pending_tasks().await;
    }
}
