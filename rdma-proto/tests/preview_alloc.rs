//! `preview_text` reads only the head of a payload: converting a large buffer allocates about
//! `MAX_TEXT`, not a lossy copy of the whole buffer (issue 16, item 5). Its own test binary,
//! because it installs a counting global allocator.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts the bytes asked for.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: same layout contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: ptr came from System.alloc with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATED.fetch_add(new_size, Ordering::Relaxed);
        // SAFETY: ptr came from System.alloc with this layout.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn preview_of_a_large_payload_allocates_only_its_head() {
    // 16 MiB of invalid UTF-8: a whole-buffer lossy conversion would allocate 48 MiB.
    let payload = vec![0xffu8; 16 << 20];
    let before = ALLOCATED.load(Ordering::Relaxed);
    let (text, truncated) = rdma_proto::preview_text(&payload);
    let used = ALLOCATED.load(Ordering::Relaxed) - before;
    assert!(truncated);
    assert_eq!(text.chars().count(), rdma_proto::MAX_TEXT / 3);
    assert!(
        used <= 16 * rdma_proto::PREVIEW_INPUT,
        "preview_text allocated {used} bytes for a 16 MiB payload"
    );
}
