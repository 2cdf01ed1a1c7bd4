//! A global allocator that counts the bytes each thread has live on the heap, so a test
//! measures what the thread that built a filter allocated, whatever other tests' threads
//! allocate meanwhile. Included by path (`#[path = …] mod counting_alloc;`) by the test
//! files that measure memory: bloom-core's `tests/cuckoo.rs` and bloom-tower's
//! `tests/filter_set_memory.rs`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

/// Bytes this thread has allocated and not freed since it started (negative if it freed
/// what another thread allocated).
pub fn live() -> isize {
    LIVE.with(Cell::get)
}

fn count(bytes: usize, sign: isize) {
    // `try_with`: a thread being torn down has no counter left; nothing to measure then.
    let _ = LIVE.try_with(|live| live.set(live.get() + sign * bytes as isize));
}

// SAFETY: forwards to the system allocator unchanged; only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size(), 1);
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size(), 1);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(layout.size(), -1);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;
