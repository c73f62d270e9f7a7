//! The kit's counting allocator counts the calling thread's allocations and
//! no other thread's.

use nao_kit::alloc::{installed, thread_allocations, CountingAlloc};

#[global_allocator]
static ALLOCATOR: CountingAlloc = CountingAlloc;

#[test]
fn counting_allocator_counts_this_threads_allocations_only() {
    let before = thread_allocations();
    let v: Vec<u64> = Vec::with_capacity(16);
    std::hint::black_box(&v);
    assert!(installed());
    assert_eq!(thread_allocations() - before, 1, "one allocation counted");
    let mid = thread_allocations();
    std::thread::spawn(|| {
        let w: Vec<u8> = vec![1, 2, 3];
        std::hint::black_box(&w);
    })
    .join()
    .unwrap();
    // Spawning and joining may allocate on this thread (the handle); the
    // other thread's vector must not be counted here: at most what spawn
    // itself needs.
    let spawned_here = thread_allocations() - mid;
    let mut x = 0u64;
    for i in 0..1000 {
        x = x.wrapping_add(std::hint::black_box(i));
    }
    let quiet = thread_allocations();
    std::hint::black_box(x);
    assert_eq!(thread_allocations(), quiet, "no allocation, no count");
    assert!(spawned_here < 10, "{spawned_here}");
}
