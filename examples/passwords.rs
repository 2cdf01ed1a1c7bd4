//! Screening new passwords against the 100,000 most common ones (the `signup` example).
//!
//! A [`PasswordScreen`] holds the list twice: a Bloom filter (about 10.5 bits per entry) that
//! answers "definitely not common" for almost every acceptable password, and an exact table
//! (the folded list text and a sorted index into it) that confirms the filter's "maybe". Only
//! listed passwords and the filter's ~1% false positives reach the exact table, so it could
//! just as well live on disk or in another service.
//!
//! Screening ignores letter case: the list and the candidate are both lower-cased before they
//! are compared. Cracking tools try case variants of every dictionary word first, so
//! `PassWord` is no stronger than `password`; the list itself already has some variants
//! (`password` and `PASSWORD`), and folding it leaves 96,518 distinct entries.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use bloom_core::{BloomFilter, BuildError, Layout};
use serde::{Deserialize, Serialize};

/// The SecLists list of the 100,000 most common passwords, most common first, one per line
/// (`examples/data/`, MIT, see `examples/data/NOTICE.md`).
pub const COMMON_PASSWORDS: &str =
    include_str!("data/seclists-10-million-password-list-top-100000.txt");

/// The filter's false-positive rate: the share of acceptable passwords that need the exact
/// check.
pub const FALSE_POSITIVE_RATE: f64 = 0.01;

/// Longer passwords are refused (422) before any screening, which bounds the work per request.
pub const MAX_PASSWORD_BYTES: usize = 256;

/// How [`PasswordScreen::screen`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Screening {
    /// The filter says the password is definitely not on the list: accepted without the
    /// exact check.
    ClearedByFilter,
    /// The filter said "maybe", and the exact check found it is not on the list (a false
    /// positive of the filter): accepted.
    ClearedByExactCheck,
    /// The password is on the list (ignoring case): refused.
    Common,
}

/// Counters of a [`PasswordScreen`] since it was built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScreenStats {
    /// Passwords screened.
    pub screened: u64,
    /// Passwords the filter could not clear, so the exact table was consulted.
    pub exact_checks: u64,
    /// Passwords found on the list.
    pub rejected: u64,
}

/// The common-password list as a Bloom filter in front of an exact table.
pub struct PasswordScreen {
    filter: BloomFilter,
    /// The lower-cased list, each entry followed by `\n`.
    folded: String,
    /// Where each distinct entry starts in `folded`, sorted by entry.
    index: Vec<u32>,
    screened: AtomicU64,
    exact_checks: AtomicU64,
    rejected: AtomicU64,
}

impl PasswordScreen {
    /// Builds the screen from [`COMMON_PASSWORDS`] with a random secret hash key.
    pub fn new() -> Result<Self, BuildError> {
        Self::build(COMMON_PASSWORDS, None)
    }

    /// Builds the screen with a fixed hash key, so which passwords are false positives is
    /// reproducible (tests). Keep a real service's key secret: with it, anyone can compute
    /// passwords that force the exact check.
    pub fn with_seed(seed: u128) -> Result<Self, BuildError> {
        Self::build(COMMON_PASSWORDS, Some(seed))
    }

    /// Builds the screen from `list` (one password per line; blank lines are skipped).
    pub fn build(list: &str, seed: Option<u128>) -> Result<Self, BuildError> {
        let mut folded = String::with_capacity(list.len());
        let mut index = Vec::new();
        for line in list.lines().filter(|line| !line.is_empty()) {
            index.push(u32::try_from(folded.len()).expect("list under 4 GiB"));
            folded.push_str(&fold(line));
            folded.push('\n');
        }
        let entry = |start: &u32| entry_at(&folded, *start);
        index.sort_unstable_by(|a, b| entry(a).cmp(entry(b)));
        index.dedup_by(|a, b| entry(a) == entry(b));
        index.shrink_to_fit();

        let mut builder = BloomFilter::builder()
            .expected_items(index.len() as u64)
            .false_positive_rate(FALSE_POSITIVE_RATE)
            .layout(Layout::Blocked);
        if let Some(seed) = seed {
            builder = builder.seed(seed);
        }
        let filter = builder.build()?;
        filter.insert_many(index.iter().map(entry));
        Ok(Self {
            filter,
            folded,
            index,
            screened: AtomicU64::new(0),
            exact_checks: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        })
    }

    /// Screens `password`: the filter first, the exact table only if the filter says "maybe".
    pub fn screen(&self, password: &str) -> Screening {
        self.screened.fetch_add(1, Relaxed);
        let folded = fold(password);
        if !self.filter.contains(folded.as_str()) {
            return Screening::ClearedByFilter;
        }
        self.exact_checks.fetch_add(1, Relaxed);
        if self.is_listed_folded(&folded) {
            self.rejected.fetch_add(1, Relaxed);
            Screening::Common
        } else {
            Screening::ClearedByExactCheck
        }
    }

    /// Whether the filter says "maybe" for `password` (always, for a listed one).
    pub fn filter_says_maybe(&self, password: &str) -> bool {
        self.filter.contains(fold(password).as_str())
    }

    /// The exact answer, without the filter: is `password` on the list, ignoring case?
    pub fn is_listed(&self, password: &str) -> bool {
        self.is_listed_folded(&fold(password))
    }

    fn is_listed_folded(&self, folded: &str) -> bool {
        self.index
            .binary_search_by(|start| entry_at(&self.folded, *start).cmp(folded))
            .is_ok()
    }

    /// The number of distinct entries after folding case.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether the list was empty.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The Bloom filter.
    pub fn filter(&self) -> &BloomFilter {
        &self.filter
    }

    /// Heap bytes of the exact table: the folded text and the sorted index.
    pub fn exact_table_bytes(&self) -> usize {
        self.folded.capacity() + self.index.capacity() * size_of::<u32>()
    }

    /// The counters so far.
    pub fn stats(&self) -> ScreenStats {
        ScreenStats {
            screened: self.screened.load(Relaxed),
            exact_checks: self.exact_checks.load(Relaxed),
            rejected: self.rejected.load(Relaxed),
        }
    }
}

/// The entry starting at `start` in the folded text.
fn entry_at(folded: &str, start: u32) -> &str {
    let rest = &folded[start as usize..];
    rest.split('\n').next().unwrap_or(rest)
}

/// What is compared: the lower-cased password.
fn fold(password: &str) -> String {
    password.to_lowercase()
}

/// What a simulated mix of signups cost; see [`simulate_mix`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MixReport {
    /// Signups simulated.
    pub signups: usize,
    /// How many of them used a password from the list.
    pub listed: usize,
    /// How many needed the exact check (listed ones plus the filter's false positives).
    pub exact_checks: usize,
    /// How many were refused.
    pub rejected: usize,
}

impl MixReport {
    /// The share of signups that needed the exact check.
    pub fn exact_share(&self) -> f64 {
        self.exact_checks as f64 / self.signups as f64
    }
}

/// Screens `signups` passwords of which `listed_percent` % are drawn uniformly from the list
/// (as written there, so some upper-case) and the rest are random 16-character strong ones
/// (letters and digits), reproducibly for a given `seed`. The passwords go through
/// [`PasswordScreen::screen`], so they also count in `screen`'s [`stats`](PasswordScreen::stats).
pub fn simulate_mix(
    screen: &PasswordScreen,
    signups: usize,
    listed_percent: u32,
    seed: u64,
) -> MixReport {
    const STRONG_CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let list: Vec<&str> = COMMON_PASSWORDS.lines().collect();
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut report = MixReport {
        signups,
        listed: 0,
        exact_checks: 0,
        rejected: 0,
    };
    for _ in 0..signups {
        let password = if rng.u32(0..100) < listed_percent {
            report.listed += 1;
            list[rng.usize(..list.len())].to_owned()
        } else {
            (0..16)
                .map(|_| char::from(STRONG_CHARS[rng.usize(..STRONG_CHARS.len())]))
                .collect()
        };
        match screen.screen(&password) {
            Screening::ClearedByFilter => {}
            Screening::ClearedByExactCheck => report.exact_checks += 1,
            Screening::Common => {
                report.exact_checks += 1;
                report.rejected += 1;
            }
        }
    }
    report
}

/// The body of `POST /signup`.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct SignupRequest {
    /// The new account's name.
    pub username: String,
    /// The password it wants.
    pub password: String,
}

/// The body of a refused signup (`422`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct SignupError {
    /// Which field is wrong: `"username"` or `"password"`.
    pub field: String,
    /// What is wrong with it, for the user.
    pub error: String,
}

/// The message for a password that is on the list.
pub const COMMON_PASSWORD_MESSAGE: &str = "this password is one of the 100,000 most common \
     passwords (ignoring letter case), so it is among the first an attacker tries: choose another";

/// The app: `POST /signup` with a JSON [`SignupRequest`] answers `201 Created` with
/// `{"username": …}`, or `422` with a [`SignupError`]. Malformed JSON gets axum's own
/// rejection (`400`, or `422` for a missing field, `415` without a JSON content type).
pub fn router(screen: Arc<PasswordScreen>) -> Router {
    Router::new()
        .route("/signup", post(signup))
        .with_state(screen)
}

async fn signup(
    State(screen): State<Arc<PasswordScreen>>,
    Json(request): Json<SignupRequest>,
) -> Response {
    let refuse = |field: &str, error: &str| {
        let body = SignupError {
            field: field.into(),
            error: error.into(),
        };
        (StatusCode::UNPROCESSABLE_ENTITY, Json(body)).into_response()
    };
    let username = request.username.trim();
    let password = request.password.as_str();
    if username.is_empty() {
        return refuse("username", "username must not be empty");
    }
    if password.is_empty() {
        return refuse("password", "password must not be empty");
    }
    if password.len() > MAX_PASSWORD_BYTES {
        let error = format!("password must be at most {MAX_PASSWORD_BYTES} bytes long");
        return refuse("password", &error);
    }
    if fold(password) == fold(username) {
        return refuse("password", "password must not be the username");
    }
    match screen.screen(password) {
        Screening::Common => refuse("password", COMMON_PASSWORD_MESSAGE),
        Screening::ClearedByFilter | Screening::ClearedByExactCheck => {
            // A real service would now hash the password (argon2id) and store the account.
            let body = serde_json::json!({ "username": username });
            (StatusCode::CREATED, Json(body)).into_response()
        }
    }
}
