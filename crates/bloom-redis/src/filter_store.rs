//! [`RedisFilterStore`]: a [`FilterSet`](bloom_tower::filter_set::FilterSet)'s evicted
//! filters in Redis.
//!
//! Each filter is one Redis string, `<prefix><name>` (prefix `"bloom:set:"` by default),
//! holding the filter's bytes as `FilterSet` hands them over. `store` is one `SET`, a flush's
//! batch (`store_many`, up to 256 filters) one pipeline of `SET`s in one round trip, and
//! `load` one `GET`: Redis applies a command only once it has received it whole, so a process
//! killed mid-store leaves each key with its old value or its new one, never a part. A completed
//! store is in Redis's memory, so it survives this process; whether it survives a Redis
//! restart or a lost machine is Redis's own durability (RDB snapshots, AOF with its
//! `appendfsync` setting, and, with replicas, asynchronous replication), not this store's.
//! Every command is bounded by the store's timeout; a `SET` that timed out may still be
//! applied later, which is still the old value or the new one.

use std::fmt;
use std::time::Duration;

use bloom_tower::filter_set::{FilterStore, StoreError};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

/// The default key prefix.
const DEFAULT_PREFIX: &str = "bloom:set:";
/// The default bound on one command (and on each connection attempt).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// A [`FilterStore`] keeping each filter as one Redis string, `<prefix><name>`.
///
/// A store is one `SET` (atomic: a killed process leaves the old value or the new one), a
/// load one `GET`; how durable a completed store is depends on Redis's persistence settings
/// (RDB, AOF). Each command gives up after [`timeout`](Self::timeout) with
/// [`StoreError::Timeout`]; Redis's errors are [`StoreError::Backend`]. The connection is
/// multiplexed and reconnects by itself; clones share it.
///
/// ```no_run
/// use bloom_redis::RedisFilterStore;
/// use bloom_tower::filter_set::FilterSet;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let store = RedisFilterStore::connect("redis://127.0.0.1/").await?.prefix("feed:shown:");
/// let shown = FilterSet::<u64, _>::builder(store)
///     .plain(300, 0.01)?
///     .budget_bytes(256 << 20)
///     .build();
/// shown.insert(&42, "item-1").await?;
/// shown.flush_key(&42).await?; // now in Redis, under `feed:shown:42`
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedisFilterStore {
    conn: ConnectionManager,
    prefix: String,
    timeout: Duration,
}

impl RedisFilterStore {
    /// Connects to the Redis at `url` (`redis://host:port/db`; `rediss://` with the `tls`
    /// feature), with prefix `"bloom:set:"` and a 2 s timeout. Fails if Redis cannot be
    /// reached (each attempt bounded by the default timeout).
    ///
    /// ```no_run
    /// use bloom_redis::RedisFilterStore;
    ///
    /// # async fn run() -> Result<(), bloom_tower::filter_set::StoreError> {
    /// let store = RedisFilterStore::connect("redis://127.0.0.1:6379/").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let client = redis::Client::open(url).map_err(StoreError::backend)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(DEFAULT_TIMEOUT)
            .set_number_of_retries(1)
            .set_max_delay(200);
        let conn = ConnectionManager::new_with_config(client, config)
            .await
            .map_err(StoreError::backend)?;
        Ok(Self {
            conn,
            prefix: DEFAULT_PREFIX.to_owned(),
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// The prefix of every key (default `"bloom:set:"`): the filter `name` is the key
    /// `<prefix><name>`.
    ///
    /// ```no_run
    /// use bloom_redis::RedisFilterStore;
    ///
    /// # async fn run() -> Result<(), bloom_tower::filter_set::StoreError> {
    /// let store = RedisFilterStore::connect("redis://127.0.0.1/").await?.prefix("tenants:");
    /// assert_eq!(store.key_of("7"), "tenants:7");
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long one `GET` or `SET` may take before it fails with [`StoreError::Timeout`]
    /// (default 2 s), a stalled Redis included.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use bloom_redis::RedisFilterStore;
    ///
    /// # async fn run() -> Result<(), bloom_tower::filter_set::StoreError> {
    /// let store = RedisFilterStore::connect("redis://127.0.0.1/").await?
    ///     .timeout(Duration::from_millis(300));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The Redis key that holds the filter `name`.
    ///
    /// ```no_run
    /// use bloom_redis::RedisFilterStore;
    ///
    /// # async fn run() -> Result<(), bloom_tower::filter_set::StoreError> {
    /// let store = RedisFilterStore::connect("redis://127.0.0.1/").await?;
    /// assert_eq!(store.key_of("user/42"), "bloom:set:user/42");
    /// # Ok(())
    /// # }
    /// ```
    pub fn key_of(&self, name: &str) -> String {
        let mut key = String::with_capacity(self.prefix.len() + name.len());
        key.push_str(&self.prefix);
        key.push_str(name);
        key
    }

    /// Runs `cmd` on a clone of the connection (clones share it), bounded by the timeout.
    async fn query<T: redis::FromRedisValue>(&self, cmd: redis::Cmd) -> Result<T, StoreError> {
        let mut conn = self.conn.clone();
        match tokio::time::timeout(self.timeout, cmd.query_async::<T>(&mut conn)).await {
            Ok(result) => result.map_err(StoreError::backend),
            Err(_elapsed) => Err(StoreError::Timeout(self.timeout)),
        }
    }
}

impl FilterStore for RedisFilterStore {
    async fn load(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(self.key_of(name));
        self.query(cmd).await
    }

    async fn store(&self, name: &str, bytes: Vec<u8>) -> Result<(), StoreError> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.key_of(name)).arg(bytes);
        self.query(cmd).await
    }

    /// A batch is one pipeline of `SET`s: one round trip.
    const MAX_BATCH: usize = 256;

    async fn store_many(&self, batch: Vec<(String, Vec<u8>)>) -> Result<(), StoreError> {
        let mut pipe = redis::pipe();
        for (name, bytes) in batch {
            pipe.cmd("SET").arg(self.key_of(&name)).arg(bytes).ignore();
        }
        let mut conn = self.conn.clone();
        match tokio::time::timeout(self.timeout, pipe.query_async::<()>(&mut conn)).await {
            Ok(result) => result.map_err(StoreError::backend),
            Err(_elapsed) => Err(StoreError::Timeout(self.timeout)),
        }
    }
}

impl fmt::Debug for RedisFilterStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The connection (and its URL, which may hold a password) is not printed.
        f.debug_struct("RedisFilterStore")
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}
