//! Every writer streams; `peek` agrees with the files.

use std::io::{self, Write};

use super::{DecodeError, FilterKind, peek};
use crate::{
    AnyFilter, BloomFilter, CountingBloomFilter, CuckooFilter, ScalableBloomFilter, Snapshot,
    SnapshotLabel,
};

/// The most one write of the body may carry (`words::CHUNK`).
const CHUNK: usize = 64 * 1024;

/// Keeps what is written, and the largest single write: a writer that built its file in
/// memory first would hand it over in one piece.
#[derive(Default)]
struct Recorder {
    bytes: Vec<u8>,
    largest_write: usize,
}

impl Write for Recorder {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.largest_write = self.largest_write.max(buf.len());
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn streamed(write: impl FnOnce(&mut Recorder) -> io::Result<()>) -> Recorder {
    let mut out = Recorder::default();
    write(&mut out).unwrap();
    assert!(
        out.bytes.len() > 4 * CHUNK,
        "too small to tell: {} bytes",
        out.bytes.len()
    );
    assert!(
        out.largest_write <= CHUNK,
        "a write of {} bytes",
        out.largest_write
    );
    out
}

/// A plain, a counting, a scalable and a cuckoo filter of a few hundred KiB each, with keys
/// in them.
fn large_filters() -> [AnyFilter; 4] {
    let plain = BloomFilter::builder().bits(1 << 22).hashes(7).seed(1);
    let counting = CountingBloomFilter::builder()
        .bits(1 << 20)
        .hashes(7)
        .seed(2);
    let filters: [AnyFilter; 4] = [
        plain.build().unwrap().into(),
        counting.build().unwrap().into(),
        ScalableBloomFilter::builder(100_000, 0.01)
            .seed(3)
            .build()
            .unwrap()
            .into(),
        CuckooFilter::builder()
            .expected_items(200_000)
            .false_positive_rate(0.001)
            .seed(4)
            .build()
            .unwrap()
            .into(),
    ];
    for filter in &filters {
        for key in 0..150_000u64 {
            filter.insert(&key);
        }
    }
    assert!(filters[2].as_scalable().unwrap().num_stages() > 1);
    filters
}

#[test]
fn every_kind_streams_its_file_in_bounded_writes() {
    for filter in large_filters() {
        let expected = filter.to_bytes();
        let by_kind = streamed(|w| match &filter {
            AnyFilter::Plain(f) => f.write_to(w),
            AnyFilter::Counting(f) => f.write_to(w),
            AnyFilter::Scalable(f) => f.write_to(w),
            AnyFilter::Cuckoo(f) => f.write_to(w),
            AnyFilter::Windowed(f) => f.write_to(w),
        });
        assert!(by_kind.bytes == expected, "{}", filter.kind());
        let any = streamed(|w| filter.write_to(w));
        assert!(any.bytes == expected, "{}", filter.kind());

        let label = SnapshotLabel::new("users").with_watermark(vec![7; 100]);
        let snapshot = streamed(|w| Snapshot::write(w, &label, &filter));
        assert!(snapshot.bytes.ends_with(&expected), "{}", filter.kind());
        let read = Snapshot::read_from(&mut snapshot.bytes.as_slice()).unwrap();
        assert_eq!(read.label, Some(label));
        assert!(read.filter.to_bytes() == expected, "{}", filter.kind());
    }
}

#[test]
fn peek_reports_what_the_file_holds() {
    let kinds = [
        FilterKind::Plain,
        FilterKind::Counting,
        FilterKind::Scalable,
        FilterKind::Cuckoo,
    ];
    for (filter, kind) in large_filters().into_iter().zip(kinds) {
        let bare = filter.to_bytes();
        let info = peek(&bare).unwrap();
        assert_eq!((info.kind, info.version, info.label_len), (kind, 1, None));
        assert_eq!(info.header_len, 64);
        let whole = (kind != FilterKind::Scalable).then_some(bare.len() as u64);
        assert_eq!(info.filter_len, whole);
        // The header is enough.
        assert_eq!(peek(&bare[..64]).unwrap(), info);

        let mut snapshot = Vec::new();
        let label = SnapshotLabel::new("users").with_watermark(vec![1, 2, 3]);
        Snapshot::write(&mut snapshot, &label, &filter).unwrap();
        let labelled = peek(&snapshot).unwrap();
        let label_len = labelled.label_len.unwrap();
        assert_eq!(&snapshot[label_len as usize..], &bare[..]);
        assert_eq!(
            (labelled.kind, labelled.filter_len),
            (kind, info.filter_len)
        );
        assert!(matches!(
            peek(&snapshot[..label_len as usize + 63]),
            Err(DecodeError::Truncated { needed, .. }) if needed == label_len + 64
        ));
    }
}

#[test]
fn peek_refuses_what_it_cannot_read() {
    let bytes = BloomFilter::new(100, 0.01).unwrap().to_bytes();
    assert!(matches!(peek(b"not a filter"), Err(DecodeError::BadMagic)));
    assert!(matches!(
        peek(&bytes[..5]),
        Err(DecodeError::Truncated {
            needed: 64,
            available: 5
        })
    ));
    let mut newer = bytes.clone();
    newer[8] = 2;
    assert!(matches!(
        peek(&newer),
        Err(DecodeError::UnsupportedVersion { found: 2 })
    ));
    let mut unknown = bytes;
    unknown[10] = 9;
    assert!(matches!(
        peek(&unknown),
        Err(DecodeError::UnsupportedKind { found: 9 })
    ));
}
