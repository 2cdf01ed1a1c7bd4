//! Hostile files (issue 44): a checksum is not a MAC. A file crafted with valid checksums
//! must never make a reader panic, abort, or allocate what its bytes do not back.
//!
//! The rule (docs/FORMAT.md, "What a reader allocates"): while it reads an input of `L`
//! bytes (a manifest's generation files counted in), a reader has at most `3·L + 256 KiB`
//! allocated, the filter it returns included ([`bound`]). A windowed filter's generation
//! stored empty is not allocated until a key goes into it.
//!
//! The bytes a thread has allocated are counted by this binary's global allocator
//! ([`Counting`]), per thread, so tests running in parallel do not see each other's.
//!
//! * every kind, crafted by hand: headers that claim huge sizes and counts (m up to
//!   `u64::MAX`, 2^40 bits, 65 generations of 10^9 keys, 2^32 stages, stage lengths of
//!   `u64::MAX`, 2^40-bit cuckoo tables, a 1 MiB label), with valid checksums;
//! * real files of every kind with their header fields changed, checksums fixed: each
//!   field alone at a few values (`every_field_of_every_real_file_changed_alone_stays_within_the_bound`)
//!   and up to three at once, seeded
//!   (`mutated_headers_of_real_files_never_panic_and_stay_within_the_bound`).
//!
//! Breaking the rule fails them: allocating a windowed filter's empty generations while
//! reading (what the reader did before) fails four tests, among them both over real files;
//! a first staging buffer of 32 MiB, or the word array allocated before the words arrive,
//! three; a label buffer of the length it claims, one.

use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::cell::Cell;
use std::io::{self, Read};
use std::sync::Arc;
use std::time::Duration;

use bloom_core::windowed::{
    GenerationFile, INTERLEAVE_FROM_BYTES, ManualClock, RingLayout, Window, WindowedFilter,
};
use bloom_core::{
    AnyFilter, BloomFilter, CountingBloomFilter, CuckooFilter, DecodeError, Layout, MAGIC,
    ScalableBloomFilter, Snapshot, SnapshotLabel,
};
use crc::{CRC_32_ISCSI, Crc};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

// ---------------------------------------------------------------------------------------
// Counting what a thread allocates

struct Counting;

thread_local! {
    /// Bytes this thread has live on the heap, and the most it had since [`peak_during`]
    /// last reset it.
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn count(bytes: usize, sign: isize) {
    // `try_with`: a thread being torn down has no counters left; nothing to measure then.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + sign * bytes as isize;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

/// An allocation the system refused still counts toward the peak: a reader must not even
/// ask for what its input does not back.
fn refused(bytes: usize) {
    let _ = LIVE.try_with(|live| {
        let asked = live.get() + bytes as isize;
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(asked)));
    });
}

/// Counts an allocation of `bytes` that returned `ptr`.
fn counted_alloc(ptr: *mut u8, bytes: usize) -> *mut u8 {
    if ptr.is_null() {
        refused(bytes);
    } else {
        count(bytes, 1);
    }
    ptr
}

// SAFETY: forwards to the system allocator unchanged; only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: AllocLayout) -> *mut u8 {
        // SAFETY: the caller's contract is System's.
        counted_alloc(unsafe { System.alloc(layout) }, layout.size())
    }
    unsafe fn alloc_zeroed(&self, layout: AllocLayout) -> *mut u8 {
        // SAFETY: as above.
        counted_alloc(unsafe { System.alloc_zeroed(layout) }, layout.size())
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: AllocLayout) {
        count(layout.size(), -1);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: AllocLayout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        // Counted as a move: the new block, then the old one freed (both live meanwhile).
        if counted_alloc(new, new_size).is_null() {
            return new;
        }
        count(layout.size(), -1);
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// What `f` returns, and the most this thread had allocated meanwhile beyond what it had
/// before (what `f` returns, if it is still held, included).
fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let start = LIVE.with(Cell::get);
    PEAK.with(|peak| peak.set(start));
    let out = f();
    let peak = PEAK.with(Cell::get);
    (out, (peak - start).max(0) as usize)
}

/// The documented bound: bytes a reader may have allocated after reading `read` bytes.
fn bound(read: u64) -> u64 {
    3 * read + 256 * 1024
}

/// A reader that counts the bytes taken from it.
struct Counted<R> {
    inner: R,
    read: Arc<std::sync::atomic::AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read
            .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

fn counted(bytes: &[u8]) -> (Counted<&[u8]>, Arc<std::sync::atomic::AtomicU64>) {
    let read = Arc::new(std::sync::atomic::AtomicU64::new(0));
    (
        Counted {
            inner: bytes,
            read: read.clone(),
        },
        read,
    )
}

/// The outcome of one reader on one input: whether it loaded a filter, and the bytes it
/// read and allocated (at most).
struct Outcome {
    reader: &'static str,
    loaded: Option<AnyFilter>,
    error: Option<String>,
    peak: u64,
}

/// Every reader of `bytes` (each kind's `from_bytes` and `read_from`, [`AnyFilter`]'s,
/// [`Snapshot`]'s, and the windowed reader on a fixed clock and as a manifest whose files
/// are `files`): each answers (no panic), and each stays within [`bound`] of what it read.
fn read_every_way(bytes: &[u8], files: &[(GenerationFile, Vec<u8>)]) -> Vec<Outcome> {
    read_by(bytes, files, |_| true)
}

/// Reads `bytes` every way (each reader within the bound) and asserts that none loaded it.
fn assert_refused_every_way(bytes: &[u8], what: &dyn std::fmt::Display) {
    let outcomes = read_every_way(bytes, &[]);
    assert!(outcomes.iter().all(|o| o.loaded.is_none()), "{what}");
}

/// [`read_every_way`] with the readers `pick` names.
fn read_by(
    bytes: &[u8],
    files: &[(GenerationFile, Vec<u8>)],
    pick: impl Fn(&str) -> bool,
) -> Vec<Outcome> {
    type Reader = fn(&[u8], &[(GenerationFile, Vec<u8>)]) -> (Result<AnyFilter, DecodeError>, u64);
    fn sliced<F>(
        read: impl Fn(&[u8]) -> Result<F, DecodeError>,
        bytes: &[u8],
    ) -> (Result<AnyFilter, DecodeError>, u64)
    where
        AnyFilter: From<F>,
    {
        (read(bytes).map(AnyFilter::from), bytes.len() as u64)
    }
    fn streamed<F>(
        read: impl Fn(&mut Counted<&[u8]>) -> Result<F, DecodeError>,
        bytes: &[u8],
    ) -> (Result<AnyFilter, DecodeError>, u64)
    where
        AnyFilter: From<F>,
    {
        let (mut r, n) = counted(bytes);
        let out = read(&mut r).map(AnyFilter::from);
        (out, n.load(std::sync::atomic::Ordering::Relaxed))
    }
    let readers: [(&'static str, Reader); 14] = [
        ("BloomFilter::from_bytes", |b, _| {
            sliced(BloomFilter::from_bytes, b)
        }),
        ("BloomFilter::read_from", |b, _| {
            streamed(|r| BloomFilter::read_from(r), b)
        }),
        ("CountingBloomFilter::from_bytes", |b, _| {
            sliced(CountingBloomFilter::from_bytes, b)
        }),
        ("CountingBloomFilter::read_from", |b, _| {
            streamed(|r| CountingBloomFilter::read_from(r), b)
        }),
        ("ScalableBloomFilter::from_bytes", |b, _| {
            sliced(ScalableBloomFilter::from_bytes, b)
        }),
        ("ScalableBloomFilter::read_from", |b, _| {
            streamed(|r| ScalableBloomFilter::read_from(r), b)
        }),
        ("CuckooFilter::from_bytes", |b, _| {
            sliced(CuckooFilter::from_bytes, b)
        }),
        ("CuckooFilter::read_from", |b, _| {
            streamed(|r| CuckooFilter::read_from(r), b)
        }),
        ("WindowedFilter::from_bytes", |b, _| {
            sliced(WindowedFilter::from_bytes, b)
        }),
        ("WindowedFilter::read_from_with_clock", |b, _| {
            streamed(
                |r| WindowedFilter::read_from_with_clock(r, Arc::new(ManualClock::new(NOW))),
                b,
            )
        }),
        ("WindowedFilter::read_split_with_clock", |b, files| {
            let (mut r, n) = counted(b);
            let opened = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let out = WindowedFilter::read_split_with_clock(
                &mut r,
                Arc::new(ManualClock::new(NOW)),
                |wanted| {
                    let bytes = files
                        .iter()
                        .find(|(f, _)| f.epoch == wanted.epoch)
                        .map_or(&[][..], |(_, bytes)| bytes.as_slice());
                    Ok(Counted {
                        inner: bytes,
                        read: opened.clone(),
                    })
                },
            );
            let read = n.load(std::sync::atomic::Ordering::Relaxed)
                + opened.load(std::sync::atomic::Ordering::Relaxed);
            (out.map(|(f, _)| AnyFilter::from(f)), read)
        }),
        ("AnyFilter::from_bytes", |b, _| {
            sliced(AnyFilter::from_bytes, b)
        }),
        ("AnyFilter::read_from", |b, _| {
            streamed(|r| AnyFilter::read_from(r), b)
        }),
        ("Snapshot::read_from", |b, _| {
            streamed(|r| Snapshot::read_from(r).map(|s| s.filter), b)
        }),
    ];
    readers
        .into_iter()
        .filter(|(reader, _)| pick(reader))
        .map(|(reader, read)| {
            let ((result, read), peak) = peak_during(|| read(bytes, files));
            let peak = peak as u64;
            assert!(
                peak <= bound(read),
                "{reader}: {peak} bytes allocated after reading {read} (bound {}): {result:?}",
                bound(read)
            );
            let (loaded, error) = match result {
                Ok(f) => (Some(f), None),
                Err(e) => (None, Some(e.to_string())),
            };
            Outcome {
                reader,
                loaded,
                error,
                peak,
            }
        })
        .collect()
}

/// The most any reader allocated on `bytes`, for the report.
fn max_peak(outcomes: &[Outcome]) -> u64 {
    outcomes.iter().map(|o| o.peak).max().unwrap_or(0)
}

/// "Now" for the readers on a fixed clock: 2023-11-14, epoch 0 of every crafted file long
/// past for a time window.
const NOW: u64 = 1_700_000_000_000;

// ---------------------------------------------------------------------------------------
// Crafting files

const CRC32C: Crc<u32> = Crc::<u32>::new(&CRC_32_ISCSI);

fn crc(bytes: &[u8]) -> u32 {
    CRC32C.checksum(bytes)
}

/// A 64-byte header of `kind` with the six fields as docs/FORMAT.md names them.
#[allow(clippy::too_many_arguments)] // the six fields of docs/FORMAT.md's table, in order
fn header(kind: u8, layout: u8, a: u32, b: u64, seed: u128, c: u64, d: u64, e: u64) -> Vec<u8> {
    let mut h = Vec::with_capacity(64);
    h.extend_from_slice(&MAGIC);
    h.extend_from_slice(&1u16.to_le_bytes());
    h.extend_from_slice(&[kind, layout]);
    h.extend_from_slice(&a.to_le_bytes());
    h.extend_from_slice(&b.to_le_bytes());
    h.extend_from_slice(&seed.to_le_bytes());
    h.extend_from_slice(&c.to_le_bytes());
    h.extend_from_slice(&d.to_le_bytes());
    h.extend_from_slice(&e.to_le_bytes());
    h
}

/// `bytes` followed by their checksum.
fn sealed(mut bytes: Vec<u8>) -> Vec<u8> {
    let sum = crc(&bytes);
    bytes.extend_from_slice(&sum.to_le_bytes());
    bytes
}

/// A kind-0 or kind-1 file: header, `body`, checksum.
fn words_file(kind: u8, layout: u8, k: u32, m: u64, words: u64, body: &[u8]) -> Vec<u8> {
    let mut bytes = header(kind, layout, k, m, 7, 0, 0, words);
    bytes.extend_from_slice(body);
    sealed(bytes)
}

/// How a crafted windowed container stores one generation.
enum Stored {
    Empty,
    /// A length, then that many bytes of a kind-0 file (checksummed by its own trailer).
    File(u64, Vec<u8>),
    /// A manifest's entry: a length and a file's checksum.
    Named(u64, u32),
}

/// A kind-4 container: header, epoch, inserts, the generations, the container's checksum
/// (over everything but the generations' files).
#[allow(clippy::too_many_arguments)]
fn windowed_file(
    layout: u8,
    first: u32,
    length: u64,
    n: u64,
    p: f64,
    period: u64,
    state: (u64, u64),
    generations: &[Stored],
) -> Vec<u8> {
    let mut out = header(4, layout, first, length, 7, n, p.to_bits(), period);
    out.extend_from_slice(&state.0.to_le_bytes());
    out.extend_from_slice(&state.1.to_le_bytes());
    let mut sum = CRC32C.digest();
    sum.update(&out);
    for g in generations {
        match g {
            Stored::Empty => {
                sum.update(&0u64.to_le_bytes());
                out.extend_from_slice(&0u64.to_le_bytes());
            }
            Stored::File(len, file) => {
                sum.update(&len.to_le_bytes());
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(file);
            }
            Stored::Named(len, file_crc) => {
                for piece in [&len.to_le_bytes()[..], &file_crc.to_le_bytes()[..]] {
                    sum.update(piece);
                    out.extend_from_slice(piece);
                }
            }
        }
    }
    out.extend_from_slice(&sum.finalize().to_le_bytes());
    out
}

/// Bit 8 of a windowed header's first field: a window of inserts.
const COUNT: u32 = 1 << 8;
/// Bit 9: a manifest.
const SPLIT: u32 = 1 << 9;

/// The trigger: N = 64 (65 generations) stored empty, each sized for
/// `per_generation` keys at a 1% window rate; 604 bytes.
fn empty_ring(per_generation: u64, first_bits: u32) -> Vec<u8> {
    let generations: Vec<Stored> = (0..65).map(|_| Stored::Empty).collect();
    windowed_file(
        1,
        64 | first_bits,
        63,
        per_generation.saturating_mul(63),
        0.01,
        1,
        (0, 0),
        &generations,
    )
}

// ---------------------------------------------------------------------------------------
// Kind 4: the trigger, and generations that claim more than they hold

/// The file: 65 generations stored empty and sized for 10^7 or 10^9 keys each
/// (1.5 GB and 150 GB of bits) load as the empty filter they are, allocating none of the
/// generations: its stats (what `bloom stats` prints) read nothing, a lookup finds nothing.
/// Sized past 2^40 bits a generation, the file is refused.
#[test]
fn a_ring_of_empty_generations_sized_huge_loads_without_allocating_them() {
    for per_generation in [10_000_000u64, 1_000_000_000] {
        for window in [COUNT, 0] {
            let bytes = empty_ring(per_generation, window);
            assert_eq!(bytes.len(), 604);
            let outcomes = read_every_way(&bytes, &[]);
            for o in &outcomes {
                let windowed = o.reader.starts_with("Windowed")
                    || o.reader.starts_with("Any")
                    || o.reader.starts_with("Snapshot");
                if !windowed {
                    assert!(o.loaded.is_none(), "{}", o.reader);
                    continue;
                }
                let f = o
                    .loaded
                    .as_ref()
                    .unwrap_or_else(|| panic!("{}: {:?}", o.reader, o.error));
                let w = f.as_windowed().unwrap();
                let ((), peak) = peak_during(|| {
                    assert!(!w.contains("absent"));
                    assert_eq!(w.count_ones(), 0);
                    assert_eq!(w.estimated_items(), 0.0);
                    assert_eq!(w.fill_ratio(), 0.0);
                    assert_eq!(w.current_fpr(), 0.0);
                    assert!(w.epochs_with_keys().is_empty());
                });
                assert!(
                    peak < 64 * 1024,
                    "{}: its stats allocated {peak} bytes",
                    o.reader
                );
                // What the file describes, not what it holds: 65 generations of m bits.
                assert!(w.num_bits() >= 65 * per_generation * 8, "{}", o.reader);
            }
            println!(
                "65 empty generations of {per_generation} keys ({} bytes of bits claimed), window bits {window:#x}: peak {} bytes",
                outcomes
                    .iter()
                    .find_map(|o| o.loaded.as_ref().and_then(AnyFilter::as_windowed))
                    .map_or(0, WindowedFilter::size_in_bytes),
                max_peak(&outcomes)
            );
        }
    }
    for per_generation in [1_000_000_000_000u64, u64::MAX / 63, u64::MAX] {
        assert_refused_every_way(&empty_ring(per_generation, COUNT), &per_generation);
    }
}

/// A ring large enough to be interleaved (`windowed/ring.rs`), written interleaved and
/// storing from one to all of its generations, is read separate by every reader, on the file
/// and on the manifest and its generation files, within the bound (an interleaved ring is
/// allocated whole: a file storing one generation of 65 would cost 65 times its bytes), with
/// every key found; interleaved on request afterwards, it still finds every key.
#[test]
fn a_ring_is_read_separate_and_interleaved_on_request() {
    for generations in [4u32, 8, 64] {
        let ring = generations as usize + 1;
        for stored in [1, ring.div_ceil(2), ring - 1] {
            let (bytes, files, keys) = ring_storing(generations, stored);
            let outcomes = read_every_way(&bytes, &[]);
            let outcomes_split = read_every_way(&split_manifest(&bytes, &files), &files);
            let mut loaded = 0;
            for o in outcomes.into_iter().chain(outcomes_split) {
                // The readers on the system clock see every epoch long expired (and drop
                // them unread); those on the file's clock see every one of them.
                let Some(AnyFilter::Windowed(w)) = o.loaded else {
                    continue;
                };
                assert_eq!(w.ring_layout(), RingLayout::Separate, "{}", o.reader);
                if !o.reader.ends_with("_with_clock") {
                    continue;
                }
                loaded += 1;
                assert!(keys.iter().all(|k| w.contains(k)), "{}", o.reader);
                let interleaved = w.into_ring_layout(RingLayout::Interleaved).unwrap();
                assert!(keys.iter().all(|k| interleaved.contains(k)), "{}", o.reader);
            }
            assert!(
                loaded >= 2,
                "N = {generations}, {stored} stored: {loaded} loaded"
            );
        }
    }
}

/// Generation files and their bytes, for a manifest's reader.
type GenerationFiles = Vec<(GenerationFile, Vec<u8>)>;

/// A time window of `generations`, sized so that its ring takes more than
/// [`INTERLEAVE_FROM_BYTES`], with a key in each of its last `stored` epochs (the newest at
/// [`NOW`]): its file, its generation files (for a manifest) and its keys.
fn ring_storing(generations: u32, stored: usize) -> (Vec<u8>, GenerationFiles, Vec<String>) {
    let period = 60_000u64;
    let clock = Arc::new(ManualClock::new(NOW - (stored as u64 - 1) * period));
    let f = WindowedFilter::builder(Window::Time(Duration::from_millis(
        period * u64::from(generations - 1),
    )))
    .expected_items(600_000)
    .false_positive_rate(0.01)
    .generations(generations)
    .ring_layout(RingLayout::Interleaved)
    .clock(clock.clone())
    .seed(7)
    .build()
    .unwrap();
    assert!(f.size_in_bytes() >= INTERLEAVE_FROM_BYTES);
    let mut keys = Vec::new();
    for i in 0..stored {
        if i > 0 {
            clock.advance(Duration::from_millis(period));
        }
        keys.push(format!("key {i}"));
        f.insert(&keys[i]);
    }
    assert_eq!(f.epochs_with_keys().len(), stored);
    let files = f
        .epochs_with_keys()
        .into_iter()
        .map(|e| {
            let mut bytes = Vec::new();
            (f.write_generation_to(e, &mut bytes).unwrap(), bytes)
        })
        .collect();
    (f.to_bytes(), files, keys)
}

/// The manifest of the filter in `bytes` naming `files`.
fn split_manifest(bytes: &[u8], files: &[(GenerationFile, Vec<u8>)]) -> Vec<u8> {
    let f = WindowedFilter::read_from_with_clock(&mut &bytes[..], Arc::new(ManualClock::new(NOW)))
        .unwrap();
    let named: Vec<GenerationFile> = files.iter().map(|(g, _)| *g).collect();
    let mut manifest = Vec::new();
    f.write_split_to(&mut manifest, &named).unwrap();
    manifest
}

/// Generations stored with a length that matches huge settings but with bytes that end
/// early, as a file and as a manifest (whose generation files are short or missing), are
/// refused after allocating what the bytes back.
#[test]
fn generations_that_claim_more_than_their_bytes_are_refused() {
    // 10^9 keys a generation, 1% over N = 64: a generation's file would be about 2.3 GB.
    let n = 1_000_000_000u64 * 63;
    let sized = bloom_core::params::for_layout(
        Layout::Blocked,
        1_000_000_000,
        1.0 - 0.99f64.powf(1.0 / 64.0),
    )
    .unwrap();
    let words = sized.bits.div_ceil(64);
    let len = 64 + 8 * words + 4;
    let gen_header = header(0, 1, sized.hashes, sized.bits, 7, 1_000_000_000, 0, words);
    for body in [0usize, 1_000, 300_000] {
        let mut file = gen_header.clone();
        file.extend((0..body).map(|i| i as u8));
        let mut generations: Vec<Stored> = (0..64).map(|_| Stored::Empty).collect();
        generations.insert(0, Stored::File(len, file.clone()));
        let bytes = windowed_file(1, 64 | COUNT, 63, n, 0.01, 1, (0, 0), &generations);
        let outcomes = read_every_way(&bytes, &[]);
        assert!(outcomes.iter().all(|o| o.loaded.is_none()));
        println!(
            "a generation of {len} bytes claimed, {body} stored: peak {}",
            max_peak(&outcomes)
        );

        let named = GenerationFile {
            epoch: 0,
            checksum: 0x1234_5678,
        };
        let mut entries: Vec<Stored> = (0..64).map(|_| Stored::Empty).collect();
        entries.insert(0, Stored::Named(len, named.checksum));
        let manifest = windowed_file(1, 64 | COUNT | SPLIT, 63, n, 0.01, 1, (0, 0), &entries);
        let outcomes = read_every_way(&manifest, &[(named, file)]);
        assert!(outcomes.iter().all(|o| o.loaded.is_none()));
    }
}

/// A manifest and a single file whose every field is at an extreme (N, the window, n, the
/// period, the epoch, the insert count, generation lengths up to `u64::MAX`): refused or
/// small, never a panic.
#[test]
fn windowed_headers_at_every_extreme_are_refused_or_small() {
    let extremes = [0u64, 1, 63, 64, 1 << 40, u64::MAX];
    for &first in &[
        0u32,
        1,
        2,
        64,
        65,
        255,
        64 | COUNT,
        64 | SPLIT,
        2 | COUNT | SPLIT,
        u32::MAX,
    ] {
        for &length in &extremes {
            for &epoch in &[0u64, u64::MAX] {
                let n_gen = (first & 0xFF).clamp(2, 64) as u64;
                let period = length.div_ceil(n_gen - 1).max(1);
                let entries: Vec<Stored> = (0..=n_gen)
                    .map(|i| match i % 3 {
                        0 => Stored::Empty,
                        1 => Stored::Named(u64::MAX, 0),
                        _ => Stored::File(u64::MAX, Vec::new()),
                    })
                    .collect();
                let bytes = windowed_file(
                    1,
                    first,
                    length,
                    length.max(1),
                    0.01,
                    period,
                    (epoch, epoch),
                    &entries,
                );
                read_every_way(&bytes, &[]);
                let bytes = windowed_file(
                    1,
                    first,
                    length,
                    length.max(1),
                    0.01,
                    period,
                    (epoch, epoch),
                    &[],
                );
                read_every_way(&bytes, &[]);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Kinds 0 and 1, 2, 3, and the snapshot label

/// Plain and counting files claiming up to 2^40 slots (m up to `u64::MAX`, W to match or
/// not) with a short body and a valid checksum are refused within the bound.
#[test]
fn plain_and_counting_files_claiming_huge_sizes_are_refused() {
    for kind in [0u8, 1] {
        let per_word = if kind == 0 { 64 } else { 16 };
        for layout in [0u8, 1, 2] {
            let k = if layout == 2 { 8 } else { 7 };
            for m in [
                1u64 << 40,
                (1 << 40) + 512,
                1 << 39,
                u64::MAX - 511,
                u64::MAX,
            ] {
                for words in [m.div_ceil(per_word), u64::MAX, 1] {
                    for body in [0usize, 8, 70_000] {
                        let bytes = words_file(kind, layout, k, m, words, &vec![0u8; body]);
                        assert_refused_every_way(&bytes, &format_args!("m {m}, W {words}"));
                    }
                }
            }
        }
    }
}

/// Scalable files claiming up to 2^32 stages, stages of `u64::MAX` bytes, stage files
/// that claim 2^40 bits, and a first capacity of `u64::MAX`, with valid checksums (the
/// container's and each stage's): refused within the bound.
#[test]
fn scalable_files_claiming_huge_stages_are_refused() {
    let growth = 2.0f64.to_bits();
    let (p, r) = (0.01f64.to_bits(), 0.5f64.to_bits());
    let huge_stage = words_file(0, 1, 7, 1 << 40, 1 << 34, &[0u8; 4096]);
    for stages in [0u32, 1, 64, 65, u32::MAX] {
        for n0 in [1u64, 1 << 40, u64::MAX] {
            for (items, len, file) in [
                (0u64, u64::MAX, &[][..]),
                (0, 1 << 37, &huge_stage[..]),
                (0, huge_stage.len() as u64, &huge_stage[..]),
                (u64::MAX, huge_stage.len() as u64, &huge_stage[..]),
            ] {
                let mut bytes = header(2, 1, stages, n0, 7, growth, p, r);
                bytes.extend_from_slice(&items.to_le_bytes());
                bytes.extend_from_slice(&len.to_le_bytes());
                bytes.extend_from_slice(file);
                let bytes = sealed(bytes);
                assert_refused_every_way(&bytes, &format_args!("S {stages}, n0 {n0}"));
            }
        }
    }
}

/// Cuckoo files claiming tables of up to 2^40 bits (buckets up to `u64::MAX`) with a short
/// body and a valid checksum: refused within the bound.
#[test]
fn cuckoo_files_claiming_huge_tables_are_refused() {
    for f in [5u32, 12, 17] {
        let bucket_bits = 4 * u64::from(f) - 4;
        for buckets in [
            (1u64 << 40) / bucket_bits,
            1 << 40,
            u64::MAX / bucket_bits,
            u64::MAX,
        ] {
            let words = buckets.saturating_mul(bucket_bits).div_ceil(64);
            for body in [0usize, 64, 70_000] {
                let mut bytes = header(3, 0, f | 4 << 8, buckets, 7, 0, 0, words);
                bytes.extend(std::iter::repeat_n(0u8, body));
                assert_refused_every_way(&sealed(bytes), &format_args!("f {f}, {buckets} buckets"));
            }
        }
    }
}

/// A snapshot label that claims 1 MiB (the most a reader accepts), or more, with a few
/// bytes behind it: refused having allocated what arrived, not the megabyte.
#[test]
fn a_snapshot_label_claiming_a_megabyte_allocates_what_arrives() {
    for len in [1u32 << 20, (1 << 20) + 1, u32::MAX] {
        for tail in [0usize, 10, 4096] {
            let mut bytes = bloom_core::format::SNAPSHOT_MAGIC.to_vec();
            bytes.extend_from_slice(&1u16.to_le_bytes());
            bytes.extend_from_slice(&len.to_le_bytes());
            bytes.extend(std::iter::repeat_n(7u8, tail));
            let outcomes = read_every_way(&bytes, &[]);
            assert!(outcomes.iter().all(|o| o.loaded.is_none()));
            let snapshot = outcomes
                .iter()
                .find(|o| o.reader == "Snapshot::read_from")
                .unwrap();
            println!(
                "a label of {len} bytes claimed, {tail} present: peak {}",
                snapshot.peak
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// Real files, mutated

/// A real file of each kind, and the checksums to fix after a change to its bytes.
struct Real {
    name: &'static str,
    bytes: Vec<u8>,
    /// The generation files of a manifest.
    files: Vec<(GenerationFile, Vec<u8>)>,
    /// Where the fields a mutation may change are: (offset, width in bytes).
    fields: Vec<(usize, usize)>,
    /// How to make the checksums valid again, innermost first.
    fix: fn(&mut [u8], &Structure),
    structure: Structure,
}

/// What [`Real::fix`] needs: the ranges of the inner files (stages, generations), and
/// where the manifest's checksum entries are.
#[derive(Clone, Default)]
struct Structure {
    /// `start..end` of each stage's or generation's own file in the container.
    inner: Vec<std::ops::Range<usize>>,
    /// Where the label's checksum is (a snapshot).
    label_end: Option<usize>,
}

/// The header fields every kind has, at offsets 12 (u32), 16, 40, 48 and 56 (u64), from
/// `start`.
fn header_fields(start: usize) -> Vec<(usize, usize)> {
    vec![
        (start + 12, 4),
        (start + 16, 8),
        (start + 40, 8),
        (start + 48, 8),
        (start + 56, 8),
    ]
}

fn fix_whole(bytes: &mut [u8], _: &Structure) {
    let end = bytes.len() - 4;
    let sum = crc(&bytes[..end]);
    bytes[end..].copy_from_slice(&sum.to_le_bytes());
}

fn fix_inner(bytes: &mut [u8], s: &Structure) {
    for range in &s.inner {
        let end = range.end - 4;
        let sum = crc(&bytes[range.start..end]);
        bytes[end..range.end].copy_from_slice(&sum.to_le_bytes());
    }
}

fn fix_stages(bytes: &mut [u8], s: &Structure) {
    fix_inner(bytes, s);
    fix_whole(bytes, s);
}

/// A windowed file: each generation's file, then the container's checksum over the rest.
fn fix_windowed(bytes: &mut [u8], s: &Structure) {
    fix_inner(bytes, s);
    let end = bytes.len() - 4;
    let mut sum = CRC32C.digest();
    let mut at = 0;
    for range in &s.inner {
        sum.update(&bytes[at..range.start]);
        at = range.end;
    }
    sum.update(&bytes[at..end]);
    let sum = sum.finalize();
    bytes[end..].copy_from_slice(&sum.to_le_bytes());
}

fn fix_snapshot(bytes: &mut [u8], s: &Structure) {
    let end = s.label_end.unwrap();
    let sum = crc(&bytes[..end]);
    bytes[end..end + 4].copy_from_slice(&sum.to_le_bytes());
    fix_whole(&mut bytes[end + 4..], s);
}

fn insert_some(f: &AnyFilter, tag: &str) {
    for i in 0..40 {
        f.insert(&format!("{tag}:{i}"));
    }
}

/// Real files of every kind and shape (each layout, counting, scalable with three stages,
/// cuckoo, windowed by count and by time with stored and empty generations, a manifest
/// and its generation files, a labelled snapshot).
fn real_files() -> Vec<Real> {
    let mut out = Vec::new();
    for layout in [Layout::Classic, Layout::Blocked, Layout::SplitBlock] {
        let f = AnyFilter::from(
            BloomFilter::builder()
                .expected_items(100)
                .false_positive_rate(0.01)
                .layout(layout)
                .seed(1)
                .build()
                .unwrap(),
        );
        insert_some(&f, "plain");
        out.push(Real {
            name: "plain",
            bytes: f.to_bytes(),
            files: Vec::new(),
            fields: header_fields(0),
            fix: fix_whole,
            structure: Structure::default(),
        });
    }
    let counting = AnyFilter::from(CountingBloomFilter::new(100, 0.01).unwrap());
    insert_some(&counting, "counting");
    out.push(Real {
        name: "counting",
        bytes: counting.to_bytes(),
        files: Vec::new(),
        fields: header_fields(0),
        fix: fix_whole,
        structure: Structure::default(),
    });
    let cuckoo = AnyFilter::from(CuckooFilter::new(100, 0.01).unwrap());
    insert_some(&cuckoo, "cuckoo");
    out.push(Real {
        name: "cuckoo",
        bytes: cuckoo.to_bytes(),
        files: Vec::new(),
        fields: header_fields(0),
        fix: fix_whole,
        structure: Structure::default(),
    });

    let scalable = ScalableBloomFilter::new(10, 0.01).unwrap();
    for i in 0..60 {
        scalable.insert(&i);
    }
    let bytes = scalable.to_bytes();
    let (mut fields, mut inner, mut at) = (header_fields(0), Vec::new(), 64);
    while at < bytes.len() - 4 {
        fields.extend([(at, 8), (at + 8, 8)]); // items, length
        let len = u64::from_le_bytes(bytes[at + 8..at + 16].try_into().unwrap()) as usize;
        fields.extend(header_fields(at + 16));
        inner.push(at + 16..at + 16 + len);
        at += 16 + len;
    }
    out.push(Real {
        name: "scalable",
        bytes,
        files: Vec::new(),
        fields,
        fix: fix_stages,
        structure: Structure {
            inner,
            label_end: None,
        },
    });

    let clock = Arc::new(ManualClock::new(NOW - 3_600_000));
    let by_count = WindowedFilter::builder(Window::Count(300))
        .expected_items(300)
        .false_positive_rate(0.01)
        .generations(5)
        .seed(2)
        .build()
        .unwrap();
    let by_time = WindowedFilter::builder(Window::Time(Duration::from_secs(4 * 3_600)))
        .expected_items(300)
        .false_positive_rate(0.01)
        .generations(4)
        .clock(clock.clone())
        .seed(3)
        .build()
        .unwrap();
    for i in 0..200 {
        by_count.insert(&i);
        by_time.insert(&i);
        if i % 50 == 0 {
            clock.advance(Duration::from_secs(3_600));
        }
    }
    // Saved before any key (every generation stored empty), and N = 64 with one generation
    // stored: a header change there is what the file is.
    let new = WindowedFilter::builder(Window::Count(1_000))
        .expected_items(1_000)
        .false_positive_rate(0.01)
        .generations(64)
        .seed(4)
        .build()
        .unwrap();
    let one = WindowedFilter::builder(Window::Time(Duration::from_secs(64 * 3_600)))
        .expected_items(6_300)
        .false_positive_rate(0.01)
        .generations(64)
        .clock(Arc::new(ManualClock::new(NOW)))
        .seed(5)
        .build()
        .unwrap();
    one.insert("one");
    for (name, f) in [
        ("windowed by count", &by_count),
        ("windowed by time", &by_time),
        ("windowed, new", &new),
        ("windowed, 64 generations, one stored", &one),
    ] {
        let bytes = f.to_bytes();
        let (mut fields, mut inner, mut at) = (header_fields(0), Vec::new(), 80);
        fields.extend([(64, 8), (72, 8)]); // epoch, inserts
        while at < bytes.len() - 4 {
            fields.push((at, 8));
            let len = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
            if len > 0 {
                fields.extend(header_fields(at + 8));
                inner.push(at + 8..at + 8 + len);
            }
            at += 8 + len;
        }
        out.push(Real {
            name,
            bytes,
            files: Vec::new(),
            fields,
            fix: fix_windowed,
            structure: Structure {
                inner,
                label_end: None,
            },
        });
        // The same as a manifest and its files.
        let files: Vec<(GenerationFile, Vec<u8>)> = f
            .epochs_with_keys()
            .into_iter()
            .map(|e| {
                let mut bytes = Vec::new();
                let named = f.write_generation_to(e, &mut bytes).unwrap();
                (named, bytes)
            })
            .collect();
        let mut manifest = Vec::new();
        let named: Vec<GenerationFile> = files.iter().map(|(g, _)| *g).collect();
        f.write_split_to(&mut manifest, &named).unwrap();
        let mut fields = header_fields(0);
        fields.extend([(64, 8), (72, 8)]);
        let mut at = 80;
        while at < manifest.len() - 4 {
            let len = u64::from_le_bytes(manifest[at..at + 8].try_into().unwrap());
            fields.push((at, 8));
            at += if len == 0 { 8 } else { 12 };
        }
        out.push(Real {
            name: "manifest",
            bytes: manifest,
            files,
            fields,
            fix: fix_whole,
            structure: Structure::default(),
        });
    }

    let labelled = AnyFilter::from(BloomFilter::new(100, 0.01).unwrap());
    insert_some(&labelled, "snapshot");
    let mut bytes = Vec::new();
    let label = SnapshotLabel::new("users").with_watermark(vec![1, 2, 3]);
    Snapshot::write(&mut bytes, &label, &labelled).unwrap();
    let label_len = u32::from_le_bytes(bytes[10..14].try_into().unwrap()) as usize;
    let filter_at = 14 + label_len + 4;
    let mut fields = vec![(10, 4), (22, 2), (24 + 5 + 1, 4)]; // L, N, W
    fields.extend(header_fields(filter_at));
    out.push(Real {
        name: "snapshot",
        bytes,
        files: Vec::new(),
        fields,
        fix: fix_snapshot,
        structure: Structure {
            inner: Vec::new(),
            label_end: Some(14 + label_len),
        },
    });
    out
}

/// Every real file loads as it is, with every reader of its kind, within the bound.
#[test]
fn real_files_load_within_the_bound() {
    for real in real_files() {
        let outcomes = read_every_way(&real.bytes, &real.files);
        assert!(
            outcomes.iter().any(|o| o.loaded.is_some()),
            "{}: {:?}",
            real.name,
            outcomes.iter().map(|o| &o.error).collect::<Vec<_>>()
        );
        // The fix functions are right: fixing an unchanged file leaves it unchanged.
        let mut fixed = real.bytes.clone();
        (real.fix)(&mut fixed, &real.structure);
        assert_eq!(fixed, real.bytes, "{}", real.name);
    }
}

/// A value for a mutated field: an extreme, a power of two, a small change of the old
/// value, or anything.
fn field_value() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        prop::sample::select(vec![
            0u64,
            1,
            2,
            63,
            64,
            65,
            255,
            256,
            512,
            u32::MAX as u64,
            u64::MAX
        ])
        .prop_map(Mutation::Set),
        (0u32..64).prop_map(|s| Mutation::Set(1 << s)),
        (-3i64..=3).prop_map(Mutation::Add),
        (0u32..64).prop_map(Mutation::Flip),
        (1u32..=24).prop_map(Mutation::Scale),
        any::<u64>().prop_map(Mutation::Set),
    ]
}

#[derive(Clone, Copy, Debug)]
enum Mutation {
    Set(u64),
    Add(i64),
    Flip(u32),
    /// The old value times `2^k`: a file that claims `2^k` times more than it holds.
    Scale(u32),
}

fn apply(bytes: &mut [u8], (at, width): (usize, usize), m: Mutation) {
    let mut old = [0u8; 8];
    old[..width].copy_from_slice(&bytes[at..at + width]);
    let old = u64::from_le_bytes(old);
    let new = match m {
        Mutation::Set(v) => v,
        Mutation::Add(d) => old.wrapping_add_signed(d),
        Mutation::Flip(bit) => old ^ (1 << (bit % (8 * width as u32))),
        Mutation::Scale(k) => old
            .checked_shl(k)
            .filter(|v| v >> k == old)
            .unwrap_or(u64::MAX),
    };
    bytes[at..at + width].copy_from_slice(&new.to_le_bytes()[..width]);
}

/// Every field a mutation may change, of every real file, set in turn to each of a few
/// values (extremes, one more, and the old value 2, 2^10 and 2^20 times larger), the
/// checksums fixed: every reader answers, within the bound. Exhaustive where the proptest
/// below samples: a one-field change that makes a file claim more is always tried.
#[test]
fn every_field_of_every_real_file_changed_alone_stays_within_the_bound() {
    let values = [
        Mutation::Set(0),
        Mutation::Set(u64::MAX),
        Mutation::Add(1),
        Mutation::Scale(1),
        Mutation::Scale(10),
        Mutation::Scale(20),
    ];
    for real in real_files() {
        // A windowed file's later generation lengths and a scalable filter's later stages
        // repeat the first ones' fields: the first 9 cover every kind of field. Each read
        // path once (the dispatchers, `AnyFilter` and `Snapshot`, are the proptest's; a
        // windowed read sizes its generations, milliseconds each).
        for &field in real.fields.iter().take(9) {
            for m in values {
                let mut bytes = real.bytes.clone();
                apply(&mut bytes, field, m);
                (real.fix)(&mut bytes, &real.structure);
                read_by(&bytes, &real.files, |reader| {
                    !reader.starts_with("AnyFilter")
                        && !reader.starts_with("Snapshot")
                        && reader != "WindowedFilter::from_bytes"
                });
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 300,
        rng_seed: RngSeed::Fixed(0x0044_C4AF),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Up to three header fields of a real file of any kind changed (its header and state,
    /// a stage's or a generation's, a manifest's entry, the label's lengths; the
    /// container's own three times in four), the checksums fixed
    /// (a generation file's, then the manifest's entry for it): every reader answers, and
    /// stays within the bound.
    #[test]
    fn mutated_headers_of_real_files_never_panic_and_stay_within_the_bound(
        which in any::<prop::sample::Index>(),
        changes in prop::collection::vec(
            (prop::bool::weighted(0.75), any::<prop::sample::Index>(), field_value()),
            1..=3,
        ),
        in_file in any::<prop::sample::Index>(),
    ) {
        thread_local! {
            static REAL: Vec<Real> = real_files();
        }
        REAL.with(|real| {
            let real = which.get(real);
            let mut bytes = real.bytes.clone();
            let mut files = real.files.clone();
            if !files.is_empty() && in_file.index(2) == 0 {
                // A manifest's generation file: its header, its checksum, and the
                // manifest's entry for it.
                let i = in_file.index(files.len());
                let file = &mut files[i].1;
                for (_, field, m) in &changes {
                    apply(file, *field.get(&header_fields(0)), *m);
                }
                fix_whole(file, &Structure::default());
                let sum: [u8; 4] = file[file.len() - 4..].try_into().unwrap();
                files[i].0.checksum = u32::from_le_bytes(sum);
                let ring = (u64::from(bytes[12]) + 1) as usize;
                let mut at = 80;
                for index in 0..ring {
                    let len = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
                    if len != 0 && index as u64 == files[i].0.epoch % ring as u64 {
                        bytes[at + 8..at + 12].copy_from_slice(&sum);
                    }
                    at += if len == 0 { 8 } else { 12 };
                }
            } else {
                for (primary, field, m) in &changes {
                    // Mostly the container's own fields (its header, its state, a label's
                    // lengths: the first eight), else any (a stage's, a generation's).
                    let fields = if *primary {
                        &real.fields[..real.fields.len().min(8)]
                    } else {
                        &real.fields[..]
                    };
                    apply(&mut bytes, *field.get(fields), *m);
                }
            }
            (real.fix)(&mut bytes, &real.structure);
            read_every_way(&bytes, &files);
        });
    }
}

// ---------------------------------------------------------------------------------------
// What a user keeps: a saved filter whose future generations are empty

/// A windowed filter saved with most generations empty loads, answers exactly as the one
/// saved (every key found, the same answers for others), and allocates a generation only
/// when a key goes into it; then it keeps working across rotations.
#[test]
fn a_loaded_windowed_filter_allocates_a_generation_when_a_key_first_goes_in() {
    let f = WindowedFilter::builder(Window::Count(64_000))
        .expected_items(64_000)
        .false_positive_rate(0.01)
        .generations(64)
        .seed(11)
        .build()
        .unwrap();
    for i in 0..1_500u64 {
        f.insert(&i); // epochs 0 and 1 of 65
    }
    let bytes = f.to_bytes();
    let generation = (f.size_in_bytes() / 65) as u64;
    let (loaded, peak) = peak_during(|| WindowedFilter::from_bytes(&bytes).unwrap());
    assert!(peak as u64 <= bound(bytes.len() as u64), "{peak}");
    assert!(
        (peak as u64) < 3 * generation + 64 * 1024,
        "loading allocated {peak} bytes for two generations of {generation}"
    );
    assert!((0..1_500u64).all(|i| loaded.contains(&i)));
    let others: Vec<bool> = (10_000..60_000u64).map(|i| f.contains(&i)).collect();
    assert_eq!(
        (10_000..60_000u64)
            .map(|i| loaded.contains(&i))
            .collect::<Vec<_>>(),
        others
    );
    assert_eq!(loaded.count_ones(), f.count_ones());
    assert_eq!(loaded.estimated_items(), f.estimated_items());
    assert_eq!(loaded.size_in_bytes(), f.size_in_bytes());
    assert_eq!(loaded.to_bytes(), bytes, "saved again, the same file");

    // Into the next epoch: one generation more, not the ring.
    let ((), peak) = peak_during(|| {
        for i in 1_500..2_100u64 {
            loaded.insert(&i);
        }
    });
    assert!(
        (peak as u64) >= generation && (peak as u64) < generation + 64 * 1024,
        "{peak} bytes for a generation of {generation}"
    );
    // Around the ring and more: every key inside the window is found.
    for i in 2_100..200_000u64 {
        loaded.insert(&i);
    }
    assert!((200_000 - 64_000..200_000u64).all(|i| loaded.contains(&i)));
}

/// A newest epoch within a ring of `u64::MAX` (which no filter reaches: its epoch and the
/// ring's would overflow) is refused; the last epoch that leaves room loads and answers (a
/// time window). A window of inserts whose epoch is ahead of its insert count (which would
/// put the next keys in a generation outside the window) is refused.
#[test]
fn a_newest_epoch_at_the_end_of_u64_is_refused() {
    let clock = Arc::new(ManualClock::new(NOW));
    for window in [
        Window::Count(300),
        Window::Time(Duration::from_secs(3 * 3_600)),
    ] {
        let f = WindowedFilter::builder(window)
            .expected_items(300)
            .false_positive_rate(0.01)
            .generations(3)
            .clock(clock.clone())
            .seed(6)
            .build()
            .unwrap();
        let mut bytes = f.to_bytes(); // no key: every generation stored empty
        let timed = matches!(window, Window::Time(_));
        for (epoch, loads) in [
            (u64::MAX, false),
            (u64::MAX - 3, false),
            (u64::MAX - 4, timed),
            (1, timed),
        ] {
            bytes[64..72].copy_from_slice(&epoch.to_le_bytes());
            fix_whole(&mut bytes, &Structure::default());
            let read = WindowedFilter::read_from_with_clock(&mut bytes.as_slice(), clock.clone());
            match read {
                Ok(loaded) if loads => {
                    assert!(!loaded.contains("a"));
                    assert!(!loaded.seen_or_insert("a"));
                    assert!(loaded.contains("a"), "{window:?}");
                }
                Err(DecodeError::Inconsistent(_)) if !loads => {}
                other => panic!("{window:?}, epoch {epoch}: {other:?}"),
            }
        }
    }
}
