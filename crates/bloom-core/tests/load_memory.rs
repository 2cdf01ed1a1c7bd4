//! Reading a filter file takes the filter's memory and one staging buffer, not twice the
//! filter: the words go into the filter's own array, allocated uninitialised, whose pages
//! are taken as the staging buffers give theirs back (`format/words.rs` `read_staged`,
//! `bit_vector.rs` `WordFill`). Measured as the process's resident peak (Linux: `VmHWM`,
//! reset through `/proc/self/clear_refs`); this file holds one test, so nothing else runs
//! in its process.
#![cfg(target_os = "linux")]

use bloom_core::{AnyFilter, BloomFilter, CountingBloomFilter, CuckooFilter};

const MIB: u64 = 1 << 20;
/// One staging buffer (`format/words.rs` `STAGE`) and room for the allocator's own (it may
/// keep the smaller staging buffers, below its `mmap` threshold).
const ONE_BUFFER: u64 = 32 * MIB + 16 * MIB;

/// A kind's name, and a file of it.
type File = (&'static str, fn() -> Vec<u8>);

/// A field of `/proc/self/status` in bytes.
fn status(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

/// How far the resident peak rose above what was resident before, while `load` ran, and
/// the size of what it loaded.
fn peak_of(load: impl FnOnce() -> AnyFilter) -> (u64, u64) {
    let before = status("VmRSS:");
    // "5" resets the peak to what is resident now (Linux 4.0 and later).
    std::fs::write("/proc/self/clear_refs", "5").expect("resetting VmHWM");
    let filter = load();
    let grown = status("VmHWM:").saturating_sub(before);
    (grown, filter.size_in_bytes() as u64)
}

#[test]
fn loading_takes_the_filter_and_one_buffer() {
    // Each over 90 MiB, so that a second copy would not fit in one buffer's allowance.
    let files: [File; 3] = [
        ("plain", || {
            BloomFilter::new(80_000_000, 0.01).unwrap().to_bytes()
        }),
        ("counting", || {
            CountingBloomFilter::new(20_000_000, 0.01)
                .unwrap()
                .to_bytes()
        }),
        ("cuckoo", || {
            CuckooFilter::new(80_000_000, 0.01).unwrap().to_bytes()
        }),
    ];
    for (kind, file) in files {
        let bytes = file();
        assert!(
            bytes.len() as u64 > 90 * MIB,
            "{kind}: {} bytes",
            bytes.len()
        );
        let (streamed, size) = peak_of(|| AnyFilter::read_from(&mut bytes.as_slice()).unwrap());
        let (in_memory, _) = peak_of(|| AnyFilter::from_bytes(&bytes).unwrap());
        println!(
            "{kind}: {} MiB filter; resident peak above the file's bytes: read_from {} MiB, from_bytes {} MiB",
            size / MIB,
            streamed / MIB,
            in_memory / MIB
        );
        assert!(
            streamed <= size + ONE_BUFFER,
            "{kind}: read_from took {streamed} bytes for a filter of {size}"
        );
        assert!(
            in_memory <= size + 16 * MIB,
            "{kind}: from_bytes took {in_memory} bytes for a filter of {size}"
        );
    }
}
