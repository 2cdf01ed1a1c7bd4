//! The smallest useful program: build a filter of existing user ids, screen lookups with it,
//! and save it for a fast restart.
#![forbid(unsafe_code)]

use bloom_core::BloomFilter;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let existing: Vec<u64> = (1..=100_000).collect();
    let filter = BloomFilter::new(existing.len() as u64, 0.01)?;
    filter.insert_many(&existing);

    let probes = 100_001..=200_000u64;
    let let_through = probes.clone().filter(|id| filter.contains(id)).count();
    println!(
        "{} bits ({} KiB), k = {}; {} of {} absent ids would reach the database ({:.2}%)",
        filter.num_bits(),
        filter.size_in_bytes() / 1024,
        filter.num_hashes(),
        let_through,
        probes.count(),
        let_through as f64 / 1000.0
    );
    assert!(
        existing.iter().all(|id| filter.contains(id)),
        "never a false negative"
    );

    let path = std::env::temp_dir().join("quickstart.bloom");
    std::fs::write(&path, filter.to_bytes())?;
    let restored = BloomFilter::from_bytes(&std::fs::read(&path)?)?;
    println!(
        "restored from {}: estimated {:.0} items",
        path.display(),
        restored.estimated_items()
    );
    Ok(())
}
