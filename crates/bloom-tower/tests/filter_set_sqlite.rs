//! `SqliteStore`: rows round-trip and are replaced; tables in one file keep their names
//! apart; a `FilterSet` evicts through it, loses nothing and is read back by a new process;
//! a corrupt or foreign row is an error left alone; a locked database fails a store within
//! its wait and the set keeps the filter. The kill test is in `tests/filter_set_kill.rs`.
#![cfg(feature = "sqlite-store")]

use bloom_core::{AnyFilter, BloomFilter};
use bloom_tower::filter_set::{
    FilterSet, FilterSetError, FilterStore, SqliteStore, StoreError, counted_bytes,
};
use sqlx::Connection as _;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn rows_round_trip_are_replaced_and_tables_keep_their_names_apart() -> TestResult {
    runtime().block_on(async {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("filters.db");
        let store = SqliteStore::open(&file).await?;
        let bytes: Vec<u8> = (0..=255u8).chain([0, 0, 255]).collect(); // not UTF-8, NULs
        store.store("user/42", bytes.clone()).await?;
        assert_eq!(store.load("user/42").await?, Some(bytes));
        assert_eq!(store.load("user/43").await?, None);
        store.store("user/42", b"second".to_vec()).await?;
        assert_eq!(store.load("user/42").await?, Some(b"second".to_vec()));

        // A batch larger than one statement's rows, replacing some rows and adding others.
        let batch: Vec<(String, Vec<u8>)> = (0..600u32)
            .map(|i| (format!("user/{i}"), i.to_le_bytes().to_vec()))
            .collect();
        store.store_many(batch).await?;
        for i in 0..600u32 {
            let name = format!("user/{i}");
            assert_eq!(
                store.load(&name).await?,
                Some(i.to_le_bytes().to_vec()),
                "{name}"
            );
        }

        // Another table in the same file: its own names.
        let other = SqliteStore::builder(&file)
            .table("feed_shown")
            .open()
            .await?;
        assert_eq!(other.load("user/42").await?, None);
        other.store("user/42", b"other".to_vec()).await?;
        assert_eq!(
            store.load("user/42").await?,
            Some(42u32.to_le_bytes().to_vec())
        );

        // A table name that is not a plain identifier is refused, with the reason.
        for bad in [
            "",
            "1st",
            "x\"; DROP TABLE bloom_filters; --",
            "a b",
            &"t".repeat(65),
        ] {
            let error = SqliteStore::builder(&file)
                .table(bad)
                .open()
                .await
                .unwrap_err();
            assert!(
                error.to_string().contains("invalid table name"),
                "{bad:?}: {error}"
            );
        }
        assert_eq!(
            store.load("user/1").await?,
            Some(1u32.to_le_bytes().to_vec())
        );
        Ok(())
    })
}

#[test]
fn a_filter_set_evicts_through_sqlite_and_a_new_process_reads_it_back() -> TestResult {
    runtime().block_on(async {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("filters.db");
        // The budget holds two users' filters, not three.
        let per_filter = counted_bytes(&AnyFilter::from(BloomFilter::new(1000, 0.01)?)) + 3;
        let items = |user: u64| (0..10).map(move |i| format!("user-{user}-item-{i}"));
        let set =
            FilterSet::<u64, _>::builder(SqliteStore::builder(&file).sync(false).open().await?)
                .plain(1000, 0.01)?
                .budget_bytes(2 * per_filter + per_filter / 2)
                .build();
        for user in 0..600 {
            for item in items(user) {
                set.insert(&user, &item).await?;
            }
        }
        for user in 0..600 {
            for item in items(user) {
                assert!(set.contains(&user, &item).await?, "user {user} lost {item}");
            }
        }
        let stats = set.stats();
        assert!(stats.evictions > 0 && stats.loads > 0, "{stats:?}");
        assert_eq!((stats.load_errors, stats.store_errors), (0, 0), "{stats:?}");
        set.flush().await?;
        drop(set);

        let again = FilterSet::<u64, _>::builder(SqliteStore::open(&file).await?)
            .plain(1000, 0.01)?
            .build();
        for user in 0..600 {
            for item in items(user) {
                assert!(
                    again.contains(&user, &item).await?,
                    "user {user} lost {item}"
                );
            }
        }
        assert_eq!(again.stats().loads, 600);
        Ok(())
    })
}

#[test]
fn a_flush_of_a_thousand_users_lands_in_batches_and_reads_back() -> TestResult {
    runtime().block_on(async {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("filters.db");
        let set = FilterSet::<u64, _>::builder(SqliteStore::open(&file).await?)
            .plain(100, 0.01)?
            .build();
        for user in 0..1_000u64 {
            set.insert(&user, &user).await?;
        }
        assert_eq!(set.flush().await?, 1_000);
        let store = SqliteStore::open(&file).await?;
        let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM bloom_filters")
            .fetch_one(store.pool())
            .await?;
        assert_eq!(rows, 1_000);
        for user in 0..1_000u64 {
            let bytes = store.load(&user.to_string()).await?.expect("stored");
            assert!(
                AnyFilter::from_bytes(&bytes)?.contains(&user),
                "user {user}"
            );
        }
        Ok(())
    })
}

#[test]
fn a_corrupt_or_foreign_row_is_an_error_and_is_left_alone() -> TestResult {
    runtime().block_on(async {
        let dir = tempfile::tempdir()?;
        let store = SqliteStore::open(dir.path().join("filters.db")).await?;
        let set = FilterSet::<u64, _>::builder(store.clone())
            .plain(100, 0.01)?
            .build();
        // A row of bytes that are not a filter, and a row another program wrote as text.
        store.store("1", b"not a filter".to_vec()).await?;
        sqlx::query("INSERT INTO bloom_filters (name, bytes) VALUES ('2', 'some text')")
            .execute(store.pool())
            .await?;
        assert!(matches!(
            set.contains(&1, "x").await,
            Err(FilterSetError::Corrupt { .. })
        ));
        assert!(matches!(
            set.contains(&2, "x").await,
            Err(FilterSetError::Corrupt { .. } | FilterSetError::Load { .. })
        ));
        assert!(
            set.insert(&1, "x").await.is_err(),
            "a write does not replace the row"
        );
        assert_eq!(store.load("1").await?, Some(b"not a filter".to_vec()));
        Ok(())
    })
}

#[test]
fn a_locked_database_fails_the_store_and_the_set_keeps_the_filter() -> TestResult {
    runtime().block_on(async {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("filters.db");
        let store = SqliteStore::open(&file).await?;
        let set = FilterSet::<u64, _>::builder(store.clone())
            .plain(100, 0.01)?
            .build();
        set.insert(&1, "x").await?;

        // A second connection (another process's) holds the write lock.
        let mut other =
            sqlx::SqliteConnection::connect(&format!("sqlite://{}", file.display())).await?;
        sqlx::query("BEGIN IMMEDIATE").execute(&mut other).await?;
        let error = set.flush().await.unwrap_err();
        assert!(
            matches!(
                &error,
                FilterSetError::Store {
                    source: StoreError::Backend(_),
                    ..
                }
            ),
            "{error}"
        );
        assert!(set.contains(&1, "x").await?, "the filter stays in memory");
        assert_eq!(store.load("1").await?, None);

        sqlx::query("ROLLBACK").execute(&mut other).await?;
        assert_eq!(set.flush().await?, 1, "stored once the lock is free");
        let bytes = store.load("1").await?.expect("stored");
        assert!(AnyFilter::from_bytes(&bytes)?.contains("x"));
        Ok(())
    })
}
