//! How a component's counters reach the `metrics` facade: [`series!`] declares a component's
//! series, registers them and writes the event methods that count in memory and on a series;
//! [`counter`], [`gauge`], [`histogram`] register one series on its own. The
//! names, labels and descriptions are [`names`](super::names) and [`describe`](super::describe)
//! (checked by the workspace's `tests/prometheus.rs`); each component's `stats.rs` lists which
//! of them it counts.

/// Declares a component's counters, its series and the event methods that count on both:
///
/// * `struct $counters`, with the fields given, an `AtomicU64` per event and, with the
///   `metrics` feature, `metrics: OnceLock<$metrics>`;
/// * `struct $metrics`, one field per series, and `fn register(value) -> Self`, which
///   describes every series once per process ([`describe_once`](super::describe_once)) and
///   registers them all, each labelled `$label = value` (plus any labels of its own);
/// * `fn metrics(&self, value) -> &$metrics`, registering them on the first call;
/// * under `events`, `fn hit => hits: counter(NAME);` is `pub(crate) fn hit(&self, value: &str)`,
///   adding one to the field `hits` and to its series `NAME`; under `series`, the series the
///   component's own methods count on.
///
/// Rule: all of a component's series are registered on its first event, so a scrape shows
/// every series of a component that has counted anything, at 0 where nothing happened yet.
macro_rules! series {
    (@type counter) => { metrics::Counter };
    (@type gauge) => { metrics::Gauge };
    (@type histogram) => { metrics::Histogram };
    (
        $(#[$sattr:meta])*
        $vis:vis struct $counters:ident {
            $( $(#[$fattr:meta])* $pfield:ident: $pty:ty, )*
        }
        with $metrics:ident labelled $label:literal {
            events {
                $(
                    $(#[$attr:meta])*
                    fn $event:ident => $efield:ident:
                        $ekind:ident($ename:expr $(, $ekey:literal => $evalue:literal)*);
                )*
            }
            series {
                $( $field:ident: $kind:ident($name:expr $(, $key:literal => $value:literal)*), )*
            }
        }
    ) => {
        $(#[$sattr])*
        #[derive(Default)]
        $vis struct $counters {
            $( $(#[$fattr])* $pfield: $pty, )*
            $( $efield: ::std::sync::atomic::AtomicU64, )*
            /// Registering a series looks it up in the recorder: done once, on the first event.
            #[cfg(feature = "metrics")]
            metrics: ::std::sync::OnceLock<$metrics>,
        }

        #[cfg(feature = "metrics")]
        struct $metrics {
            $( $efield: $crate::stats::series!(@type $ekind), )*
            $( $field: $crate::stats::series!(@type $kind), )*
        }

        #[cfg(feature = "metrics")]
        impl $metrics {
            fn register(value: &str) -> Self {
                $crate::stats::describe_once();
                Self {
                    $( $efield: metrics::$ekind!($ename, $label => value.to_owned() $(, $ekey => $evalue)*), )*
                    $( $field: metrics::$kind!($name, $label => value.to_owned() $(, $key => $value)*), )*
                }
            }
        }

        impl $counters {
            #[cfg(feature = "metrics")]
            fn metrics(&self, value: &str) -> &$metrics {
                self.metrics.get_or_init(|| $metrics::register(value))
            }

            $(
                $(#[$attr])*
                #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
                pub(crate) fn $event(&self, value: &str) {
                    self.$efield.fetch_add(1, ::std::sync::atomic::Ordering::Relaxed);
                    #[cfg(feature = "metrics")]
                    self.metrics(value).$efield.increment(1);
                }
            )*
        }
    };
}

pub(crate) use series;

/// The counter `name` labelled `key = value`, registered after describing every series once.
#[cfg(feature = "metrics")]
pub(crate) fn counter(name: &'static str, key: &'static str, value: &str) -> metrics::Counter {
    super::describe_once();
    metrics::counter!(name, key => value.to_owned())
}

/// The gauge `name` labelled `key = value`, registered after describing every series once.
#[cfg(feature = "metrics")]
pub(crate) fn gauge(name: &'static str, key: &'static str, value: &str) -> metrics::Gauge {
    super::describe_once();
    metrics::gauge!(name, key => value.to_owned())
}

/// The histogram `name` labelled `key = value`, registered after describing every series once.
#[cfg(feature = "metrics")]
pub(crate) fn histogram(name: &'static str, key: &'static str, value: &str) -> metrics::Histogram {
    super::describe_once();
    metrics::histogram!(name, key => value.to_owned())
}
