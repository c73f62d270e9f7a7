//! A counting allocator, so a real-time thread can prove in a running
//! process (not only in a test) that its loop allocates nothing.
//!
//! A program opts in with
//! `#[global_allocator] static A: nao_kit::alloc::CountingAlloc = CountingAlloc;`
//! (`nao-rs` does). Every allocation then adds one to a counter of the
//! allocating thread; [`thread_allocations`] reads the calling thread's.
//! The cost is one thread-local increment per allocation; frees are not
//! counted. Without the allocator installed, [`installed`] is false and the
//! counts stay 0.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

thread_local! {
    // const-initialised and without Drop: usable from inside the allocator.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

static INSTALLED: AtomicBool = AtomicBool::new(false);

/// The system allocator, counting allocations per thread.
#[derive(Debug, Default, Clone, Copy)]
pub struct CountingAlloc;

fn count() {
    // try_with: during a thread's teardown the slot may be gone; then the
    // allocation is simply not counted.
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get().wrapping_add(1)));
    // Relaxed: a flag read only to say whether counts are meaningful.
    if !INSTALLED.load(Ordering::Relaxed) {
        INSTALLED.store(true, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s guarantees hold; the counting touches only a
// thread-local `Cell` and an atomic flag and never allocates.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller upholds `GlobalAlloc::alloc_zeroed`'s contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller upholds `GlobalAlloc::dealloc`'s contract.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Allocations (alloc, alloc_zeroed, realloc) made by the calling thread so
/// far through [`CountingAlloc`]; 0 when it is not the global allocator.
pub fn thread_allocations() -> u64 {
    ALLOCATIONS.try_with(Cell::get).unwrap_or(0)
}

/// Allocations made by `f` on the calling thread.
///
/// # Panics
///
/// When [`CountingAlloc`] is not the global allocator (the count would be
/// 0 whatever `f` does).
pub fn allocations(f: impl FnOnce()) -> u64 {
    assert!(
        installed(),
        "install nao_kit::alloc::CountingAlloc as the #[global_allocator]"
    );
    let before = thread_allocations();
    f();
    thread_allocations() - before
}

/// Whether [`CountingAlloc`] is this process's global allocator (true once
/// it has served an allocation).
pub fn installed() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}
