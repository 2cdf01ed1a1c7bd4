//! The `signup` example's app on a real TCP port, driven by a real HTTP client: common
//! passwords are refused with a clear message, others accepted, the filter's false positives
//! accepted after the exact check; plus the shipped list itself.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::{Request, StatusCode};
use bloom_examples::passwords::{
    self, COMMON_PASSWORD_MESSAGE, COMMON_PASSWORDS, PasswordScreen, ScreenStats, Screening,
    SignupError,
};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

const SEED: u128 = 0x5161_0B0B;

struct Server {
    addr: SocketAddr,
    client: Client<HttpConnector, Full<Bytes>>,
    screen: Arc<PasswordScreen>,
}

impl Server {
    async fn start() -> Self {
        let screen = Arc::new(PasswordScreen::with_seed(SEED).unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = passwords::router(Arc::clone(&screen));
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Server {
            addr,
            client: Client::builder(TokioExecutor::new()).build_http(),
            screen,
        }
    }

    /// Posts `body` to `/signup` with `content_type` (none if `None`).
    async fn post_raw(&self, body: &str, content_type: Option<&str>) -> (StatusCode, String) {
        let mut request = Request::post(format!("http://{}/signup", self.addr));
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        let request = request.body(Full::from(body.to_owned())).unwrap();
        let response = self.client.request(request).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    async fn signup(&self, username: &str, password: &str) -> (StatusCode, Value) {
        let body = json!({ "username": username, "password": password }).to_string();
        let (status, body) = self.post_raw(&body, Some("application/json")).await;
        (status, serde_json::from_str(&body).unwrap())
    }

    fn stats(&self) -> ScreenStats {
        self.screen.stats()
    }
}

fn refused(field: &str, error: &str) -> Value {
    serde_json::to_value(SignupError {
        field: field.into(),
        error: error.into(),
    })
    .unwrap()
}

#[test]
fn the_shipped_list_is_the_100000_line_seclists_file() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/data/seclists-10-million-password-list-top-100000.txt"
    );
    let file = std::fs::read(path).unwrap();
    assert_eq!(file.len(), 781_896);
    assert_eq!(file.iter().filter(|&&b| b == b'\n').count(), 100_000);
    assert_eq!(file.last(), Some(&b'\n'));
    assert!(
        !file.contains(&b'\r'),
        "CRLF line endings: the copy was converted"
    );
    assert_eq!(
        COMMON_PASSWORDS.as_bytes(),
        file,
        "the embedded list is the file"
    );

    let lines: Vec<&str> = COMMON_PASSWORDS.lines().collect();
    assert_eq!(
        lines[..5],
        ["123456", "password", "12345678", "qwerty", "123456789"]
    );
    assert_eq!(lines[47_238], "a\u{aa}\u{bb}", "the one non-ASCII line");
    assert!(lines.iter().all(|l| !l.is_empty() && l.trim() == *l));

    let notice = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/data/NOTICE.md"
    ))
    .unwrap();
    for fact in [
        "Copyright (c) 2018 Daniel Miessler",
        "https://github.com/danielmiessler/SecLists",
        "Passwords/Common-Credentials/10-million-password-list-top-100000.txt",
        "84f9f01da3323b41cdc030f89f7fab65bf76a7e0d5265acabb715c2b3795f148",
    ] {
        assert!(notice.contains(fact), "NOTICE.md lacks {fact:?}");
    }
}

#[test]
fn every_listed_password_is_refused_in_any_letter_case() {
    let screen = PasswordScreen::with_seed(SEED).unwrap();
    assert_eq!(screen.len(), 96_518, "distinct entries after folding case");
    for line in COMMON_PASSWORDS.lines() {
        assert_eq!(screen.screen(line), Screening::Common, "{line:?}");
        assert_eq!(screen.screen(&line.to_uppercase()), Screening::Common);
    }
    assert_eq!(screen.screen("PaSsWoRd"), Screening::Common);
    let stats = screen.stats();
    assert_eq!(stats.screened, 200_001);
    assert_eq!(stats.rejected, 200_001);
}

#[test]
fn a_realistic_mix_mostly_skips_the_exact_check() {
    let screen = PasswordScreen::with_seed(SEED).unwrap();
    let report = passwords::simulate_mix(&screen, 10_000, 20, 42);
    println!(
        "{report:?}: {:.2} % needed the exact check",
        100.0 * report.exact_share()
    );
    assert_eq!(report.signups, 10_000);
    assert!((1_800..=2_200).contains(&report.listed), "{report:?}");
    // Every listed password is refused, and no strong one.
    assert_eq!(report.rejected, report.listed);
    // The strong ones need the exact check only when the filter errs: about 1 %.
    let false_positives = report.exact_checks - report.rejected;
    let strong = report.signups - report.listed;
    assert!(
        false_positives > 0 && false_positives < strong * 3 / 100,
        "{false_positives} false positives among {strong} strong passwords"
    );
}

#[tokio::test]
async fn common_passwords_get_422_with_a_clear_message() {
    let server = Server::start().await;
    // The last one is not in the file as written: letter case is ignored.
    for password in ["123456", "password", "QWERTY", "iloveyou", "PaSsWoRd"] {
        assert_eq!(
            server.signup("ada", password).await,
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                refused("password", COMMON_PASSWORD_MESSAGE)
            ),
            "{password:?}"
        );
    }
    assert_eq!(
        server.stats(),
        ScreenStats {
            screened: 5,
            exact_checks: 5,
            rejected: 5
        }
    );
}

#[tokio::test]
async fn a_strong_password_is_accepted_by_the_filter_alone() {
    let server = Server::start().await;
    let password = "mauve-Kettle-41-orbit-Sprocket";
    assert!(!server.screen.filter_says_maybe(password), "pick another");
    assert_eq!(
        server.signup("  ada  ", password).await,
        (StatusCode::CREATED, json!({ "username": "ada" }))
    );
    assert_eq!(
        server.stats(),
        ScreenStats {
            screened: 1,
            exact_checks: 0,
            rejected: 0
        }
    );
}

#[tokio::test]
async fn a_false_positive_of_the_filter_is_accepted_after_the_exact_check() {
    let server = Server::start().await;
    let screen = &server.screen;
    // With the fixed hash key this finds the same password every run.
    let password = (0u32..)
        .map(|i| format!("not-common-{i}"))
        .find(|p| screen.filter_says_maybe(p) && !screen.is_listed(p))
        .unwrap();
    assert_eq!(screen.screen(&password), Screening::ClearedByExactCheck);

    let before = server.stats();
    assert_eq!(
        server.signup("grace", &password).await,
        (StatusCode::CREATED, json!({ "username": "grace" }))
    );
    let after = server.stats();
    assert_eq!(after.exact_checks, before.exact_checks + 1, "{password}");
    assert_eq!(after.rejected, before.rejected);
}

#[tokio::test]
async fn invalid_fields_get_422_with_a_clear_message() {
    let server = Server::start().await;
    let cases = [
        ("ada", "", "password", "password must not be empty"),
        (
            " ",
            "mauve-Kettle-41",
            "username",
            "username must not be empty",
        ),
        (
            "ada",
            &"x".repeat(257),
            "password",
            "password must be at most 256 bytes long",
        ),
        (
            "Quiet-Otter-77",
            "quiet-otter-77",
            "password",
            "password must not be the username",
        ),
    ];
    for (username, password, field, error) in cases {
        assert_eq!(
            server.signup(username, password).await,
            (StatusCode::UNPROCESSABLE_ENTITY, refused(field, error)),
            "{username:?} / {password:?}"
        );
    }
    assert_eq!(server.stats().screened, 0, "refused before screening");
}

#[tokio::test]
async fn malformed_requests_get_axum_s_rejections() {
    let server = Server::start().await;
    let json = Some("application/json");
    // Not JSON at all.
    let (status, _) = server.post_raw("{\"username\": \"ada\",", json).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // JSON, but a field is missing or has the wrong type.
    let (status, body) = server.post_raw(r#"{"username": "ada"}"#, json).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(body.contains("password"), "{body}");
    let (status, _) = server
        .post_raw(r#"{"username": "ada", "password": 123456}"#, json)
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    // Not declared as JSON.
    let body = r#"{"username": "ada", "password": "mauve-Kettle-41"}"#;
    let (status, _) = server.post_raw(body, None).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(server.stats().screened, 0);
}
