//! `DirectoryStore` with long names: every name maps to a valid file of its own, so a
//! `FilterSet` keyed by URLs or unicode text evicts within its budget and loads every key
//! back; a digest collision is an error, never another name's filter; a path past `PATH_MAX`
//! is an error, not a panic and not "absent".
#![cfg(feature = "filter-set")]

use std::path::Path;

use bloom_core::{AnyFilter, BloomFilter};
use bloom_tower::filter_set::{DirectoryStore, FilterSet, FilterStore, counted_bytes};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// `len` bytes (cut at a char boundary below it) of URL-ish text mixing ASCII punctuation,
/// two- to four-byte characters, then `tail`.
fn name(len: usize, tail: &str) -> String {
    const PATTERN: &str = "https://例え.jp/ä?q=ü&x=🦀#frag/../Ωmega%20 'quote' \"dq\";\\";
    let body_len = len - tail.len();
    let mut body = String::new();
    while body.len() < body_len {
        for c in PATTERN.chars() {
            if body.len() + c.len_utf8() > body_len {
                break;
            }
            body.push(c);
        }
        if body.len() + 4 > body_len {
            // Pad with ASCII to the exact length.
            while body.len() < body_len {
                body.push('.');
            }
        }
    }
    let name = body + tail;
    assert_eq!(name.len(), len);
    name
}

fn plain(_: &String) -> AnyFilter {
    AnyFilter::from(
        BloomFilter::builder()
            .expected_items(200)
            .false_positive_rate(0.01)
            .seed(7)
            .build()
            .unwrap(),
    )
}

/// Every file under `dir` has a name within `NAME_MAX` (255 bytes).
fn file_names_fit(dir: &Path) -> usize {
    let mut files = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        assert!(entry.file_name().len() <= 255, "{:?}", entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            files += file_names_fit(&entry.path());
        } else {
            files += 1;
        }
    }
    files
}

#[test]
fn long_unicode_names_are_stored_evicted_and_loaded_with_every_key() {
    let names: Vec<String> = vec![
        name(100, "#a"),
        name(300, "#b"),
        name(2_000, "#c"),
        // Equal in their first 255 (and 1,990) bytes.
        name(300, "#only-here-1"),
        name(300, "#only-here-2"),
        name(2_000, "#only-here-1"),
        name(2_000, "#only-here-2"),
        "tenant-7".to_owned(),
    ];
    for (i, a) in names.iter().enumerate() {
        assert!(names[..i].iter().all(|b| b != a), "the names differ");
    }
    let dir = tempfile::tempdir().unwrap();
    let filter_bytes = counted_bytes(&plain(&String::new()));
    let set = FilterSet::<String, _>::builder(DirectoryStore::new(dir.path()).unwrap().sync(false))
        // Two filters (and their names) fit: the others are evicted to files.
        .budget_bytes(2 * filter_bytes + 4_500)
        .new_filter(plain)
        .build();
    runtime().block_on(async {
        for round in 0..3 {
            for (i, n) in names.iter().enumerate() {
                for item in 0..20 {
                    set.insert(n, &format!("{i}/{round}/{item}")).await.unwrap();
                }
            }
        }
        for (i, n) in names.iter().enumerate() {
            for round in 0..3 {
                for item in 0..20 {
                    let key = format!("{i}/{round}/{item}");
                    assert!(set.contains(n, &key).await.unwrap(), "{key} of {n:?}");
                }
            }
        }
        set.flush().await.unwrap();
    });
    let stats = set.stats();
    assert_eq!(stats.store_errors, 0, "{stats:?}");
    assert_eq!(stats.load_errors, 0, "{stats:?}");
    assert!(stats.evictions >= 20, "{stats:?}");
    assert!(stats.loads >= 20, "{stats:?}");
    assert!(stats.bytes_in_memory <= stats.budget_bytes, "{stats:?}");
    assert_eq!(file_names_fit(dir.path()), names.len());

    // A new process reads every filter back from the files.
    let again = FilterSet::<String, _>::builder(DirectoryStore::new(dir.path()).unwrap())
        .new_filter(plain)
        .build();
    runtime().block_on(async {
        for (i, n) in names.iter().enumerate() {
            assert!(
                again.contains(n, &format!("{i}/2/19")).await.unwrap(),
                "{n:?}"
            );
        }
    });
    assert_eq!(again.stats().creates, 0);
}

#[test]
fn names_equal_in_their_first_255_bytes_have_files_of_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirectoryStore::new(dir.path()).unwrap();
    // A hundred names of each length, differing only in their last bytes: many share one of
    // the 256 directories, so only the digest keeps their files apart.
    let mut names: Vec<String> = (0..100)
        .flat_map(|i| [name(300, &format!("-{i}")), name(2_000, &format!("-{i}"))])
        .collect();
    names.extend(["a".repeat(300), "a".repeat(301)]);
    let directories: std::collections::HashSet<_> = names
        .iter()
        .map(|n| store.path_of(n).parent().unwrap().to_owned())
        .collect();
    assert!(
        directories.len() < names.len(),
        "some names share a directory"
    );
    runtime().block_on(async {
        for (i, n) in names.iter().enumerate() {
            store.store(n, i.to_be_bytes().to_vec()).await.unwrap();
        }
        for (i, n) in names.iter().enumerate() {
            let loaded = store.load(n).await.unwrap();
            assert_eq!(loaded, Some(i.to_be_bytes().to_vec()), "{n:?}");
        }
        assert_eq!(store.load(&name(300, "-100")).await.unwrap(), None);
    });
    for (i, a) in names.iter().enumerate() {
        for b in &names[..i] {
            assert_ne!(store.path_of(a), store.path_of(b));
        }
    }
}

#[test]
fn short_names_keep_their_file_names() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirectoryStore::new(dir.path()).unwrap();
    assert!(store.path_of("tenant-7").ends_with("tenant-7.bloom"));
    // 249 escaped bytes: the longest name kept whole (with `.bloom`, 255).
    let longest = "é".repeat(41) + "abc"; // 41 × 6 + 3
    let file = store.path_of(&longest);
    let file = file.file_name().unwrap().to_str().unwrap();
    assert_eq!(file, "%C3%A9".repeat(41) + "abc.bloom");
    let cut = store.path_of(&(longest + "d"));
    let cut = cut.file_name().unwrap().to_str().unwrap();
    assert!(cut.contains('~') && cut.len() <= 255, "{cut}");
    // The prefix of a long name is whole `%XX` escapes, whatever the alignment.
    for k in 0..3 {
        let path = store.path_of(&("a".repeat(k) + &"é".repeat(50)));
        let file = path.file_name().unwrap().to_str().unwrap();
        let prefix = file.split('~').next().unwrap();
        assert!(prefix.len() <= 96 && prefix.len() >= 94, "{file}");
        let bytes = prefix.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            i += if bytes[i] == b'%' { 3 } else { 1 };
        }
        assert_eq!(i, bytes.len(), "a cut escape: {file}");
    }
}

#[test]
fn a_file_naming_another_name_is_an_error_and_is_not_replaced() {
    // A digest collision, made by hand: `a`'s file holds `b`'s filter.
    let dir = tempfile::tempdir().unwrap();
    let store = DirectoryStore::new(dir.path()).unwrap();
    let (a, b) = (name(400, "a"), name(400, "b"));
    runtime().block_on(async {
        store.store(&b, b"filter of b".to_vec()).await.unwrap();
        std::fs::create_dir_all(store.path_of(&a).parent().unwrap()).unwrap();
        std::fs::copy(store.path_of(&b), store.path_of(&a)).unwrap();
        let loaded = store.load(&a).await;
        assert!(loaded.is_err(), "{loaded:?}");
        let error = loaded.unwrap_err().to_string();
        assert!(error.contains("another name"), "{error}");
        assert!(store.store(&a, b"filter of a".to_vec()).await.is_err());
        assert_eq!(
            std::fs::read(store.path_of(&a)).unwrap(),
            std::fs::read(store.path_of(&b)).unwrap()
        );
        assert_eq!(store.load(&b).await.unwrap(), Some(b"filter of b".to_vec()));
    });
}

#[test]
fn a_path_past_path_max_is_an_error_not_a_panic_nor_absent() {
    // A root of 4,000 bytes: a file under it passes PATH_MAX (4,096).
    let dir = tempfile::tempdir().unwrap();
    let mut root = dir.path().to_path_buf();
    while root.as_os_str().len() + 201 < 4_000 {
        root.push("d".repeat(200));
    }
    root.push("d".repeat(4_000 - root.as_os_str().len() - 1));
    assert_eq!(root.as_os_str().len(), 4_000);
    let store = DirectoryStore::new(&root).unwrap();
    let long = name(2_000, "x");
    runtime().block_on(async {
        let stored = store.store(&long, b"x".to_vec()).await;
        let error = stored.expect_err("the path is too long").to_string();
        assert!(error.contains("too long"), "{error}");
        assert!(store.load(&long).await.is_err(), "not Ok(None): absent");
    });
}
