//! A filter far larger than the TLB's reach sits on 2 MiB transparent huge pages (Linux), so
//! a lookup out of cache pays its one cache miss and not a page walk as well.
//!
//! One test in its own binary: it reads the process's huge-page total before and after.

#[cfg(target_os = "linux")]
#[test]
fn a_large_filter_is_backed_by_huge_pages() {
    let mode =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    if !(mode.contains("[madvise]") || mode.contains("[always]")) {
        // Machine configuration, not a missing dependency: nothing to install.
        eprintln!("SKIPPED: transparent huge pages are off here ({mode:?})");
        return;
    }
    let before = anon_huge_kib();
    // About 230 MiB of bits (the `bloom dedup --items 100M --fpr 1e-4` filter).
    let filter = bloom_core::BloomFilter::new(100_000_000, 1e-4).unwrap();
    filter.insert(&1u64);
    let grown = anon_huge_kib() - before;
    let size_kib = filter.num_bits() / 8 / 1024;
    // Every whole 2 MiB page inside the array is advised; the kernel may fall back to small
    // pages for a few when memory is fragmented, not for most.
    assert!(
        grown >= size_kib / 2,
        "{grown} KiB of huge pages for a {size_kib} KiB filter"
    );
}

/// The process's anonymous memory on huge pages, in KiB.
#[cfg(target_os = "linux")]
fn anon_huge_kib() -> u64 {
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap();
    let line = rollup
        .lines()
        .find(|l| l.starts_with("AnonHugePages:"))
        .unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}
