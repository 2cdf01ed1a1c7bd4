//! A `FilterSet`'s budget counts at least the heap its filters really take: the bytes it
//! reports in memory are an upper bound of what a counting allocator sees, for plain and
//! windowed filters, so a budget of 256 MiB keeps the filters within 256 MiB.
#![cfg(feature = "filter-set")]

use std::time::Duration;

use bloom_core::windowed::{RingLayout, Window, WindowedBuilder, WindowedFilter};
use bloom_tower::filter_set::{FilterSet, FilterStore, StoreError};

#[path = "../../bloom-core/tests/support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::live;

/// Keeps nothing: every key is new, every store is dropped on this thread.
struct Nowhere;

impl FilterStore for Nowhere {
    async fn load(&self, _: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(None)
    }
    async fn store(&self, _: &str, _: Vec<u8>) -> Result<(), StoreError> {
        Ok(())
    }
}

const USERS: u64 = 5_000;

/// (bytes the set counts, bytes the allocator saw) per filter, for `USERS` filters.
fn per_filter(set: FilterSet<u64, Nowhere>) -> (f64, f64) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // The table's first growth and the runtime's own allocations are not per filter.
        set.insert(&u64::MAX, "warm").await.unwrap();
        let before = live();
        let counted_before = set.stats().bytes_in_memory;
        for user in 0..USERS {
            for item in 0..20u64 {
                set.insert(&user, &item).await.unwrap();
            }
        }
        let real = (live() - before) as f64 / USERS as f64;
        let counted = (set.stats().bytes_in_memory - counted_before) as f64 / USERS as f64;
        (counted, real)
    })
}

#[test]
fn the_budget_counts_at_least_the_real_heap_of_its_filters() {
    let plain = FilterSet::<u64, _>::builder(Nowhere)
        .plain(100, 0.01)
        .unwrap()
        .budget_bytes(usize::MAX)
        .build();
    let week = || {
        WindowedFilter::builder(Window::Time(Duration::from_secs(7 * 86_400)))
            .expected_items(100)
            .false_positive_rate(0.01)
            .generations(8)
    };
    let windowed = |week: WindowedBuilder| {
        FilterSet::<u64, _>::builder(Nowhere)
            .windowed(week)
            .unwrap()
            .budget_bytes(usize::MAX)
            .build()
    };
    for (kind, set) in [
        ("plain", plain),
        ("windowed, 8 generations", windowed(week())),
        (
            "windowed, 8 generations, interleaved",
            windowed(week().ring_layout(RingLayout::Interleaved)),
        ),
    ] {
        let (counted, real) = per_filter(set);
        println!("{kind}: {counted:.0} bytes counted per filter, {real:.0} allocated");
        assert!(
            counted >= real,
            "{kind}: counts {counted:.0} bytes per filter, takes {real:.0}"
        );
        assert!(
            counted <= 2.0 * real,
            "{kind}: counts {counted:.0} bytes per filter for {real:.0}: a budget that wastes half"
        );
    }
}
