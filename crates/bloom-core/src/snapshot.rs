//! Snapshot files: a filter file of any kind behind a short, checksummed label that says what
//! the filter is valid for (its name, and how far into its source it is complete).
//!
//! A service that restarts from a snapshot must not serve a filter that misses keys created
//! while it was down. The label's *watermark* is the position in the source (an opaque value
//! the source hands out: a highest id, a timestamp, a log offset) up to which every key is in
//! the filter, so a restart can read only the keys changed since and catch up before serving.
//! `docs/FORMAT.md` documents the label byte by byte; `format/label.rs` writes and reads it
//! ([`Snapshot::write`], [`Snapshot::read_from`]).

use std::time::{SystemTime, UNIX_EPOCH};

use crate::AnyFilter;

/// What a snapshot says about its filter, besides the filter itself.
///
/// ```
/// use bloom_core::SnapshotLabel;
///
/// let label = SnapshotLabel::new("users").with_watermark(1_042u64.to_le_bytes().to_vec());
/// assert_eq!(label.name, "users");
/// assert_eq!(label.watermark.as_deref(), Some(&1_042u64.to_le_bytes()[..]));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SnapshotLabel {
    /// The name of the filter that was saved (a service keeps one snapshot per filter).
    pub name: String,
    /// The source position up to which every key is in the filter, if known; `None`: the
    /// filter cannot be caught up, only rebuilt.
    pub watermark: Option<Vec<u8>>,
    /// When the snapshot was written, in milliseconds since the Unix epoch.
    pub saved_at_unix_ms: u64,
}

impl SnapshotLabel {
    /// A label for the filter `name`, saved now, with no watermark.
    ///
    /// ```
    /// let label = bloom_core::SnapshotLabel::new("users");
    /// assert!(label.watermark.is_none() && label.saved_at_unix_ms > 0);
    /// ```
    pub fn new(name: impl Into<String>) -> Self {
        let saved_at_unix_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_millis() as u64);
        Self {
            name: name.into(),
            watermark: None,
            saved_at_unix_ms,
        }
    }

    /// The same label with `watermark`.
    ///
    /// ```
    /// let label = bloom_core::SnapshotLabel::new("users").with_watermark(vec![7]);
    /// assert_eq!(label.watermark, Some(vec![7]));
    /// ```
    pub fn with_watermark(mut self, watermark: Vec<u8>) -> Self {
        self.watermark = Some(watermark);
        self
    }
}

/// A filter read back from a snapshot file, with its label (`None` for a bare filter file,
/// which every reader of snapshots also accepts).
#[derive(Debug)]
#[non_exhaustive]
pub struct Snapshot {
    /// What the file says the filter is valid for; `None` for a bare filter file.
    pub label: Option<SnapshotLabel>,
    /// The filter.
    pub filter: AnyFilter,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BloomFilter, CountingBloomFilter};

    fn labelled() -> (Vec<u8>, AnyFilter) {
        let filter = AnyFilter::from(
            CountingBloomFilter::builder()
                .expected_items(100)
                .false_positive_rate(0.01)
                .seed(9)
                .build()
                .unwrap(),
        );
        filter.insert(&5u64);
        let label = SnapshotLabel::new("users").with_watermark(vec![1, 2, 3]);
        let mut bytes = Vec::new();
        Snapshot::write(&mut bytes, &label, &filter).unwrap();
        (bytes, filter)
    }

    #[test]
    fn a_labelled_snapshot_round_trips() {
        let (bytes, filter) = labelled();
        let read = Snapshot::read_from(&mut bytes.as_slice()).unwrap();
        let label = read.label.unwrap();
        assert_eq!(
            (label.name.as_str(), label.watermark),
            ("users", Some(vec![1, 2, 3]))
        );
        assert_eq!(read.filter.to_bytes(), filter.to_bytes());
        assert_eq!(read.filter.kind(), "counting");
    }

    #[test]
    fn every_damage_to_the_label_is_refused() {
        let (bytes, _) = labelled();
        let label_end = 14 + u32::from_le_bytes(bytes[10..14].try_into().unwrap()) as usize + 4;
        for cut in 0..label_end {
            let result = Snapshot::read_from(&mut &bytes[..cut]);
            assert!(
                result.is_err(),
                "a snapshot cut at {cut} bytes was accepted"
            );
        }
        for at in 8..label_end {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x10;
            assert!(
                Snapshot::read_from(&mut damaged.as_slice()).is_err(),
                "a flipped bit at byte {at} was accepted"
            );
        }
    }

    #[test]
    fn a_huge_label_length_is_refused_without_allocating_it() {
        let (mut bytes, _) = labelled();
        bytes[10..14].copy_from_slice(&u32::MAX.to_le_bytes());
        let error = Snapshot::read_from(&mut bytes.as_slice()).unwrap_err();
        assert!(error.to_string().contains("1 MiB"), "{error}");
    }

    #[test]
    fn a_bare_filter_file_reads_with_no_label() {
        let filter = BloomFilter::new(100, 0.01).unwrap();
        let read = Snapshot::read_from(&mut filter.to_bytes().as_slice()).unwrap();
        assert!(read.label.is_none());
        assert!(Snapshot::read_from(&mut &b"not a filter"[..]).is_err());
    }
}
