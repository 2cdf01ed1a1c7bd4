//! The part of RFC 9111 this cache implements: may a request use the shared cache, and may a
//! response be stored in it, for how long and under which secondary key (`Vary`).
//!
//! Everything here is a pure function of headers, so it is unit-tested here; the service
//! applies the answers.

use std::time::Duration;

use http::{HeaderMap, HeaderName, StatusCode, header};

/// The `Cache-Control` directives this cache acts on (RFC 9111 §5.2). Unknown directives are
/// ignored, as §5.2 requires.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Directives {
    pub(crate) no_store: bool,
    pub(crate) no_cache: bool,
    pub(crate) private: bool,
    pub(crate) public: bool,
    pub(crate) max_age: Option<u64>,
    pub(crate) s_maxage: Option<u64>,
}

impl Directives {
    /// The directives of every `Cache-Control` field line; `None` if one is not text (then
    /// nothing can be concluded from it, and the callers play safe).
    pub(crate) fn of(headers: &HeaderMap) -> Option<Self> {
        let mut directives = Self::default();
        for line in headers.get_all(header::CACHE_CONTROL) {
            for directive in split_outside_quotes(line.to_str().ok()?) {
                let (name, argument) = match directive.split_once('=') {
                    Some((name, argument)) => (name.trim(), Some(argument.trim())),
                    None => (directive.trim(), None),
                };
                if name.eq_ignore_ascii_case("no-store") {
                    directives.no_store = true;
                } else if name.eq_ignore_ascii_case("no-cache") {
                    // Also the qualified form `no-cache="Set-Cookie"`: we cannot strip fields
                    // from a stored response, so any `no-cache` means "do not store".
                    directives.no_cache = true;
                } else if name.eq_ignore_ascii_case("private") {
                    directives.private = true;
                } else if name.eq_ignore_ascii_case("public") {
                    directives.public = true;
                } else if name.eq_ignore_ascii_case("max-age") {
                    directives.max_age = Some(min_seconds(directives.max_age, argument));
                } else if name.eq_ignore_ascii_case("s-maxage") {
                    directives.s_maxage = Some(min_seconds(directives.s_maxage, argument));
                }
            }
        }
        Some(directives)
    }
}

/// A delta-seconds argument, the smaller if the directive repeats. An invalid one counts as
/// 0: RFC 9111 §4.2.1 says to treat such a response as stale.
fn min_seconds(previous: Option<u64>, argument: Option<&str>) -> u64 {
    let seconds = argument
        .map(|a| a.trim_matches('"'))
        .and_then(|a| a.parse::<u64>().ok())
        .unwrap_or(0);
    previous.map_or(seconds, |p| p.min(seconds))
}

/// Splits a field value at the commas that are not inside a quoted string, so that
/// `private="a, b", max-age=5` is two directives, not three.
fn split_outside_quotes(value: &str) -> impl Iterator<Item = &str> {
    let mut in_quotes = false;
    let mut escaped = false;
    let mut start = 0;
    let mut pieces = Vec::new();
    for (at, byte) in value.bytes().enumerate() {
        match byte {
            _ if escaped => escaped = false,
            b'\\' if in_quotes => escaped = true,
            b'"' => in_quotes = !in_quotes,
            b',' if !in_quotes => {
                pieces.push(&value[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    pieces.push(&value[start..]);
    pieces.into_iter().filter(|piece| !piece.trim().is_empty())
}

/// How a request may use the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RequestUse {
    /// No credentials, no directive against caching: served from the cache, or joins (or
    /// leads) the URL's one load.
    Shared,
    /// The request carries `Authorization` (RFC 9111 §3.5): only a stored response marked
    /// `public` or `s-maxage` may answer it, only such a response to it may be stored, and it
    /// never waits on another request's load (that load's response may not be for it).
    Credentials,
    /// `Cache-Control: no-store` or `no-cache` (or an unreadable `Cache-Control`): the
    /// client asked for a response from the origin; the cache stays out of the way.
    Bypass,
}

impl RequestUse {
    pub(crate) fn of(headers: &HeaderMap) -> Self {
        match Directives::of(headers) {
            Some(d) if !d.no_store && !d.no_cache => {
                if headers.contains_key(header::AUTHORIZATION) {
                    Self::Credentials
                } else {
                    Self::Shared
                }
            }
            _ => Self::Bypass,
        }
    }
}

/// Why a response was not stored (the `reason` of the debug event, and the doc of the
/// `not_stored` counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NotStored {
    /// Neither `200` nor `404`.
    Status,
    /// `no-store`, `no-cache` or `private`, or an unreadable `Cache-Control`.
    Directive,
    /// `Set-Cookie`: the response belongs to one client.
    SetCookie,
    /// `Vary: *`, or a `Vary` that names something that is not a header.
    Vary,
    /// The request carried `Authorization` and the response is not `public` or `s-maxage`.
    Credentials,
    /// `max-age`/`s-maxage` (less `Age`) leave it no time to live.
    Expired,
    /// The body is larger than `max_body_bytes` (declared, or found while reading).
    BodyTooLarge,
    /// The response with its headers and keys weighs more than the whole byte budget.
    OverBudget,
    /// The body ended with trailers, which this cache does not keep.
    Trailers,
    /// Reading the body failed.
    BodyError,
}

impl NotStored {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Status => "status",
            Self::Directive => "directive",
            Self::SetCookie => "set-cookie",
            Self::Vary => "vary",
            Self::Credentials => "credentials",
            Self::Expired => "expired",
            Self::BodyTooLarge => "body-too-large",
            Self::OverBudget => "over-budget",
            Self::Trailers => "trailers",
            Self::BodyError => "body-error",
        }
    }
}

/// What storing a response needs to know, once it is known that it may be stored.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct StoreRules {
    /// How long it may be served: the configured TTL, capped by `s-maxage`/`max-age`.
    pub(crate) time_to_live: Duration,
    /// `Age` the response already had when it arrived, added to the `Age` we send.
    pub(crate) upstream_age: u64,
    /// `public` or `s-maxage`: it may answer requests that carry `Authorization`.
    pub(crate) answers_credentials: bool,
    /// The request headers it varies on (`Vary`), lower-case, without repeats.
    pub(crate) vary: Vec<HeaderName>,
}

/// The TTLs configured on the builder.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lifetimes {
    pub(crate) ok: Duration,
    pub(crate) not_found: Duration,
}

/// May this response be stored in the shared cache (RFC 9111 §3, §5.2.2), and how?
pub(crate) fn storable(
    status: StatusCode,
    headers: &HeaderMap,
    request: RequestUse,
    lifetimes: Lifetimes,
) -> Result<StoreRules, NotStored> {
    let configured = match status {
        StatusCode::OK => lifetimes.ok,
        StatusCode::NOT_FOUND => lifetimes.not_found,
        _ => return Err(NotStored::Status),
    };
    let directives = Directives::of(headers).ok_or(NotStored::Directive)?;
    if directives.no_store || directives.no_cache || directives.private {
        return Err(NotStored::Directive);
    }
    if headers.contains_key(header::SET_COOKIE) {
        return Err(NotStored::SetCookie);
    }
    let answers_credentials = directives.public || directives.s_maxage.is_some();
    if request == RequestUse::Credentials && !answers_credentials {
        return Err(NotStored::Credentials);
    }
    let vary = vary(headers).ok_or(NotStored::Vary)?;
    let upstream_age = headers
        .get(header::AGE)
        .and_then(|age| age.to_str().ok()?.trim().parse::<u64>().ok())
        .unwrap_or(0);
    // A shared cache prefers s-maxage (§5.2.2.10). Either only ever shortens our own TTL: the
    // configured one is the operator's bound on staleness.
    let time_to_live = match directives.s_maxage.or(directives.max_age) {
        Some(fresh_for) => {
            configured.min(Duration::from_secs(fresh_for.saturating_sub(upstream_age)))
        }
        None => configured,
    };
    if time_to_live.is_zero() {
        return Err(NotStored::Expired);
    }
    Ok(StoreRules {
        time_to_live,
        upstream_age,
        answers_credentials,
        vary,
    })
}

/// The header names of every `Vary` field line; `None` for `Vary: *` (it varies on things
/// outside the request's headers, so no stored copy can be matched) or a malformed name.
fn vary(headers: &HeaderMap) -> Option<Vec<HeaderName>> {
    let mut names: Vec<HeaderName> = Vec::new();
    for line in headers.get_all(header::VARY) {
        for name in line.to_str().ok()?.split(',').map(str::trim) {
            if name.is_empty() {
                continue;
            }
            if name == "*" {
                return None;
            }
            let name = HeaderName::from_bytes(name.as_bytes()).ok()?;
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    Some(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const LIFETIMES: Lifetimes = Lifetimes {
        ok: Duration::from_secs(60),
        not_found: Duration::from_secs(10),
    };

    fn headers(fields: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in fields {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    fn rules(
        status: StatusCode,
        fields: &[(&'static str, &'static str)],
    ) -> Result<StoreRules, NotStored> {
        storable(status, &headers(fields), RequestUse::Shared, LIFETIMES)
    }

    #[test]
    fn commas_inside_quotes_do_not_split_directives() {
        let d = Directives::of(&headers(&[(
            "cache-control",
            r#"private="a, max-age=0", max-age=5"#,
        )]))
        .unwrap();
        assert!(d.private);
        assert_eq!(d.max_age, Some(5));
    }

    #[test]
    fn directives_are_case_insensitive_and_span_field_lines() {
        let d = Directives::of(&headers(&[
            ("cache-control", "Public"),
            ("cache-control", "S-MAXAGE=7"),
        ]))
        .unwrap();
        assert!(d.public);
        assert_eq!(d.s_maxage, Some(7));
    }

    #[test]
    fn max_age_caps_the_configured_ttl_and_never_extends_it() {
        let short = rules(StatusCode::OK, &[("cache-control", "max-age=5")]).unwrap();
        assert_eq!(short.time_to_live, Duration::from_secs(5));
        let long = rules(StatusCode::OK, &[("cache-control", "max-age=86400")]).unwrap();
        assert_eq!(long.time_to_live, Duration::from_secs(60));
        let negative = rules(StatusCode::NOT_FOUND, &[("cache-control", "max-age=30")]).unwrap();
        assert_eq!(negative.time_to_live, Duration::from_secs(10));
    }

    #[test]
    fn s_maxage_wins_over_max_age_and_age_is_subtracted() {
        let r = rules(
            StatusCode::OK,
            &[("cache-control", "max-age=50, s-maxage=20"), ("age", "5")],
        )
        .unwrap();
        assert_eq!(r.time_to_live, Duration::from_secs(15));
        assert_eq!(r.upstream_age, 5);
        assert!(r.answers_credentials);
        assert_eq!(
            rules(
                StatusCode::OK,
                &[("cache-control", "max-age=60, s-maxage=0")]
            ),
            Err(NotStored::Expired)
        );
        assert_eq!(
            rules(StatusCode::OK, &[("cache-control", "max-age=bogus")]),
            Err(NotStored::Expired)
        );
    }

    #[test]
    fn responses_that_must_not_be_shared_are_refused() {
        for (fields, reason) in [
            (vec![("cache-control", "private")], NotStored::Directive),
            (vec![("cache-control", "no-store")], NotStored::Directive),
            (
                vec![("cache-control", r#"no-cache="set-cookie""#)],
                NotStored::Directive,
            ),
            (vec![("set-cookie", "a=b")], NotStored::SetCookie),
            (vec![("vary", "accept, *")], NotStored::Vary),
        ] {
            assert_eq!(rules(StatusCode::OK, &fields), Err(reason), "{fields:?}");
        }
        assert_eq!(rules(StatusCode::CREATED, &[]), Err(NotStored::Status));
    }

    #[test]
    fn vary_names_are_collected_once() {
        let r = rules(
            StatusCode::OK,
            &[
                ("vary", "Accept-Language, accept"),
                ("vary", "ACCEPT-LANGUAGE"),
            ],
        )
        .unwrap();
        assert_eq!(r.vary, [header::ACCEPT_LANGUAGE, header::ACCEPT]);
    }

    #[test]
    fn credentials_need_public_or_s_maxage() {
        let with_credentials = |fields: &[(&'static str, &'static str)]| {
            storable(
                StatusCode::OK,
                &headers(fields),
                RequestUse::Credentials,
                LIFETIMES,
            )
        };
        assert_eq!(with_credentials(&[]), Err(NotStored::Credentials));
        assert!(with_credentials(&[("cache-control", "public")]).is_ok());
        assert!(with_credentials(&[("cache-control", "s-maxage=30")]).is_ok());
    }

    #[test]
    fn requests_asking_for_the_origin_bypass_and_credentials_are_noticed() {
        let use_of = |fields: &[(&'static str, &'static str)]| RequestUse::of(&headers(fields));
        assert_eq!(use_of(&[]), RequestUse::Shared);
        assert_eq!(use_of(&[("cache-control", "no-cache")]), RequestUse::Bypass);
        assert_eq!(
            use_of(&[("cache-control", "max-age=0, no-store")]),
            RequestUse::Bypass
        );
        assert_eq!(
            use_of(&[("authorization", "Bearer x")]),
            RequestUse::Credentials
        );
        assert_eq!(
            use_of(&[("authorization", "Bearer x"), ("cache-control", "no-cache")]),
            RequestUse::Bypass
        );
    }
}
