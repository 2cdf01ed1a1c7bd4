//! Where the guard finds the key in a request.
//!
//! A [`KeyExtractor`] turns a request into the key the filter is asked about, or into `None`
//! when the request carries no usable key (the guard then applies its
//! [missing-key policy](crate::reject::OnMissingKey)). Closures `Fn(&Req) -> Option<K>` are extractors,
//! and this module has the usual HTTP ones:
//!
//! | extractor | key for `GET /users/42?id=7` with `x-user: 9` |
//! | --- | --- |
//! | [`path_param("id")`](path_param) on route `/users/{id}` | `"42"` |
//! | [`path_segment(1)`](path_segment) | `"42"` |
//! | [`route("/users/{id}", "id")`](route), around the router | `"42"` |
//! | [`query("id")`](query) | `"7"` |
//! | [`header(x_user)`](header) | `b"9"` |
//! | any of them `.parse::<u64>()` | `42u64` (etc.); not a number → missing key |
//!
//! Text keys are percent-decoded (the query also turns `+` into a space), so they are the same
//! bytes a handler sees through axum's `Path`/`Query` and the same key as the `&str` you
//! [`insert`](crate::SharedFilter::insert). An empty value counts as missing. Numeric ids you
//! insert as integers must be extracted with `.parse::<u64>()` (or whichever type you insert):
//! `"42"` and `42u64` are different keys, see [`bloom_core::Key`].
//!
//! A query parameter or header given more than once with values that differ (an empty one
//! beside a non-empty one included) is **ambiguous**: handlers disagree on which value counts
//! (the first, the last, an error), so no single value may stand for the request.
//! [`KeyExtractor::extract_checked`] says so ([`Extracted::Ambiguous`]) and the guard answers
//! such a request itself, without looking any value up and without calling its service;
//! [`KeyExtractor::extract`] gives `None` for it. The same value repeated is that value. A path
//! has one segment per position, so the path extractors are never ambiguous.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;
use std::str::FromStr;

use bloom_core::Key;
use http::{HeaderName, Request};
use percent_encoding::percent_decode_str;

/// Finds a request's key.
///
/// Implemented for closures `Fn(&Req) -> Option<K>` where `K` is an owned [`Key`] (a closure's
/// result cannot borrow from the request; the ready-made extractors here can, and allocate
/// nothing for keys without escapes). Return `None` when the request has no usable key.
///
/// The guard calls [`extract_checked`](Self::extract_checked), which also tells a request
/// whose key is [ambiguous](Extracted::Ambiguous) from one without a key; its default is
/// `extract`'s answer, never ambiguous. An extractor that reads a value a request can carry
/// more than once implements both.
///
/// ```
/// use bloom_tower::KeyExtractor;
/// use http::Request;
///
/// // The request *is* the key (a non-HTTP service), by closure…
/// let by_closure = |id: &u64| Some(*id);
/// assert_eq!(by_closure.extract(&7), Some(7));
///
/// // …or an HTTP request's tenant header, upper-cased.
/// let tenant = |req: &Request<()>| {
///     Some(req.headers().get("x-tenant")?.to_str().ok()?.to_ascii_uppercase())
/// };
/// let req = Request::builder().header("x-tenant", "acme").body(()).unwrap();
/// assert_eq!(tenant.extract(&req).as_deref(), Some("ACME"));
/// ```
pub trait KeyExtractor<Req> {
    /// The key; it may borrow from the request or from the extractor.
    type Key<'a>: Key
    where
        Self: 'a,
        Req: 'a;

    /// The request's key, or `None` if it has none or its key is ambiguous.
    fn extract<'a>(&'a self, req: &'a Req) -> Option<Self::Key<'a>>;

    /// The request's key, or whether it has none or an ambiguous one (what the guard calls).
    #[inline]
    fn extract_checked<'a>(&'a self, req: &'a Req) -> Extracted<Self::Key<'a>> {
        self.extract(req).map_or(Extracted::Missing, Extracted::Key)
    }
}

/// What [`KeyExtractor::extract_checked`] found in a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Extracted<K> {
    /// The key: the one value the request carries for it.
    Key(K),
    /// No usable key: the guard applies its [missing-key policy](crate::reject::OnMissingKey).
    Missing,
    /// The value is given more than once and the values differ, an empty one beside a
    /// non-empty one included: the request names no single key. The guard answers it without
    /// looking up any of the values and without calling its service
    /// ([`OnReject::on_ambiguous_key`](crate::reject::OnReject::on_ambiguous_key), `400 Bad
    /// Request` by default), whatever its missing-key policy.
    Ambiguous,
}

impl<K> Extracted<K> {
    /// The key, if there is exactly one; `None` when missing or ambiguous.
    #[inline]
    pub fn key(self) -> Option<K> {
        match self {
            Self::Key(key) => Some(key),
            Self::Missing | Self::Ambiguous => None,
        }
    }

    /// The key mapped through `f`; missing and ambiguous stay as they are.
    #[inline]
    pub fn and_then<T>(self, f: impl FnOnce(K) -> Option<T>) -> Extracted<T> {
        match self {
            Self::Key(key) => f(key).map_or(Extracted::Missing, Extracted::Key),
            Self::Missing => Extracted::Missing,
            Self::Ambiguous => Extracted::Ambiguous,
        }
    }
}

/// The one value of `values` (a parameter's or header's, in request order): `Missing` if there
/// is none or it is empty, `Ambiguous` if two of them differ (an empty one beside a non-empty
/// one included). Every value is read: the last may be the one a handler uses. Test:
/// `query_and_header_keys_given_twice_with_different_values_are_ambiguous`.
fn only_value<V>(values: impl IntoIterator<Item = V>, is_empty: impl Fn(&V) -> bool) -> Extracted<V>
where
    V: PartialEq,
{
    let mut values = values.into_iter();
    let Some(first) = values.next() else {
        return Extracted::Missing;
    };
    for value in values {
        if value != first {
            return Extracted::Ambiguous;
        }
    }
    if is_empty(&first) {
        Extracted::Missing
    } else {
        Extracted::Key(first)
    }
}

impl<Req, F, K> KeyExtractor<Req> for F
where
    F: Fn(&Req) -> Option<K>,
    K: Key,
{
    type Key<'a>
        = K
    where
        Self: 'a,
        Req: 'a;

    #[inline]
    fn extract<'a>(&'a self, req: &'a Req) -> Option<K> {
        self(req)
    }
}

/// A key taken from the text of a request: a path segment or a query value, percent-decoded.
///
/// Borrowed from the request unless decoding changed it. As a [`Key`] it is its UTF-8 bytes,
/// the same key as the equal `&str` or `String`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TextKey<'a>(Cow<'a, str>);

impl TextKey<'_> {
    /// The decoded text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Deref for TextKey<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for TextKey<'_> {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Key for TextKey<'_> {
    #[inline]
    fn key_bytes(&self) -> impl AsRef<[u8]> {
        self.0.as_bytes()
    }
}

impl fmt::Debug for TextKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// `Self` is a key of type `K`: it hashes to the same bytes as the `K` it stands for.
///
/// This is what makes a filter's key type part of its handle: a
/// [`SharedFilter<K>`](crate::SharedFilter) is asked about, and filled with, only values that
/// are `KeyFor<K>`, and a [`BloomGuard`](crate::BloomGuard) whose extractor yields anything
/// else does not compile. Every key is a key for its own type (and a reference to it); text
/// ([`TextKey`], `&str`, `String`) is a key for both `String` and `str`, bytes for both
/// `Vec<u8>` and `[u8]`; and every key is a key for [`AnyKey`], the untyped filter.
///
/// Integers of different types are different keys even where their bytes agree: a filter of
/// `i64` order ids is not asked about a `u64` (or `"42"`), whatever the extractor.
///
/// ```
/// use bloom_tower::key::KeyFor;
///
/// fn holds<K: ?Sized, Q: KeyFor<K> + ?Sized>(_: &Q) {}
/// holds::<i64, _>(&42i64);
/// holds::<String, _>("ada");
/// holds::<bloom_tower::key::AnyKey, _>(&42u64);
/// ```
///
/// ```compile_fail
/// use bloom_tower::key::KeyFor;
///
/// fn holds<K: ?Sized, Q: KeyFor<K> + ?Sized>(_: &Q) {}
/// holds::<i64, _>("42"); // text is not an i64 key
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a key of type `{K}`",
    label = "this yields `{Self}` keys, but the filter holds `{K}` keys",
    note = "a filter of `{K}` keys is only asked about `{K}` values: parse text keys with `.parse::<{K}>()`, or share the filter as `SharedFilter<AnyKey>` to accept any key"
)]
pub trait KeyFor<K: ?Sized>: Key {}

/// The key type of an untyped filter: a [`SharedFilter<AnyKey>`](crate::SharedFilter) accepts
/// every [`Key`], as a filter did before key types existed. Choose it on purpose (a filter of
/// mixed keys, a tool that handles any filter); a typed filter can be seen untyped with
/// [`SharedFilter::untyped`](crate::SharedFilter::untyped).
#[derive(Debug)]
pub enum AnyKey {}

impl<T: Key + ?Sized> KeyFor<T> for T {}
impl<T: Key + ?Sized> KeyFor<T> for &T {}
impl<T: Key + ?Sized> KeyFor<AnyKey> for T {}

macro_rules! keys_for {
    ($target:ty: $($key:ty),*) => {$(
        impl KeyFor<$target> for $key {}
    )*};
}
keys_for!(String: str, &str, Box<str>, TextKey<'_>);
keys_for!(str: String, &String, Box<str>, TextKey<'_>);
keys_for!(Vec<u8>: [u8], &[u8], Box<[u8]>);
keys_for!([u8]: Vec<u8>, &Vec<u8>, Box<[u8]>);

/// The first `/`-separated segment of `path` and what follows the slash. A byte loop: for
/// segments this short it beats the general `str::split_once` searcher.
#[inline]
fn first_segment(path: &str) -> (&str, &str) {
    match path.bytes().position(|byte| byte == b'/') {
        Some(slash) => (&path[..slash], &path[slash + 1..]),
        None => (path, ""),
    }
}

/// Percent-decodes one path segment; `None` if it is empty or not UTF-8 once decoded (axum's
/// `Path` rejects those too).
fn decode_segment(raw: &str) -> Option<TextKey<'_>> {
    if raw.is_empty() {
        None
    } else if !raw.bytes().any(|byte| byte == b'%') {
        // The common case, and already valid UTF-8: skip the decoder's validation pass.
        Some(TextKey(Cow::Borrowed(raw)))
    } else {
        percent_decode_str(raw).decode_utf8().ok().map(TextKey)
    }
}

/// The request is the key: for non-HTTP services whose request type is itself a [`Key`]
/// (a user id, a `String` name, …).
///
/// ```
/// use bloom_tower::{KeyExtractor, key};
///
/// assert_eq!(key::identity().extract(&42u64), Some(&42u64));
/// ```
pub fn identity() -> Identity {
    Identity
}

/// Extractor returned by [`identity`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Identity;

impl<Req: Key> KeyExtractor<Req> for Identity {
    type Key<'a>
        = &'a Req
    where
        Req: 'a;

    #[inline]
    fn extract<'a>(&'a self, req: &'a Req) -> Option<&'a Req> {
        Some(req)
    }
}

/// Implements [`KeyExtractor`] for `Request<B>`, with [`TextKey`] keys, for `$extractor`, whose
/// inherent `find` extracts the key: an `Option` (`None`: missing) or an [`Extracted`].
macro_rules! text_key_extractor {
    ($extractor:ty) => {
        impl<B> KeyExtractor<Request<B>> for $extractor {
            type Key<'a>
                = TextKey<'a>
            where
                B: 'a;

            #[inline]
            fn extract<'a>(&'a self, req: &'a Request<B>) -> Option<TextKey<'a>> {
                Found::key(self.find(req))
            }

            #[inline]
            fn extract_checked<'a>(&'a self, req: &'a Request<B>) -> Extracted<TextKey<'a>> {
                Found::extracted(self.find(req))
            }
        }
    };
}

/// What an extractor's inherent `find` returns, read as [`KeyExtractor::extract`] and
/// [`KeyExtractor::extract_checked`] answer.
trait Found<K> {
    /// The key, if there is exactly one.
    fn key(self) -> Option<K>;
    /// The key, or whether it is missing or ambiguous.
    fn extracted(self) -> Extracted<K>;
}

/// A key, or none: never ambiguous.
impl<K> Found<K> for Option<K> {
    #[inline]
    fn key(self) -> Option<K> {
        self
    }

    #[inline]
    fn extracted(self) -> Extracted<K> {
        self.map_or(Extracted::Missing, Extracted::Key)
    }
}

impl<K> Found<K> for Extracted<K> {
    #[inline]
    fn key(self) -> Option<K> {
        Extracted::key(self)
    }

    #[inline]
    fn extracted(self) -> Extracted<K> {
        self
    }
}

/// The `index`-th segment of the request path, counting from 0 after the leading `/`:
/// for `/users/42/orders`, segment 0 is `users`, 1 is `42`.
///
/// Works with any `http::Request` (plain hyper, any router), and under `Router::layer` as
/// well as `route_layer`. An absent or empty segment is a missing key.
///
/// ```
/// use bloom_tower::{KeyExtractor, key};
/// use http::Request;
///
/// let req = Request::get("/users/j%C3%BCrgen/orders").body(()).unwrap();
/// assert_eq!(key::path_segment(1).extract(&req).as_deref(), Some("jürgen"));
/// assert!(key::path_segment(3).extract(&req).is_none());
/// ```
pub fn path_segment(index: usize) -> PathSegment {
    PathSegment { index }
}

/// Extractor returned by [`path_segment`].
#[derive(Clone, Copy, Debug)]
pub struct PathSegment {
    index: usize,
}

impl PathSegment {
    /// The segment, percent-decoded; `None` if it is absent or empty.
    #[inline]
    fn find<'a, B>(&'a self, req: &'a Request<B>) -> Option<TextKey<'a>> {
        let path = req.uri().path();
        let mut rest = path.strip_prefix('/').unwrap_or(path);
        for _ in 0..self.index {
            if rest.is_empty() {
                return None;
            }
            rest = first_segment(rest).1;
        }
        decode_segment(first_segment(rest).0)
    }
}

text_key_extractor!(PathSegment);

/// The value of query parameter `name`, form-decoded (`+` is a space, `%XX` escapes
/// decoded). Absent or empty is a missing key.
///
/// Rule: a parameter given more than once is its value only if every occurrence decodes to the
/// same text; values that differ (`?id=&id=999`, `?id=999&id=5`) are an
/// [ambiguous](Extracted::Ambiguous) key, which the guard neither looks up nor lets through,
/// since a handler may read any of them (a map keeps the last, axum's `Query` of a struct
/// refuses the request). Tests: `query_finds_the_one_value_and_form_decodes` and
/// `query_and_header_keys_given_twice_with_different_values_are_ambiguous` here, and
/// `tests/ambiguous_keys.rs` over TCP.
///
/// ```
/// use bloom_tower::key::{self, Extracted};
/// use bloom_tower::KeyExtractor;
/// use http::Request;
///
/// let req = Request::get("/search?user=ada+lovelace&page=2").body(()).unwrap();
/// assert_eq!(key::query("user").extract(&req).as_deref(), Some("ada lovelace"));
/// assert_eq!(key::query("page").parse::<u32>().extract(&req), Some(2));
///
/// let twice = Request::get("/users?id=&id=999").body(()).unwrap();
/// assert!(matches!(key::query("id").extract_checked(&twice), Extracted::Ambiguous));
/// assert_eq!(key::query("id").extract(&twice), None);
/// ```
pub fn query(name: impl Into<Cow<'static, str>>) -> Query {
    Query { name: name.into() }
}

/// Extractor returned by [`query`].
#[derive(Clone, Debug)]
pub struct Query {
    name: Cow<'static, str>,
}

impl Query {
    /// The parameter's one value, or missing, or ambiguous.
    fn find<'a, B>(&'a self, req: &'a Request<B>) -> Extracted<TextKey<'a>> {
        let Some(query) = req.uri().query() else {
            return Extracted::Missing;
        };
        let values = form_urlencoded::parse(query.as_bytes())
            .filter(|(name, _)| *name == self.name)
            .map(|(_, value)| TextKey(value));
        only_value(values, |value| value.is_empty())
    }
}

text_key_extractor!(Query);

/// The parameter `param` of the route `template` (axum's syntax: `/orders/{id}`, or
/// `/files/{*path}` for the rest of the path), when the request's path matches it; a missing
/// key for every other path. Percent-decoded like [`path_param`].
///
/// Made for a guard **around** a whole router (`BloomGuard::new(..).layer(router)`, or
/// `ServiceBuilder` / `axum::serve` on the result) that still names one route: it matches the
/// template itself (with [`matchit`], the router axum uses), so a rejection costs neither
/// axum's routing nor what a `route_layer` adds, while requests for other routes have no key and
/// pass through (keep the default [`PassThrough`](crate::reject::PassThrough) missing-key
/// policy there). The method is not looked at: a `DELETE /orders/{id}` is checked like a `GET`.
///
/// ```
/// use axum::{Router, routing::get};
/// use bloom_tower::{BloomFilter, BloomGuard, SharedFilter, key};
/// use http::{Request, StatusCode};
/// use tower::{Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let orders = SharedFilter::<u64>::new(BloomFilter::new(1_000, 0.01)?);
/// orders.insert(&7u64);
/// let router: Router = Router::new()
///     .route("/orders/{id}", get(|| async { "an order" }))
///     .route("/health", get(|| async { "ok" }));
/// let guarded = BloomGuard::new(orders.clone(), key::route("/orders/{id}", "id")?.parse::<u64>())
///     .layer(router);
///
/// let status = |uri: &str| {
///     let request = Request::get(uri).body(axum::body::Body::empty()).unwrap();
///     let guarded = guarded.clone();
///     async move { guarded.oneshot(request).await.unwrap().status() }
/// };
/// assert_eq!(status("/orders/7").await, StatusCode::OK);
/// let absent = (8..).find(|id| !orders.contains(id)).unwrap();
/// assert_eq!(status(&format!("/orders/{absent}")).await, StatusCode::NOT_FOUND); // the guard
/// assert_eq!(status("/health").await, StatusCode::OK); // another route: no key, passed
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// [`RouteError`] if `template` is not a valid route or has no parameter `param`.
pub fn route(template: &str, param: impl Into<Cow<'static, str>>) -> Result<Route, RouteError> {
    let param = param.into();
    let mut router = matchit::Router::new();
    router.insert(template, ()).map_err(|error| {
        RouteError(RouteRepr::Template {
            template: template.to_owned(),
            reason: error.to_string(),
        })
    })?;
    let names = template
        .split('/')
        .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| name.strip_prefix('*').unwrap_or(name));
    if !names.into_iter().any(|name| name == param) {
        return Err(RouteError(RouteRepr::NoSuchParameter {
            template: template.to_owned(),
            param: param.into_owned(),
        }));
    }
    Ok(Route {
        router: std::sync::Arc::new(router),
        param,
    })
}

/// Extractor returned by [`route`].
#[derive(Clone)]
pub struct Route {
    router: std::sync::Arc<matchit::Router<()>>,
    param: Cow<'static, str>,
}

impl fmt::Debug for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Route")
            .field("param", &self.param)
            .finish_non_exhaustive()
    }
}

/// Why [`route`] refused a template: not a valid route, or no parameter of that name. The
/// message says which.
#[derive(Debug, Clone, thiserror::Error)]
#[error(transparent)]
pub struct RouteError(RouteRepr);

#[derive(Debug, Clone, thiserror::Error)]
enum RouteRepr {
    #[error("{template:?} is not a valid route template: {reason}")]
    Template { template: String, reason: String },
    #[error("the route template {template:?} has no parameter {{{param}}}")]
    NoSuchParameter { template: String, param: String },
}

impl Route {
    /// The parameter, percent-decoded; `None` if the path does not match the template.
    #[inline]
    fn find<'a, B>(&'a self, req: &'a Request<B>) -> Option<TextKey<'a>> {
        let matched = self.router.at(req.uri().path()).ok()?;
        decode_segment(matched.params.get(&*self.param)?)
    }
}

text_key_extractor!(Route);

/// The value of header `name`, as raw bytes: a key for a `SharedFilter<Vec<u8>>`. For a
/// filter of text (`SharedFilter<String>`) use `.parse::<String>()`, which also turns a value
/// that is not UTF-8 into a missing key; for numbers, `.parse::<u64>()` and so on. Absent or
/// empty is a missing key.
///
/// Rule, as for [`query`]: a header sent on several field lines is its value only if every
/// line carries the same bytes; lines that differ (an empty one beside a non-empty one
/// included) are an [ambiguous](Extracted::Ambiguous) key, since `HeaderMap::get` reads the
/// first line while proxies and other frameworks join them or keep the last. One line holding
/// a comma-separated list is one value, the whole line. Tests:
/// `query_and_header_keys_given_twice_with_different_values_are_ambiguous` here, and
/// `tests/ambiguous_keys.rs` over TCP.
///
/// ```
/// use bloom_tower::{KeyExtractor, key};
/// use http::Request;
///
/// use http::header::HeaderName;
///
/// let req = Request::get("/").header("x-api-key", "k-123").body(()).unwrap();
/// let api_key = key::header(HeaderName::from_static("x-api-key"));
/// assert_eq!(api_key.extract(&req), Some(&b"k-123"[..]));
/// ```
pub fn header(name: HeaderName) -> Header {
    Header { name }
}

/// Extractor returned by [`header`].
#[derive(Clone, Debug)]
pub struct Header {
    name: HeaderName,
}

impl<B> KeyExtractor<Request<B>> for Header {
    type Key<'a>
        = &'a [u8]
    where
        B: 'a;

    #[inline]
    fn extract<'a>(&'a self, req: &'a Request<B>) -> Option<&'a [u8]> {
        self.extract_checked(req).key()
    }

    #[inline]
    fn extract_checked<'a>(&'a self, req: &'a Request<B>) -> Extracted<&'a [u8]> {
        let values = req.headers().get_all(&self.name).iter();
        only_value(values.map(http::HeaderValue::as_bytes), |value| {
            value.is_empty()
        })
    }
}

/// An axum route's path parameter, by name: `path_param("id")` on `/users/{id}`.
///
/// It reads the route that axum matched ([`MatchedPath`](axum::extract::MatchedPath)), so
/// add the guard with [`Router::route_layer`](axum::Router::route_layer) (or `Router::layer`,
/// which also wraps each route); a guard wrapped around a whole `Router` from the outside
/// runs before routing, finds no matched route and treats every request as having no key
/// (use [`path_segment`] there). Whole-segment parameters `{name}` and wildcards `{*name}`
/// are supported, also inside nested routers; the value is percent-decoded as axum's `Path`
/// decodes it.
///
/// ```
/// use axum::{Router, routing::get};
/// use bloom_tower::{BloomFilter, BloomGuard, SharedFilter, key};
///
/// // Ids are inserted as integers: parse the path's text into the same type.
/// let users = SharedFilter::<u64>::new(BloomFilter::new(1_000, 0.01).unwrap());
/// // Usernames are inserted as text: the path's text is the key.
/// let names = SharedFilter::<String>::new(BloomFilter::new(1_000, 0.01).unwrap());
/// let app: Router = Router::new()
///     .route("/users/{id}", get(|| async { "a user" }))
///     .route_layer(BloomGuard::new(users, key::path_param("id").parse::<u64>()))
///     .route("/by-name/{name}", get(|| async { "a user" }))
///     .route_layer(BloomGuard::new(names, key::path_param("name")));
/// ```
///
/// Without `.parse`, a guard over integer ids does not compile (the text `"42"` and the
/// integer `42` are different keys, and such a guard would reject every request):
///
/// ```compile_fail
/// use axum::{Router, routing::get};
/// use bloom_tower::{BloomFilter, BloomGuard, SharedFilter, key};
///
/// let users = SharedFilter::<u64>::new(BloomFilter::new(1_000, 0.01).unwrap());
/// let app: Router = Router::new()
///     .route("/users/{id}", get(|| async { "a user" }))
///     .route_layer(BloomGuard::new(users, key::path_param("id")));
/// ```
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub fn path_param(name: impl Into<Cow<'static, str>>) -> PathParam {
    PathParam { name: name.into() }
}

/// Extractor returned by [`path_param`].
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
#[derive(Clone, Debug)]
pub struct PathParam {
    name: Cow<'static, str>,
}

#[cfg(feature = "axum")]
impl PathParam {
    /// Whether `template_segment` is this parameter: `{name}` (one segment) or `{*name}`
    /// (the rest of the path).
    fn matches(&self, template_segment: &str) -> Option<Capture> {
        let inner = template_segment.strip_prefix('{')?.strip_suffix('}')?;
        match inner.strip_prefix('*') {
            Some(name) if name == self.name => Some(Capture::Rest),
            None if inner == self.name => Some(Capture::Segment),
            _ => None,
        }
    }

    /// The parameter, percent-decoded, where the request's route template has it; `None` if
    /// the request was not routed or its template has no such parameter.
    fn find<'a, B>(&'a self, req: &'a Request<B>) -> Option<TextKey<'a>> {
        use axum::extract::{MatchedPath, NestedPath};

        let template = req.extensions().get::<MatchedPath>()?.as_str();
        // Inside a nested router the URI has the nest prefix stripped while the matched path
        // keeps it; the `NestedPath` axum sets alongside says how many segments to skip.
        let nested_segments = req
            .extensions()
            .get::<NestedPath>()
            .map_or(0, |nested| segments(nested.as_str()).count());
        let mut template = segments(template).skip(nested_segments);
        let path = req.uri().path();
        let mut rest = path.strip_prefix('/').unwrap_or(path);
        loop {
            let template_segment = template.next()?;
            let (segment, after) = first_segment(rest);
            match self.matches(template_segment) {
                Some(Capture::Segment) => return decode_segment(segment),
                Some(Capture::Rest) => return decode_segment(rest),
                None => rest = after,
            }
        }
    }
}

#[cfg(feature = "axum")]
enum Capture {
    Segment,
    Rest,
}

#[cfg(feature = "axum")]
text_key_extractor!(PathParam);

/// The non-empty segments of a route template.
#[cfg(feature = "axum")]
fn segments(template: &str) -> impl Iterator<Item = &str> {
    template.split('/').filter(|segment| !segment.is_empty())
}

/// An extractor whose text key is parsed into `T` (e.g. `u64`, or `uuid::Uuid` with the
/// `uuid` feature) before the lookup; text that does not parse is a missing key (the guard
/// warns when most requests have none), an [ambiguous](Extracted::Ambiguous) text stays
/// ambiguous (values are compared as text, before parsing). Made by `.parse::<T>()` on the
/// HTTP extractors.
pub struct Parse<E, T> {
    inner: E,
    _key: PhantomData<fn() -> T>,
}

impl<E: Clone, T> Clone for Parse<E, T> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            _key: PhantomData,
        }
    }
}

impl<E: fmt::Debug, T> fmt::Debug for Parse<E, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Parse")
            .field("inner", &self.inner)
            .field("into", &std::any::type_name::<T>())
            .finish()
    }
}

macro_rules! parse_adapter {
    ($extractor:ty, $text:ident) => {
        impl $extractor {
            /// Parses the key into `T` (the type your keys are inserted as); text that does
            /// not parse is a missing key.
            pub fn parse<T>(self) -> Parse<Self, T>
            where
                T: FromStr + Key,
            {
                Parse {
                    inner: self,
                    _key: PhantomData,
                }
            }
        }

        impl<B, T> KeyExtractor<Request<B>> for Parse<$extractor, T>
        where
            T: FromStr + Key,
        {
            type Key<'a>
                = T
            where
                B: 'a,
                T: 'a;

            #[inline]
            fn extract<'a>(&'a self, req: &'a Request<B>) -> Option<T> {
                self.extract_checked(req).key()
            }

            #[inline]
            fn extract_checked<'a>(&'a self, req: &'a Request<B>) -> Extracted<T> {
                self.inner
                    .extract_checked(req)
                    .and_then(|key| $text(&key)?.parse().ok())
            }
        }
    };
}

fn text<'k>(key: &'k TextKey<'_>) -> Option<&'k str> {
    Some(key.as_str())
}

fn utf8<'k>(key: &&'k [u8]) -> Option<&'k str> {
    std::str::from_utf8(key).ok()
}

parse_adapter!(PathSegment, text);
parse_adapter!(Query, text);
parse_adapter!(Route, text);
parse_adapter!(Header, utf8);
#[cfg(feature = "axum")]
parse_adapter!(PathParam, text);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_extracts_its_parameter_only_from_matching_paths() {
        let orders = route("/orders/{id}", "id").unwrap();
        let key = |uri: &str| orders.extract(&get(uri)).map(|k| k.as_str().to_owned());
        assert_eq!(key("/orders/42").as_deref(), Some("42"));
        assert_eq!(key("/orders/a%20b").as_deref(), Some("a b"));
        assert_eq!(key("/orders/42?x=1").as_deref(), Some("42"));
        for other in ["/orders", "/orders/", "/orders/42/items", "/users/42", "/"] {
            assert_eq!(key(other), None, "{other}");
        }
        let files = route("/files/{*path}", "path").unwrap();
        let request = get("/files/a/b%2Fc");
        assert_eq!(files.extract(&request).unwrap().as_str(), "a/b/c");
        let ids = route("/orders/{id}", "id").unwrap().parse::<u64>();
        assert_eq!(ids.extract(&get("/orders/7")), Some(7));
        assert_eq!(ids.extract(&get("/orders/seven")), None);
    }

    #[test]
    fn a_bad_route_template_is_a_clear_error() {
        let missing = route("/orders/{id}", "order_id").unwrap_err().to_string();
        assert_eq!(
            missing,
            r#"the route template "/orders/{id}" has no parameter {order_id}"#
        );
        let invalid = route("/orders/{id", "id").unwrap_err().to_string();
        assert!(
            invalid.starts_with(r#""/orders/{id" is not a valid route template: "#),
            "{invalid}"
        );
    }

    fn get(uri: &str) -> Request<()> {
        Request::get(uri).body(()).unwrap()
    }

    #[test]
    fn path_segment_counts_after_the_leading_slash_and_decodes() {
        let req = get("/users/a%2Fb/x");
        assert_eq!(path_segment(0).extract(&req).as_deref(), Some("users"));
        assert_eq!(path_segment(1).extract(&req).as_deref(), Some("a/b"));
        assert!(matches!(
            path_segment(1).extract(&get("/users/42")),
            Some(TextKey(Cow::Borrowed("42")))
        ));
        assert!(path_segment(1).extract(&get("/users/")).is_none());
        assert!(path_segment(1).extract(&get("/users/%FF")).is_none());
        assert_eq!(
            path_segment(1).parse::<u64>().extract(&get("/u/42")),
            Some(42)
        );
        assert_eq!(path_segment(1).parse::<u64>().extract(&get("/u/4x")), None);
    }

    #[test]
    fn query_finds_the_one_value_and_form_decodes() {
        let req = get("/s?a=1&user=ada%20l+x&user=ada+l%20x&empty=&empty=");
        assert_eq!(query("user").extract(&req).as_deref(), Some("ada l x"));
        assert_eq!(
            query("user").extract_checked(&req).key().as_deref(),
            Some("ada l x")
        );
        assert!(query("empty").extract(&req).is_none());
        assert!(matches!(
            query("empty").extract_checked(&req),
            Extracted::Missing
        ));
        assert!(query("nope").extract(&req).is_none());
        assert!(query("a").extract(&get("/s")).is_none());
    }

    #[test]
    fn query_and_header_keys_given_twice_with_different_values_are_ambiguous() {
        let ambiguous = |uri: &str| {
            let req = get(uri);
            let text = matches!(query("id").extract_checked(&req), Extracted::Ambiguous);
            let parsed = query("id").parse::<u64>().extract_checked(&req);
            assert_eq!(text, parsed == Extracted::Ambiguous, "{uri}");
            if text {
                assert!(query("id").extract(&req).is_none(), "{uri}");
            }
            text
        };
        for uri in [
            "/u?id=&id=999",
            "/u?id=999&id=",
            "/u?id=999&id=5",
            "/u?id=5&x=1&id=999",
            "/u?id=5&%69d=6",
            "/u?id=5&id=5&id=6",
            "/u?id=5&id=05",
        ] {
            assert!(ambiguous(uri), "{uri}");
        }
        for uri in [
            "/u?id=5&id=5",
            "/u?id=5&id=%35",
            "/u?id=&id=",
            "/u?id=5&ids=6",
        ] {
            assert!(!ambiguous(uri), "{uri}");
        }
        assert_eq!(
            query("id")
                .parse::<u64>()
                .extract_checked(&get("/u?id=5&id=5")),
            Extracted::Key(5)
        );

        let name = HeaderName::from_static("x-id");
        let with = |values: &[&str]| {
            let mut req = Request::get("/");
            for value in values {
                req = req.header("x-id", *value);
            }
            req.body(()).unwrap()
        };
        let id = header(name.clone());
        for values in [&["", "7"][..], &["7", ""], &["7", "8"], &["7", "7", "8"]] {
            let req = with(values);
            assert_eq!(id.extract_checked(&req), Extracted::Ambiguous, "{values:?}");
            assert_eq!(id.extract(&req), None, "{values:?}");
            assert_eq!(
                header(name.clone()).parse::<u64>().extract_checked(&req),
                Extracted::Ambiguous
            );
        }
        assert_eq!(
            id.extract_checked(&with(&["7", "7"])),
            Extracted::Key(&b"7"[..])
        );
        assert_eq!(
            id.extract_checked(&with(&["7, 8"])),
            Extracted::Key(&b"7, 8"[..])
        );
        assert_eq!(id.extract_checked(&with(&["", ""])), Extracted::Missing);
        assert_eq!(id.extract_checked(&with(&[])), Extracted::Missing);
    }

    #[test]
    fn header_gives_the_raw_bytes() {
        let req = Request::get("/")
            .header("x-id", "42")
            .header("x-empty", "")
            .body(())
            .unwrap();
        let name = HeaderName::from_static("x-id");
        assert_eq!(header(name.clone()).extract(&req), Some(&b"42"[..]));
        assert_eq!(header(name).parse::<u64>().extract(&req), Some(42));
        assert!(
            header(HeaderName::from_static("x-empty"))
                .extract(&req)
                .is_none()
        );
    }

    #[test]
    fn text_keys_are_the_same_key_as_str() {
        let filter = bloom_core::BloomFilter::new(100, 0.01).unwrap();
        filter.insert("j\u{fc}rgen");
        let req = get("/users/j%C3%BCrgen");
        assert!(filter.contains(&path_segment(1).extract(&req).unwrap()));
    }

    #[cfg(feature = "axum")]
    #[test]
    fn path_param_needs_a_matched_route() {
        // Outside a router (a guard wrapped around the whole router) there is no key. The
        // routed cases, nesting included, are in tests/axum_server.rs: axum's `MatchedPath`
        // has no public constructor.
        assert!(path_param("id").extract(&get("/users/1")).is_none());
        let param = path_param("id");
        assert!(param.matches("{id}").is_some());
        assert!(matches!(param.matches("{*id}"), Some(Capture::Rest)));
        assert!(param.matches("{idx}").is_none());
        assert!(param.matches("id").is_none());
    }
}
