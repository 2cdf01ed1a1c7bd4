//! A `metrics` recorder that keeps what is described to it, and the list of names a `names`
//! module declares, for the crates' metrics-contract tests (`bloom-tower/tests/metrics.rs`
//! and `bloom-redis/tests/metrics.rs` include this file with `#[path]`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use metrics::{
    Counter, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, SharedString, Unit,
};

/// A described name's kind (`counter`, `gauge`, `histogram`), unit and text.
pub type Described = (&'static str, Option<Unit>, String);

/// Every histogram's recorded values, by `name{label=value,…}`.
pub type Histograms = Arc<Mutex<HashMap<String, Vec<f64>>>>;

/// Every gauge's values, in the order they were set, by `name{label=value,…}`.
pub type Gauges = Arc<Mutex<HashMap<String, Vec<f64>>>>;

/// What was described to it, by name; registers histograms and gauges (their values, by
/// name) and nothing else.
#[derive(Default)]
#[allow(dead_code)] // each test binary reads the values it needs
pub struct Descriptions(
    pub Mutex<HashMap<String, Described>>,
    pub Histograms,
    pub Gauges,
);

/// One registered histogram or gauge: appends to its name's values.
struct Recorded(Arc<Mutex<HashMap<String, Vec<f64>>>>, String);

impl Recorded {
    fn push(&self, value: f64) {
        let mut values = self.0.lock().unwrap();
        values.entry(self.1.clone()).or_default().push(value);
    }
}

impl HistogramFn for Recorded {
    fn record(&self, value: f64) {
        self.push(value);
    }
}

impl GaugeFn for Recorded {
    fn increment(&self, value: f64) {
        self.push(value); // not used by the crates: their gauges are only set
    }
    fn decrement(&self, value: f64) {
        self.push(-value);
    }
    fn set(&self, value: f64) {
        self.push(value);
    }
}

/// `name{label=value,…}`, the key [`Histograms`] and [`Gauges`] use.
fn labelled(key: &Key) -> String {
    let labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl Descriptions {
    fn add(&self, kind: &'static str, name: KeyName, unit: Option<Unit>, text: SharedString) {
        let previous = self
            .0
            .lock()
            .unwrap()
            .insert(name.as_str().to_owned(), (kind, unit, text.to_string()));
        assert!(previous.is_none(), "{} described twice", name.as_str());
    }
}

impl metrics::Recorder for Descriptions {
    fn describe_counter(&self, name: KeyName, unit: Option<Unit>, text: SharedString) {
        self.add("counter", name, unit, text);
    }
    fn describe_gauge(&self, name: KeyName, unit: Option<Unit>, text: SharedString) {
        self.add("gauge", name, unit, text);
    }
    fn describe_histogram(&self, name: KeyName, unit: Option<Unit>, text: SharedString) {
        self.add("histogram", name, unit, text);
    }
    fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
        Counter::noop()
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(Arc::new(Recorded(Arc::clone(&self.2), labelled(key))))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(Arc::new(Recorded(Arc::clone(&self.1), labelled(key))))
    }
}

/// Every `pub const NAME: &str = "value";` of the `pub mod names { … }` in `source` (a
/// crate's source text), so a name added there without a description fails the test.
#[allow(dead_code)] // not every test binary that records checks the names
pub fn declared_names(source: &str) -> Vec<(String, String)> {
    let start = source.find("pub mod names {").expect("the names module");
    let end = start + source[start..].find("\n}\n").expect("its end");
    source[start..end]
        .split("pub const ")
        .skip(1)
        .map(|decl| {
            let constant = decl.split(':').next().unwrap().trim().to_owned();
            let value = decl.split('"').nth(1).expect("a string literal").to_owned();
            (constant, value)
        })
        .collect()
}
