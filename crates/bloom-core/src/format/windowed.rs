//! Kind 4, a windowed filter: the header, the newest epoch and the insert count, then each
//! generation in ring order as its length and a complete kind-0 file (which ends in its own
//! CRC-32C), or a length of 0 for a generation with no key (the spare, and those never
//! written), then a CRC-32C of everything before it but the generations' files: every byte is
//! checked once, as in a plain filter's file.
//!
//! A reader on a time window does not build the generations that expired since the file was
//! written (it checks their bytes, then leaves them empty and untouched): a state saved a day
//! ago costs the memory and the work of the generations still inside the window.
//!
//! Rule (docs/FORMAT.md, "What a reader allocates"): a reader allocates only what the bytes
//! it read back. A generation stored empty (L = 0) is not allocated at all: the filter
//! allocates it when a key first goes into it, so 65 generations claimed huge and stored in
//! 604 bytes cost a few kilobytes to read. Each stored generation is a kind-0 file read as
//! it arrives (`words.rs`). While it reads `L` bytes (a manifest's generation files
//! counted in), a reader has at most `3·L + 256 KiB` allocated: `tests/crafted_files.rs`
//! (`a_ring_of_empty_generations_sized_huge_loads_without_allocating_them`,
//! `mutated_headers_of_real_files_never_panic_and_stay_within_the_bound`).

use std::io::{self, Read, Write};
use std::sync::Arc;

use super::checksum::{CHECKSUM_LEN, digest};
use super::header::{FilterKind, HEADER_LEN, KIND_OFFSET, decode_kind, encode, fields};
use super::windowed_split::GenerationFile;
use super::{DecodeError, read_up_to};
use crate::builder::Parts as Parts0;
use crate::windowed::{
    Clock, MAX_GENERATIONS, MIN_GENERATIONS, Parts, RingLayout, SystemClock, Window,
    generation_rate,
};
use crate::{BloomFilter, Layout, WindowedFilter};

/// The epoch and the insert count after the header.
const STATE_LEN: usize = 16;
/// Bit 8 of the first field: a count window (else a time window, in milliseconds).
const COUNT_WINDOW: u32 = 1 << 8;
/// Bit 9 of the first field: a manifest, whose generations are stored in files of their own
/// (`windowed_split.rs`).
const SPLIT: u32 = 1 << 9;

struct WindowedHeader {
    /// A manifest: each generation is its length and its file's checksum, not its file.
    split: bool,
    layout: Layout,
    generations: u32,
    window: Window,
    seed: u128,
    expected_items: u64,
    fpr: f64,
    period: u64,
}

impl WindowedHeader {
    fn of(filter: &WindowedFilter, split: bool) -> Self {
        let parts = filter.parts();
        Self {
            split,
            layout: filter.layout(),
            generations: filter.generations(),
            window: parts.window,
            seed: filter.seed(),
            expected_items: parts.expected_items,
            fpr: parts.fpr,
            period: parts.period,
        }
    }

    fn encode(&self) -> [u8; HEADER_LEN] {
        let (kind_bit, length) = match self.window {
            Window::Time(d) => (0, d.as_millis() as u64),
            Window::Count(n) => (COUNT_WINDOW, n),
        };
        let kind_bit = kind_bit | if self.split { SPLIT } else { 0 };
        encode(
            FilterKind::Windowed,
            self.layout.to_byte(),
            (
                self.generations | kind_bit,
                length,
                self.seed,
                self.expected_items,
                self.fpr.to_bits(),
                self.period,
            ),
        )
    }

    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_kind(bytes, HEADER_LEN, FilterKind::Windowed)?;
        let layout_byte = bytes[KIND_OFFSET + 1];
        let layout = Layout::from_byte(layout_byte)
            .ok_or(DecodeError::UnknownLayout { found: layout_byte })?;
        let (first, length, seed, expected_items, fpr, period) = fields(bytes);
        let generations = first & 0xFF;
        if first & !(0xFF | COUNT_WINDOW | SPLIT) != 0
            || !(MIN_GENERATIONS..=MAX_GENERATIONS).contains(&generations)
        {
            return Err(DecodeError::Inconsistent(
                "generations outside 2 to 64, or unknown flags",
            ));
        }
        let window = if first & COUNT_WINDOW != 0 {
            Window::Count(length)
        } else {
            Window::Time(std::time::Duration::from_millis(length))
        };
        let fpr = f64::from_bits(fpr);
        if !(fpr > 0.0 && fpr < 1.0) || expected_items == 0 {
            return Err(DecodeError::Inconsistent(
                "false-positive rate outside (0, 1) or no expected items",
            ));
        }
        if period == 0 || period != length.div_ceil(u64::from(generations - 1)) {
            return Err(DecodeError::Inconsistent(
                "period does not divide the window among the generations",
            ));
        }
        Ok(Self {
            split: first & SPLIT != 0,
            layout,
            generations,
            window,
            seed,
            expected_items,
            fpr,
            period,
        })
    }

    /// What every generation must be: a plain filter of these settings (sized, not built:
    /// a damaged header must not make the reader allocate what it claims).
    fn template(&self) -> Result<Parts0, DecodeError> {
        BloomFilter::builder()
            .expected_items(
                self.expected_items
                    .div_ceil(u64::from(self.generations - 1)),
            )
            .false_positive_rate(generation_rate(self.fpr, self.generations))
            .layout(self.layout)
            .seed(self.seed)
            .resolve()
            .map_err(|_| DecodeError::Inconsistent("generations too large to build"))
    }

    /// The filter, once each generation stored is one of `template`'s shape (`None`: a
    /// generation stored empty, not allocated).
    fn filter(
        self,
        template: Parts0,
        state: (u64, u64),
        generations: Vec<Option<BloomFilter>>,
        written: Vec<bool>,
        clock: Arc<dyn Clock>,
    ) -> Result<WindowedFilter, DecodeError> {
        let same = |g: &BloomFilter| {
            (
                g.num_bits(),
                g.num_hashes(),
                g.layout(),
                g.seed(),
                g.capacity(),
            ) == (
                template.slots,
                template.hashes,
                template.layout,
                self.seed,
                template.capacity,
            )
        };
        if !generations.iter().flatten().all(same) {
            return Err(DecodeError::Inconsistent(
                "a generation does not have the container's settings",
            ));
        }
        let parts = Parts {
            window: self.window,
            period: self.period,
            expected_items: self.expected_items,
            fpr: self.fpr,
            clock,
        };
        // Separate, as the file stores the generations: no copy, and nothing allocated that
        // the bytes do not back (`windowed/ring.rs`).
        Ok(WindowedFilter::from_parts(
            parts,
            template,
            generations,
            Some(state),
            Some(written),
            RingLayout::Separate,
        ))
    }
}

impl WindowedFilter {
    /// The filter in the file format, kind "windowed" (see `docs/FORMAT.md`): its settings,
    /// its newest epoch and insert count, and every generation. It contains the secret hash
    /// key. Write it while no insert runs (a dedup run's end): a rotation during the write
    /// may leave a generation half cleared in the file.
    ///
    /// ```
    /// use bloom_core::windowed::{Window, WindowedFilter};
    ///
    /// let f = WindowedFilter::builder(Window::Count(1_000)).expected_items(1_000).false_positive_rate(0.01).build()?;
    /// f.insert("a");
    /// let copy = WindowedFilter::from_bytes(&f.to_bytes())?;
    /// assert!(copy.contains("a") && copy.inserts() == 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_to(&mut out).expect("a Vec takes every write");
        out
    }

    /// Writes [`to_bytes`](Self::to_bytes)'s output to `w`, a generation at a time.
    ///
    /// ```
    /// use bloom_core::windowed::{Window, WindowedFilter};
    ///
    /// let f = WindowedFilter::builder(Window::Count(10)).expected_items(10).false_positive_rate(0.01).build()?;
    /// let mut file = Vec::new();
    /// f.write_to(&mut file)?;
    /// assert_eq!(file, f.to_bytes());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write_to<W: Write + ?Sized>(&self, w: &mut W) -> io::Result<()> {
        let mut out = Container::start(self, false, w)?;
        for i in 0..self.ring_len() {
            let Some(generation) = self.ring_written(i) else {
                out.put(&0u64.to_le_bytes())?;
                continue;
            };
            out.put(&super::words::encoded_len(&*generation).to_le_bytes())?;
            // Checksummed by its own trailer.
            super::words::write_to(&*generation, out.unsummed())?;
        }
        out.finish()
    }

    /// Reads a windowed filter from exactly `bytes`, on the system clock: generations that
    /// expired since it was written are cleared.
    ///
    /// ```
    /// use bloom_core::windowed::{Window, WindowedFilter};
    ///
    /// let bytes = WindowedFilter::builder(Window::Count(10)).expected_items(10).false_positive_rate(0.01).build()?.to_bytes();
    /// assert!(WindowedFilter::from_bytes(&bytes).is_ok());
    /// assert!(WindowedFilter::from_bytes(&bytes[..70]).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, DecodeError> {
        Self::read_from_with_clock(&mut &bytes[..], Arc::new(SystemClock))
    }

    /// Reads one windowed filter from `r`, which must end right after it, on the system clock.
    ///
    /// ```
    /// use bloom_core::windowed::{Window, WindowedFilter};
    ///
    /// let bytes = WindowedFilter::builder(Window::Count(10)).expected_items(10).false_positive_rate(0.01).build()?.to_bytes();
    /// let f = WindowedFilter::read_from(&mut bytes.as_slice())?;
    /// assert_eq!(f.window(), Window::Count(10));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read_from<R: Read + ?Sized>(r: &mut R) -> Result<Self, DecodeError> {
        Self::read_from_with_clock(r, Arc::new(SystemClock))
    }

    /// [`read_from`](Self::read_from) on another clock (for tests and simulated time).
    ///
    /// ```
    /// use std::{sync::Arc, time::Duration};
    /// use bloom_core::windowed::{ManualClock, Window, WindowedFilter};
    ///
    /// let clock = Arc::new(ManualClock::new(0));
    /// let f = WindowedFilter::builder(Window::Time(Duration::from_secs(60)))
    ///     .expected_items(10).false_positive_rate(0.01).clock(clock.clone()).seed(1).build()?;
    /// f.insert("a");
    /// let bytes = f.to_bytes();
    /// clock.advance(Duration::from_secs(3_600)); // an hour later: expired
    /// let loaded = WindowedFilter::read_from_with_clock(&mut bytes.as_slice(), clock)?;
    /// assert!(!loaded.contains("a"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read_from_with_clock<R: Read + ?Sized>(
        r: &mut R,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, DecodeError> {
        read_windowed(r, clock, &mut |_| {
            Err(DecodeError::Inconsistent(
                "a manifest: its generations are in files of their own (read it by its path)",
            ))
        })
        .map(|(filter, _)| filter)
    }
}

/// A kind-4 container being written: the header and state first, then what the caller
/// puts, then the CRC-32C of everything put (a generation's own file goes `unsummed`).
pub(super) struct Container<'a, W: Write + ?Sized> {
    w: &'a mut W,
    sum: super::checksum::Digest,
}

impl<'a, W: Write + ?Sized> Container<'a, W> {
    /// Writes `filter`'s header (a manifest's if `split`), newest epoch and insert count.
    pub(super) fn start(filter: &WindowedFilter, split: bool, w: &'a mut W) -> io::Result<Self> {
        let mut out = Self { w, sum: digest() };
        out.put(&WindowedHeader::of(filter, split).encode())?;
        out.put(&filter.epoch().to_le_bytes())?;
        out.put(&filter.inserts().to_le_bytes())?;
        Ok(out)
    }

    /// Writes `bytes`, covered by the container's checksum.
    pub(super) fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.sum.update(bytes);
        self.w.write_all(bytes)
    }

    /// The writer, for bytes the container's checksum does not cover.
    pub(super) fn unsummed(&mut self) -> &mut W {
        self.w
    }

    /// Writes the checksum.
    pub(super) fn finish(self) -> io::Result<()> {
        self.w.write_all(&self.sum.finalize().to_le_bytes())
    }
}

/// Reads a windowed filter's file, or a manifest whose generations `open` reads (given the
/// file the manifest names, it returns that generation; it is called only for generations
/// still inside the window). Also returns the files of the generations kept.
pub(super) fn read_windowed<R: Read + ?Sized>(
    r: &mut R,
    clock: Arc<dyn Clock>,
    open: &mut dyn FnMut(GenerationFile) -> Result<BloomFilter, DecodeError>,
) -> Result<(WindowedFilter, Vec<GenerationFile>), DecodeError> {
    let mut head = [0u8; HEADER_LEN + STATE_LEN];
    let got = read_up_to(r, &mut head)?;
    let header = WindowedHeader::decode(&head[..got])?;
    if got < head.len() {
        return Err(DecodeError::Truncated {
            needed: head.len() as u64,
            available: got as u64,
        });
    }
    let mut sum = digest();
    sum.update(&head);
    let state = (
        u64::from_le_bytes(head[HEADER_LEN..HEADER_LEN + 8].try_into().unwrap()),
        u64::from_le_bytes(head[HEADER_LEN + 8..].try_into().unwrap()),
    );
    // Every generation's file is exactly as long as the template's, and is read as it
    // arrives: a header claiming huge generations cannot make this allocate more than
    // the input holds.
    let template = header.template()?;
    let expected = (HEADER_LEN + CHECKSUM_LEN) as u64 + template.slots.div_ceil(64) * 8;
    let mut read = head.len() as u64;
    let ring = u64::from(header.generations) + 1;
    // A filter steps its epoch and the ring's past it: an epoch within a ring of 2^64 (585
    // million years of milliseconds) is no state a filter reaches (`tests/crafted_files.rs`
    // `a_newest_epoch_at_the_end_of_u64_is_refused`).
    if state.0 > u64::MAX - ring {
        return Err(DecodeError::Inconsistent(
            "the newest epoch leaves no room for the ring below 2^64",
        ));
    }
    // A count window's epoch is the last insert's: `⌊(inserts − 1) / T⌋` when written with
    // no insert running, less if one ran (the count moves first), never more.
    if let Window::Count(_) = header.window {
        if state.0 > state.1.saturating_sub(1) / header.period {
            return Err(DecodeError::Inconsistent(
                "a window of inserts whose epoch is ahead of its inserts",
            ));
        }
    }
    // The epoch the clock is in; `None` for a count window (whose clock is the file).
    let now = match header.window {
        Window::Time(_) => Some(clock.now_millis() / header.period),
        Window::Count(_) => None,
    };
    let mut fixed = |r: &mut R, bytes: &mut [u8], read: &mut u64| -> Result<(), DecodeError> {
        let got = read_up_to(r, bytes)?;
        *read += got as u64;
        if got < bytes.len() {
            return Err(DecodeError::Truncated {
                needed: *read + 1,
                available: *read,
            });
        }
        sum.update(bytes);
        Ok(())
    };
    // What each generation is, until the container's checksum is verified: only then are
    // generation files opened. The empty generations are never allocated here (a header
    // cannot make the reader allocate what it claims: `a_damaged_header_allocates_nothing_it_claims`,
    // `tests/crafted_files.rs`).
    enum Slot {
        Empty,
        Read(BloomFilter),
        Named(GenerationFile),
    }
    let mut slots = Vec::new();
    for i in 0..ring {
        let mut len = [0u8; 8];
        fixed(r, &mut len, &mut read)?;
        let len = u64::from_le_bytes(len);
        if len == 0 {
            slots.push(Slot::Empty);
            continue;
        }
        if len != expected {
            return Err(DecodeError::Inconsistent(
                "a generation's length does not match the container's settings",
            ));
        }
        // The newest epoch this generation held, if any: it leaves the window once
        // N more epochs began.
        let back = (state.0 % ring + ring - i) % ring;
        let expired = back > state.0
            || now.is_some_and(|now| (state.0 - back).saturating_add(ring - 1) <= now);
        if header.split {
            let mut checksum = [0u8; CHECKSUM_LEN];
            fixed(r, &mut checksum, &mut read)?;
            slots.push(if expired {
                // Not opened: its file is removed at the next save.
                Slot::Empty
            } else {
                Slot::Named(GenerationFile {
                    epoch: state.0 - back,
                    checksum: u32::from_le_bytes(checksum),
                })
            });
        } else {
            // Read as it arrives, and checked by its own trailer.
            let mut file = (&mut *r).take(expected);
            slots.push(if expired {
                super::words::check_plain_file(&mut file)?;
                Slot::Empty
            } else {
                Slot::Read(BloomFilter::read_from(&mut file)?)
            });
            read += expected;
        }
    }
    let mut trailer = [0u8; CHECKSUM_LEN];
    let got = read_up_to(r, &mut trailer)?;
    if got < CHECKSUM_LEN {
        return Err(DecodeError::Truncated {
            needed: read + CHECKSUM_LEN as u64,
            available: read + got as u64,
        });
    }
    let (stored, computed) = (u32::from_le_bytes(trailer), sum.finalize());
    if stored != computed {
        return Err(DecodeError::ChecksumMismatch { stored, computed });
    }
    if read_up_to(r, &mut [0u8; 1])? != 0 {
        return Err(DecodeError::TrailingBytes { extra: 1 });
    }
    let (mut generations, mut written, mut files) = (Vec::new(), Vec::new(), Vec::new());
    for slot in slots {
        let generation = match slot {
            Slot::Empty => None,
            Slot::Read(generation) => Some(generation),
            Slot::Named(file) => {
                files.push(file);
                Some(open(file)?)
            }
        };
        written.push(generation.is_some());
        generations.push(generation);
    }
    let filter = header.filter(template, state, generations, written, clock)?;
    Ok((filter, files))
}
