use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use tower_layer::Layer;

use super::BloomGuardService;
use super::service::Reporting;
use super::stats::{GuardCounters, GuardStats};
use crate::reject::{NotFound, PassThrough, RejectedKey, RejectionHeader};
use crate::shared_filter::SharedFilter;

/// Layer that guards a service with a [`SharedFilter`]; see the [module docs](crate::guard).
///
/// `E` finds the key ([`KeyExtractor`](crate::KeyExtractor)), `R` answers for an absent key
/// ([`OnReject`](crate::reject::OnReject)), `M` handles a request without a key
/// ([`OnMissingKey`](crate::reject::OnMissingKey)). Every service made from one layer (and from its
/// clones) shares its [`stats`](Self::stats), until a [rename](Self::name).
pub struct BloomGuard<K: ?Sized, E, R = NotFound, M = PassThrough> {
    filter: SharedFilter<K>,
    extractor: E,
    on_reject: R,
    on_missing_key: M,
    reporting: Reporting,
}

impl<K: ?Sized, E> BloomGuard<K, E> {
    /// Guards with `filter`, finding keys with `extractor`; absent keys get a `404`,
    /// requests without a key pass through.
    pub fn new(filter: SharedFilter<K>, extractor: E) -> Self {
        Self {
            filter,
            extractor,
            on_reject: NotFound,
            on_missing_key: PassThrough,
            reporting: Reporting {
                name: Cow::Borrowed("default"),
                log_rejected_keys: false,
                counters: Arc::default(),
            },
        }
    }
}

impl<K: ?Sized, E, R, M> BloomGuard<K, E, R, M> {
    /// Names the guard for logs and the `guard` metric label (`"default"` otherwise).
    ///
    /// A name has counts of its own, so that [`stats`](Self::stats) always agrees with the
    /// series labelled with that name: the renamed guard, and every service made from it from
    /// then on, count from zero under the new name. Clones and services made before the
    /// rename keep the old name and its counts. So name the guard before use.
    pub fn name(mut self, name: impl Into<Cow<'static, str>>) -> Self {
        self.reporting.name = name.into();
        self.reporting.counters = Arc::new(GuardCounters::default());
        self
    }

    /// Include the key in the `debug` event logged for each rejection (text keys as text,
    /// others in hex). Off by default: keys can be personal data (emails, user names).
    /// It applies to the services made from this guard from then on; the counts go on,
    /// shared with the clones made before.
    pub fn log_rejected_keys(mut self, on: bool) -> Self {
        self.reporting.log_rejected_keys = on;
        self
    }

    /// Answers absent keys with `reject(key)` instead of a `404`, e.g.
    /// `.on_reject(|_key| (StatusCode::NOT_FOUND, Json(json!({"error": "no such user"}))).into_response())`
    /// with axum, or the "not found" value of a non-HTTP service. The closure must return
    /// the inner service's response type.
    ///
    /// A closure has no answer of its own for an [ambiguous](crate::key::Extracted::Ambiguous)
    /// key (a value given more than once, the values differing): the missing-key policy
    /// answers it if it answers anything, otherwise the closure is called with a key that
    /// [`is_ambiguous`](RejectedKey::is_ambiguous), and should then answer a bad request.
    pub fn on_reject<F, Res>(self, reject: F) -> BloomGuard<K, E, F, M>
    where
        F: FnMut(RejectedKey<'_>) -> Res,
    {
        self.reject_with(reject)
    }

    /// Answers absent keys with any [`OnReject`](crate::reject::OnReject): a [`StatusCode`](http::StatusCode),
    /// or your own type that also looks at the request.
    pub fn reject_with<R2>(self, reject: R2) -> BloomGuard<K, E, R2, M> {
        BloomGuard {
            filter: self.filter,
            extractor: self.extractor,
            on_reject: reject,
            on_missing_key: self.on_missing_key,
            reporting: self.reporting,
        }
    }

    /// Adds `name: rejected` (e.g. [`REJECTION_HEADER`](crate::reject::REJECTION_HEADER),
    /// `x-bloom-guard`) to the guard's own rejections, so that clients and operators can tell
    /// them from the handler's 404s, and to its `400` for an ambiguous key. Responses of the
    /// inner service and missing-key answers are left alone. Off by default: the header map
    /// a rejection otherwise never allocates makes it measurably dearer.
    ///
    /// It wraps the rejection policy set so far: call it **after** [`on_reject`](Self::on_reject)
    /// or [`reject_with`](Self::reject_with), which replace the policy, header and all (or
    /// pass a [`RejectionHeader`] to `reject_with`). HTTP services only.
    ///
    /// ```
    /// use bloom_tower::{BloomFilter, BloomGuard, SharedFilter, key, reject::REJECTION_HEADER};
    /// use http::{Request, Response, StatusCode};
    /// use tower::{ServiceBuilder, ServiceExt, service_fn};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let filter = SharedFilter::<String>::new(BloomFilter::new(1_000, 0.01)?);
    /// filter.insert("ada");
    /// let guard = BloomGuard::new(filter, key::path_segment(1)).rejection_header(REJECTION_HEADER);
    /// let service = ServiceBuilder::new().layer(guard).service(service_fn(|_req: Request<String>| async {
    ///     Ok::<_, std::convert::Infallible>(Response::new(String::from("a user")))
    /// }));
    /// let get = |uri: &str| service.clone().oneshot(Request::get(uri).body(String::new()).unwrap());
    ///
    /// let rejected = get("/users/nobody").await?;
    /// assert_eq!(rejected.status(), StatusCode::NOT_FOUND);
    /// assert_eq!(rejected.headers()["x-bloom-guard"], "rejected");
    /// assert!(get("/users/ada").await?.headers().get("x-bloom-guard").is_none());
    /// # Ok(())
    /// # }
    /// ```
    pub fn rejection_header(
        self,
        name: http::HeaderName,
    ) -> BloomGuard<K, E, RejectionHeader<R>, M> {
        BloomGuard {
            filter: self.filter,
            extractor: self.extractor,
            on_reject: RejectionHeader::new(self.on_reject, name),
            on_missing_key: self.on_missing_key,
            reporting: self.reporting,
        }
    }

    /// What to do with requests that have no usable key: [`PassThrough`] (the default), a
    /// [`StatusCode`](http::StatusCode) to answer with, or a closure
    /// `FnMut(&Req) -> Option<Response>` (`None` passes through).
    pub fn on_missing_key<M2>(self, policy: M2) -> BloomGuard<K, E, R, M2> {
        BloomGuard {
            filter: self.filter,
            extractor: self.extractor,
            on_reject: self.on_reject,
            on_missing_key: policy,
            reporting: self.reporting,
        }
    }

    /// How many requests this guard has checked, passed, rejected, or found without a key.
    pub fn stats(&self) -> GuardStats {
        self.reporting.counters.snapshot()
    }

    /// The filter it guards with.
    pub fn filter(&self) -> &SharedFilter<K> {
        &self.filter
    }

    /// Its name, and the counters every service made from it (and from its clones) shares.
    #[cfg(feature = "admin")]
    pub(crate) fn counters(&self) -> (&str, Arc<GuardCounters>) {
        let reporting = &self.reporting;
        (&reporting.name, Arc::clone(&reporting.counters))
    }
}

impl<S, K: ?Sized, E, R, M> Layer<S> for BloomGuard<K, E, R, M>
where
    E: Clone,
    R: Clone,
    M: Clone,
{
    type Service = BloomGuardService<S, K, E, R, M>;

    fn layer(&self, inner: S) -> Self::Service {
        BloomGuardService {
            inner,
            filter: self.filter.clone(),
            extractor: self.extractor.clone(),
            on_reject: self.on_reject.clone(),
            on_missing_key: self.on_missing_key.clone(),
            reporting: Arc::new(self.reporting.clone()),
        }
    }
}

impl<K: ?Sized, E: Clone, R: Clone, M: Clone> Clone for BloomGuard<K, E, R, M> {
    fn clone(&self) -> Self {
        Self {
            filter: self.filter.clone(),
            extractor: self.extractor.clone(),
            on_reject: self.on_reject.clone(),
            on_missing_key: self.on_missing_key.clone(),
            reporting: self.reporting.clone(),
        }
    }
}

impl<K: ?Sized, E, R, M> fmt::Debug for BloomGuard<K, E, R, M> {
    /// Closures have no `Debug`: the extractor and policies are shown by type.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BloomGuard")
            .field("name", &self.reporting.name)
            .field("filter", &self.filter)
            .field("key", &std::any::type_name::<K>())
            .field("extractor", &std::any::type_name::<E>())
            .field("on_reject", &std::any::type_name::<R>())
            .field("on_missing_key", &std::any::type_name::<M>())
            .finish()
    }
}
