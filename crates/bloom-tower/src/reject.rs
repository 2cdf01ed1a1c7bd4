//! What the guard answers instead of calling the inner service.
//!
//! Both answers are *responses* of the inner service's type, never errors: an `Err` from an
//! HTTP service makes hyper drop the connection. [`OnReject`] builds the answer for a key that
//! is definitely absent ([`NotFound`] by default) and for an
//! [ambiguous](crate::key::Extracted::Ambiguous) one (`400 Bad Request` by default);
//! [`OnMissingKey`] decides what happens to a request with no usable key ([`PassThrough`] by
//! default, or a status such as `StatusCode::BAD_REQUEST`).
//!
//! Rule: a request whose key is ambiguous never reaches the inner service and is never
//! answered from one of its values. The guard answers it with
//! [`OnReject::on_ambiguous_key`]; if that has no answer (a closure or your own `OnReject`
//! without one), with the missing-key policy's answer; if that passes the request, with
//! [`OnReject::on_reject`] given a key that [`is_ambiguous`](RejectedKey::is_ambiguous) (and
//! a WARN, once). Tests: `tests/ambiguous_keys.rs`.

use std::fmt;

use http::header::{HeaderName, HeaderValue};
use http::{Request, Response, StatusCode};

/// The key of a rejected request, as the bytes the filter hashed.
///
/// Its `Debug` does not show the key: keys can be personal data and end up in logs.
#[derive(Clone, Copy)]
pub struct RejectedKey<'a> {
    bytes: &'a [u8],
    ambiguous: bool,
}

impl<'a> RejectedKey<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self {
            bytes,
            ambiguous: false,
        }
    }

    /// The "key" of a request whose key is [ambiguous](crate::key::Extracted::Ambiguous): no
    /// bytes.
    pub(crate) fn ambiguous() -> Self {
        Self {
            bytes: &[],
            ambiguous: true,
        }
    }

    /// The key's bytes ([`bloom_core::Key::key_bytes`]); empty if [ambiguous](Self::is_ambiguous).
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// `true` when the request named no single key (a value given more than once, the values
    /// differing) rather than an absent one: answer it as a bad request, not as "not found".
    /// Only an [`OnReject`] with no [`on_ambiguous_key`](OnReject::on_ambiguous_key) answer,
    /// on a guard whose missing-key policy passes requests, is ever called with such a key.
    pub fn is_ambiguous(&self) -> bool {
        self.ambiguous
    }

    /// The key as text, if it is UTF-8 (text keys from paths, queries and headers are).
    pub fn to_str(&self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes).ok()
    }
}

impl<'a> RejectedKey<'a> {
    /// Text as text, anything else (an integer key's bytes) as hex.
    pub(crate) fn for_log(self) -> impl fmt::Display + 'a {
        struct ForLog<'a>(&'a [u8]);
        impl fmt::Display for ForLog<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match std::str::from_utf8(self.0) {
                    Ok(text) => f.write_str(text),
                    Err(_) => {
                        f.write_str("0x")?;
                        self.0.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
                    }
                }
            }
        }
        ForLog(self.bytes)
    }
}

impl fmt::Debug for RejectedKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.ambiguous {
            f.write_str("RejectedKey(<ambiguous>)")
        } else {
            write!(f, "RejectedKey(<{} bytes>)", self.bytes.len())
        }
    }
}

/// Builds the response for a request whose key is definitely absent, and for one whose key is
/// [ambiguous](crate::key::Extracted::Ambiguous).
///
/// Implemented for [`NotFound`] (the default), for [`StatusCode`] (that status, its reason as
/// a plain-text body; both answer an ambiguous key with `400 Bad Request`) and for closures
/// `FnMut(RejectedKey<'_>) -> Res`, which [`BloomGuard::on_reject`](crate::BloomGuard::on_reject)
/// takes (they have no answer of their own for an ambiguous key: see the [rule](crate::reject)).
/// Implement it yourself to look at the request as well (to negotiate the content type, say)
/// and pass it to [`BloomGuard::reject_with`](crate::BloomGuard::reject_with).
pub trait OnReject<Req, Res> {
    /// The response for `req`, whose key `key` the filter has never seen.
    fn on_reject(&mut self, req: &Req, key: RejectedKey<'_>) -> Res;

    /// The response for `req`, whose key is ambiguous (given more than once, the values
    /// differing), or `None` to leave it to the missing-key policy (see the [rule](crate::reject)).
    /// `None` by default; [`NotFound`], [`StatusCode`] and [`RejectionHeader`] answer
    /// `400 Bad Request`.
    #[inline]
    fn on_ambiguous_key(&mut self, req: &Req) -> Option<Res> {
        let _ = req;
        None
    }
}

impl<Req, Res, F> OnReject<Req, Res> for F
where
    F: FnMut(RejectedKey<'_>) -> Res,
{
    #[inline]
    fn on_reject(&mut self, _req: &Req, key: RejectedKey<'_>) -> Res {
        self(key)
    }
}

/// The default rejection: `404 Not Found` with the plain body `Not Found`.
///
/// Works for any response body that can be made from a `&'static str` (axum's `Body`,
/// `Full<Bytes>`, `String`, …); for other bodies use
/// [`on_reject`](crate::BloomGuard::on_reject).
#[derive(Clone, Copy, Debug, Default)]
pub struct NotFound;

impl<B, ResBody> OnReject<Request<B>, Response<ResBody>> for NotFound
where
    ResBody: From<&'static str>,
{
    #[inline]
    fn on_reject(&mut self, _req: &Request<B>, _key: RejectedKey<'_>) -> Response<ResBody> {
        plain_text(StatusCode::NOT_FOUND)
    }

    #[inline]
    fn on_ambiguous_key(&mut self, _req: &Request<B>) -> Option<Response<ResBody>> {
        Some(plain_text(StatusCode::BAD_REQUEST))
    }
}

impl<B, ResBody> OnReject<Request<B>, Response<ResBody>> for StatusCode
where
    ResBody: From<&'static str>,
{
    #[inline]
    fn on_reject(&mut self, _req: &Request<B>, _key: RejectedKey<'_>) -> Response<ResBody> {
        plain_text(*self)
    }

    /// `400 Bad Request`, whatever the status for an absent key.
    #[inline]
    fn on_ambiguous_key(&mut self, _req: &Request<B>) -> Option<Response<ResBody>> {
        Some(plain_text(StatusCode::BAD_REQUEST))
    }
}

/// The usual name of the header [`BloomGuard::rejection_header`](crate::BloomGuard::rejection_header)
/// adds: `x-bloom-guard`.
pub const REJECTION_HEADER: HeaderName = HeaderName::from_static("x-bloom-guard");

/// An [`OnReject`] that adds `name: rejected` to the responses of another; what
/// [`BloomGuard::rejection_header`](crate::BloomGuard::rejection_header) wraps the guard's
/// rejection policy in. Pass one to [`reject_with`](crate::BloomGuard::reject_with) to set
/// the policy and the header in one go.
///
/// ```
/// use bloom_tower::reject::{REJECTION_HEADER, RejectionHeader};
/// use bloom_tower::{BloomFilter, BloomGuard, SharedFilter, key};
/// use http::{Request, Response, StatusCode};
/// use tower::{ServiceBuilder, ServiceExt, service_fn};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let filter = SharedFilter::<String>::new(BloomFilter::new(1_000, 0.01)?);
/// let guard = BloomGuard::new(filter, key::path_segment(1))
///     .reject_with(RejectionHeader::new(StatusCode::GONE, REJECTION_HEADER));
/// let service = ServiceBuilder::new().layer(guard).service(service_fn(|_req: Request<String>| async {
///     Ok::<_, std::convert::Infallible>(Response::new(String::from("a user")))
/// }));
/// let response = service.oneshot(Request::get("/users/ada").body(String::new())?).await?;
/// assert_eq!(response.status(), StatusCode::GONE);
/// assert_eq!(response.headers()["x-bloom-guard"], "rejected");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RejectionHeader<R> {
    inner: R,
    name: HeaderName,
}

impl<R> RejectionHeader<R> {
    /// `inner`'s responses, with `name: rejected` added.
    ///
    /// ```
    /// use bloom_tower::reject::{NotFound, RejectionHeader};
    /// use http::header::HeaderName;
    ///
    /// let policy = RejectionHeader::new(NotFound, HeaderName::from_static("x-answered-by"));
    /// # let _ = policy;
    /// ```
    pub fn new(inner: R, name: HeaderName) -> Self {
        Self { inner, name }
    }
}

impl<B, ResBody, R> OnReject<Request<B>, Response<ResBody>> for RejectionHeader<R>
where
    R: OnReject<Request<B>, Response<ResBody>>,
{
    #[inline]
    fn on_reject(&mut self, req: &Request<B>, key: RejectedKey<'_>) -> Response<ResBody> {
        let response = self.inner.on_reject(req, key);
        self.mark(response)
    }

    /// The inner policy's answer, marked: it is the guard's own.
    #[inline]
    fn on_ambiguous_key(&mut self, req: &Request<B>) -> Option<Response<ResBody>> {
        let response = self.inner.on_ambiguous_key(req)?;
        Some(self.mark(response))
    }
}

impl<R> RejectionHeader<R> {
    fn mark<ResBody>(&self, mut response: Response<ResBody>) -> Response<ResBody> {
        // `insert`: one value even if the inner policy already set this header.
        response
            .headers_mut()
            .insert(self.name.clone(), HeaderValue::from_static("rejected"));
        response
    }
}

/// Decides what happens to a request the extractor found no key in.
///
/// `None` passes the request to the inner service; `Some(response)` answers it without calling
/// the inner service. Implemented for [`PassThrough`] (the default), for [`StatusCode`]
/// (answer with that status and its reason as the body, e.g. `StatusCode::BAD_REQUEST`) and for closures
/// `FnMut(&Req) -> Option<Res>`.
pub trait OnMissingKey<Req, Res> {
    /// `Some(response)` to answer `req` directly, `None` to pass it through.
    fn on_missing_key(&mut self, req: &Req) -> Option<Res>;
}

impl<Req, Res, F> OnMissingKey<Req, Res> for F
where
    F: FnMut(&Req) -> Option<Res>,
{
    #[inline]
    fn on_missing_key(&mut self, req: &Req) -> Option<Res> {
        self(req)
    }
}

/// The default missing-key policy: call the inner service, which answers as it would without
/// the guard (e.g. axum's `Path` extractor rejects a bad id with `400`).
#[derive(Clone, Copy, Debug, Default)]
pub struct PassThrough;

impl<Req, Res> OnMissingKey<Req, Res> for PassThrough {
    #[inline]
    fn on_missing_key(&mut self, _req: &Req) -> Option<Res> {
        None
    }
}

impl<B, ResBody> OnMissingKey<Request<B>, Response<ResBody>> for StatusCode
where
    ResBody: From<&'static str>,
{
    #[inline]
    fn on_missing_key(&mut self, _req: &Request<B>) -> Option<Response<ResBody>> {
        Some(plain_text(*self))
    }
}

/// `status` with its canonical reason as the body. No `Content-Type`: inserting the first
/// header allocates the header map, which would make the guard's rejection measurably dearer
/// than axum's own 404 (which has no body or headers at all); the reason phrase is plain
/// ASCII, which every client shows as text. Use `on_reject` for a typed body.
fn plain_text<ResBody: From<&'static str>>(status: StatusCode) -> Response<ResBody> {
    let mut response = Response::new(ResBody::from(status.canonical_reason().unwrap_or("")));
    *response.status_mut() = status;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejected_key_debug_hides_the_key() {
        let key = RejectedKey::new(b"alice@example.com");
        assert_eq!(format!("{key:?}"), "RejectedKey(<17 bytes>)");
        assert_eq!(key.to_str(), Some("alice@example.com"));
        assert_eq!(RejectedKey::new(&[0xff]).to_str(), None);
        assert_eq!(key.for_log().to_string(), "alice@example.com");
        assert_eq!(
            RejectedKey::new(&[0xff, 0x01]).for_log().to_string(),
            "0xff01"
        );
    }

    #[test]
    fn status_responses_carry_their_reason() {
        let req = Request::new(());
        let res: Response<String> = NotFound.on_reject(&req, RejectedKey::new(b"k"));
        assert_eq!(res.status(), StatusCode::NOT_FOUND);
        assert_eq!(res.body(), "Not Found");
        let mut policy = StatusCode::BAD_REQUEST;
        let res: Option<Response<String>> = policy.on_missing_key(&req);
        assert_eq!(res.unwrap().status(), StatusCode::BAD_REQUEST);
        let res: Option<Response<String>> = PassThrough.on_missing_key(&req);
        assert!(res.is_none());
    }

    #[test]
    fn an_ambiguous_key_is_a_bad_request_for_the_status_policies_and_none_for_closures() {
        let req = Request::new(());
        for mut policy in [StatusCode::GONE, StatusCode::NOT_FOUND] {
            let res: Option<Response<String>> = policy.on_ambiguous_key(&req);
            assert_eq!(res.unwrap().status(), StatusCode::BAD_REQUEST);
        }
        let res: Option<Response<String>> = NotFound.on_ambiguous_key(&req);
        assert_eq!(res.unwrap().body(), "Bad Request");
        let mut closure = |_key: RejectedKey<'_>| Response::new(String::new());
        let res: Option<Response<String>> = closure.on_ambiguous_key(&req);
        assert!(res.is_none());
        let mut marked = RejectionHeader::new(NotFound, REJECTION_HEADER);
        let res: Option<Response<String>> = marked.on_ambiguous_key(&req);
        let res = res.unwrap();
        assert_eq!(res.status(), StatusCode::BAD_REQUEST);
        assert_eq!(res.headers()[REJECTION_HEADER], "rejected");
        assert!(RejectedKey::ambiguous().is_ambiguous());
        assert!(!RejectedKey::new(b"k").is_ambiguous());
        assert_eq!(
            format!("{:?}", RejectedKey::ambiguous()),
            "RejectedKey(<ambiguous>)"
        );
    }
}
