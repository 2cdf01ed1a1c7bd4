//! Kind 2, a scalable filter: the header, then for each stage its item count, its length
//! and a complete kind-0 file, then a CRC-32C of everything before it.

use std::io::{self, Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::checksum::{CHECKSUM_LEN, Summed, checksum};
use super::header::{HEADER_LEN, StagesHeader};
use super::{DecodeError, words};
use crate::hasher::KeyHasher;
use crate::scalable::Stage;
use crate::{BloomFilter, MAX_STAGES, ScalableBloomFilter};

/// Bytes in front of each stage's file: its item count and the file's length.
const STAGE_PREFIX_LEN: usize = 16;

fn header_of(filter: &ScalableBloomFilter, stages: &[Arc<Stage>]) -> StagesHeader {
    StagesHeader {
        config: filter.config(),
        seed: filter.seed(),
        num_stages: stages.len() as u32,
    }
}

fn write_stages<W: Write + ?Sized>(
    w: &mut W,
    header: &StagesHeader,
    stages: &[Arc<Stage>],
) -> io::Result<()> {
    let mut out = Summed::new(w);
    out.write_all(&header.encode())?;
    for stage in stages {
        // Clamped: see `to_bytes`.
        let items = stage.items.load(Relaxed).min(stage.filter.num_bits());
        out.write_all(&items.to_le_bytes())?;
        out.write_all(&words::encoded_len(&stage.filter).to_le_bytes())?;
        words::write_to(&stage.filter, &mut out)?;
    }
    out.finish()
}

impl ScalableBloomFilter {
    /// The filter in the file format, kind "scalable": a container header, then for each
    /// stage its item count, its length and a complete plain-filter file, then a CRC-32C of
    /// everything (see `docs/FORMAT.md`).
    ///
    /// A stage's item count is written clamped to its number of bits: every counted insert
    /// found one of its bits clear in the stage and set it, so only racing inserts (two
    /// threads claiming the same clear bit) can push the count past that, and such a count
    /// is known to be an overcount. [`from_bytes`](Self::from_bytes) refuses a count above
    /// the bits, so what this writes always reads back.
    ///
    /// ```
    /// use bloom_core::ScalableBloomFilter;
    ///
    /// let f = ScalableBloomFilter::new(1_000, 0.01)?;
    /// f.insert("a");
    /// let copy = ScalableBloomFilter::from_bytes(&f.to_bytes())?;
    /// assert!(copy.contains("a"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_bytes(&self) -> Vec<u8> {
        let stages = self.stages();
        let stage_bytes: u64 = stages
            .iter()
            .map(|s| STAGE_PREFIX_LEN as u64 + words::encoded_len(&s.filter))
            .sum();
        let mut out = Vec::with_capacity(HEADER_LEN + stage_bytes as usize + CHECKSUM_LEN);
        write_stages(&mut out, &header_of(self, &stages), &stages)
            .expect("a Vec takes every write");
        out
    }

    /// Writes [`to_bytes`](Self::to_bytes)'s output to `w`, stage by stage, without building
    /// it in memory.
    ///
    /// ```
    /// use bloom_core::ScalableBloomFilter;
    ///
    /// let f = ScalableBloomFilter::new(1_000, 0.01)?;
    /// let mut file = Vec::new();
    /// f.write_to(&mut file)?;
    /// assert_eq!(file, f.to_bytes());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write_to<W: Write + ?Sized>(&self, w: &mut W) -> io::Result<()> {
        let stages = self.stages();
        write_stages(w, &header_of(self, &stages), &stages)
    }

    /// Reads one scalable filter from `r`, which must end right after it. The input is read
    /// whole as it arrives (a buffer that grows with it), then decoded: at most three times
    /// the input is allocated, whatever its header claims (docs/FORMAT.md, "What a reader
    /// allocates").
    ///
    /// ```
    /// use bloom_core::ScalableBloomFilter;
    ///
    /// let f = ScalableBloomFilter::new(1_000, 0.01)?;
    /// let bytes = f.to_bytes();
    /// let copy = ScalableBloomFilter::read_from(&mut bytes.as_slice())?;
    /// assert_eq!(copy.num_stages(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read_from<R: Read + ?Sized>(r: &mut R) -> Result<Self, DecodeError> {
        // The container is only framed by its stages and its checksum comes first among the
        // checks, so the whole of it is read before any is decoded.
        let mut bytes = Vec::new();
        r.read_to_end(&mut bytes)?;
        Self::from_bytes(&bytes)
    }

    /// Reads a scalable filter from exactly `bytes`.
    ///
    /// Besides the framing, the checksum and each stage's own file, the stages' item counts
    /// must be ones [`insert`](Self::insert) and [`to_bytes`](Self::to_bytes) can produce,
    /// or the file is [`DecodeError::Inconsistent`]:
    ///
    /// * no stage counts more keys than it has bits (each counted key set a clear bit of it,
    ///   and the writer clamps the rare racing overcount);
    /// * a stage followed by another counted at least its capacity (or, for a stage sized
    ///   below one bit per key, all of its bits): a stage is only added once the last one's
    ///   count reaches its capacity. There is no tighter upper bound: inserts keep landing in
    ///   the old stage while the next one is being built, and the last stage keeps taking
    ///   keys past its capacity when no further stage can be added ([`MAX_STAGES`], or a
    ///   stage too large to build);
    /// * the counts add up to a `u64` ([`len`](Self::len) never overflows).
    ///
    /// ```
    /// use bloom_core::ScalableBloomFilter;
    ///
    /// let f = ScalableBloomFilter::new(1_000, 0.01)?;
    /// f.insert("a");
    /// let copy = ScalableBloomFilter::from_bytes(&f.to_bytes())?;
    /// assert_eq!(copy.len(), 1);
    /// // A plain filter's file is refused.
    /// let plain = bloom_core::BloomFilter::new(1_000, 0.01)?;
    /// assert!(ScalableBloomFilter::from_bytes(&plain.to_bytes()).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, DecodeError> {
        let StagesHeader {
            config,
            seed,
            num_stages,
        } = StagesHeader::decode(bytes, HEADER_LEN + CHECKSUM_LEN)?;
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap());
        let body_end = bytes.len() - CHECKSUM_LEN;
        let stored = u32::from_le_bytes(bytes[body_end..].try_into().unwrap());
        let computed = checksum(&bytes[..body_end]);
        if stored != computed {
            // The container is only framed by its stages, so a short or long file shows up
            // as a checksum mismatch unless the stage walk below finds it first.
            return Err(DecodeError::ChecksumMismatch { stored, computed });
        }
        let num_stages = num_stages as usize;
        if !(1..=MAX_STAGES).contains(&num_stages) || config.check().is_err() {
            return Err(DecodeError::Inconsistent(
                "scalable filter parameters out of range",
            ));
        }
        let mut stages = Vec::with_capacity(num_stages);
        let mut at = HEADER_LEN;
        let mut total_items = 0u64;
        for index in 0..num_stages {
            if body_end - at < STAGE_PREFIX_LEN {
                return Err(DecodeError::Inconsistent(
                    "stage list runs past the end of the file",
                ));
            }
            let items = u64_at(at);
            let len = u64_at(at + 8);
            at += STAGE_PREFIX_LEN;
            if len > (body_end - at) as u64 {
                return Err(DecodeError::Inconsistent(
                    "stage list runs past the end of the file",
                ));
            }
            let filter = BloomFilter::from_bytes(&bytes[at..at + len as usize])?;
            at += len as usize;
            if filter.layout() != config.layout || filter.seed() != seed {
                return Err(DecodeError::Inconsistent(
                    "a stage's layout or hash key differs from the filter's",
                ));
            }
            let capacity = config.stage_capacity(index);
            if filter.capacity() != Some(capacity) {
                return Err(DecodeError::Inconsistent(
                    "a stage's capacity does not follow the growth factor",
                ));
            }
            check_stage_items(items, capacity, filter.num_bits(), index + 1 < num_stages)?;
            total_items = total_items
                .checked_add(items)
                .ok_or(DecodeError::Inconsistent(
                    "the stages' item counts add up to more than a u64 holds",
                ))?;
            stages.push(Arc::new(Stage {
                filter,
                capacity,
                items: AtomicU64::new(items),
            }));
        }
        if at != body_end {
            return Err(DecodeError::TrailingBytes {
                extra: (body_end - at) as u64,
            });
        }
        Ok(Self::from_stages(config, KeyHasher::new(seed), stages))
    }
}

/// The item-count invariants [`ScalableBloomFilter::from_bytes`] documents, for one stage
/// with `capacity` keys and `num_bits` bits; `sealed` when another stage follows it.
fn check_stage_items(
    items: u64,
    capacity: u64,
    num_bits: u64,
    sealed: bool,
) -> Result<(), DecodeError> {
    if items > num_bits {
        return Err(DecodeError::Inconsistent(
            "a stage counts more keys than it has bits",
        ));
    }
    if sealed && items < capacity.min(num_bits) {
        return Err(DecodeError::Inconsistent(
            "a stage below its capacity is followed by another stage",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_with_fewer_bits_than_keys_is_sealed_once_its_bits_are_counted() {
        // capacity 1000 over 600 bits: its count can never legitimately exceed 600.
        assert!(check_stage_items(600, 1_000, 600, true).is_ok());
        assert!(check_stage_items(599, 1_000, 600, true).is_err());
        assert!(check_stage_items(601, 1_000, 600, false).is_err());
        assert!(check_stage_items(100, 100, 1_000, true).is_ok());
        assert!(check_stage_items(99, 100, 1_000, true).is_err());
        assert!(check_stage_items(0, 100, 1_000, false).is_ok());
    }
}
