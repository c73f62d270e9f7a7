//! The process-wide SIGBUS handler. Truncating the page file under a live
//! mapping makes every access to the lost part raise SIGBUS, and so does
//! touching a page a full filesystem (tmpfs) cannot allocate. The handler
//! finds the mapping by `si_addr` in a fixed table of slots and always
//! resolves the fault:
//!
//! 1. On the first two faults of a slot since the last `check` (`settle`), it
//!    backs the file with `fallocate(fd, 0, 0, LEN)` (which also extends a
//!    truncated file; `ftruncate` where the filesystem has no `fallocate`)
//!    and returns: the access is retried and reads zeros (no magic:
//!    tripped `page-lost`).
//! 2. If that fails (`ENOSPC` on a full filesystem) or the slot keeps
//!    faulting, it maps anonymous zeroed memory over the page
//!    (`MAP_FIXED`), marks the slot detached and returns: the access reads
//!    zeros (tripped `page-lost`) and never faults again. [`crate::Page::check`]
//!    maps the file back once it can hold the page.
//!
//! Faults at other addresses go to the previous handler. Only atomics and
//! raw system calls (`fallocate`, `fstat`, `ftruncate`, `mmap`; each a
//! single syscall with no lock or allocation in libc) run in the handler,
//! and it restores `errno` on return.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// How many mappings one process can register (each replacement of the
/// page file adds one).
pub(crate) const SLOTS: usize = 64;

/// Faults a slot may have between two [`settle`]s that are answered by
/// backing the file; later ones detach it.
const BACKING_ATTEMPTS: u32 = 2;

/// The SIGBUS handler's slot for one registered mapping of a page file.
struct FaultSlot {
    used: AtomicBool,
    base: AtomicUsize,
    len: AtomicUsize,
    fd: AtomicI32,
    /// Faults since the last `settle`.
    faults: AtomicU32,
    /// 0: the file is mapped; else the errno that made the handler (or
    /// `detach`) map anonymous memory over it.
    detached: AtomicI32,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: FaultSlot = FaultSlot {
    used: AtomicBool::new(false),
    base: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    fd: AtomicI32::new(-1),
    faults: AtomicU32::new(0),
    detached: AtomicI32::new(0),
};

static TABLE: [FaultSlot; SLOTS] = [EMPTY; SLOTS];
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
static INSTALL: std::sync::Once = std::sync::Once::new();
static HANDLED: AtomicUsize = AtomicUsize::new(0);

/// How many SIGBUS faults on registered mappings this process resolved
/// (by backing the file or by detaching the mapping): the page's tests
/// tell a fault the handler resolved from one that never came.
#[cfg(test)]
pub(crate) fn handled() -> usize {
    HANDLED.load(Ordering::Relaxed)
}

/// Registers a mapping of `len` bytes at `base` backed by `fd`, installing
/// the handler on first use. Returns the slot, or `None` when all are taken.
pub(crate) fn register(base: usize, len: usize, fd: i32) -> Option<usize> {
    install();
    for (i, s) in TABLE.iter().enumerate() {
        if s.used
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            s.fd.store(fd, Ordering::Release);
            s.len.store(len, Ordering::Release);
            s.faults.store(0, Ordering::Release);
            s.detached.store(0, Ordering::Release);
            // Release: fd and len are visible to a handler that sees base.
            s.base.store(base, Ordering::Release);
            return Some(i);
        }
    }
    None
}

/// Forgets a slot; called before its mapping is unmapped.
pub(crate) fn unregister(slot: usize) {
    if let Some(s) = TABLE.get(slot) {
        s.base.store(0, Ordering::Release);
        s.len.store(0, Ordering::Release);
        s.fd.store(-1, Ordering::Release);
        s.used.store(false, Ordering::Release);
    }
}

/// The errno that detached the slot's mapping, if it is detached.
pub(crate) fn detached(slot: usize) -> Option<i32> {
    // Acquire: pairs with the Release store in `detach_slot`.
    let e = TABLE.get(slot)?.detached.load(Ordering::Acquire);
    (e != 0).then_some(e)
}

/// A check ran: the slot's fault budget starts again.
pub(crate) fn settle(slot: usize) {
    if let Some(s) = TABLE.get(slot) {
        s.faults.store(0, Ordering::Release);
    }
}

/// Backs the page's file: allocates its first `LEN` bytes (extending it if
/// shorter), or, where the filesystem has no `fallocate`, extends it with
/// `ftruncate`. Returns the errno on failure. Async-signal-safe: raw
/// system calls only, no allocation, no lock.
pub(crate) fn back(fd: i32) -> Result<(), i32> {
    let len = crate::LEN as libc::off_t;
    // SAFETY: fallocate on a descriptor we keep open; a single syscall.
    if unsafe { libc::fallocate(fd, 0, 0, len) } == 0 {
        return Ok(());
    }
    let e = errno();
    if e != libc::EOPNOTSUPP && e != libc::ENOSYS {
        return Err(e);
    }
    // SAFETY: a zeroed stat is a valid out-buffer; fstat only writes it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat on our descriptor into a valid buffer; a single syscall.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(errno());
    }
    if st.st_size >= len {
        return Ok(());
    }
    // SAFETY: ftruncate on our descriptor; a single syscall.
    if unsafe { libc::ftruncate(fd, len) } == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

/// Maps anonymous zeroed memory over the slot's page (`MAP_FIXED`), so
/// every access reads zeros (no magic: tripped `page-lost`) and none
/// faults, and records `why`. Async-signal-safe (one `mmap` syscall and
/// atomics). False when the slot is unknown or `mmap` failed.
pub(crate) fn detach(slot: usize, why: i32) -> bool {
    TABLE.get(slot).is_some_and(|s| detach_slot(s, why))
}

fn detach_slot(s: &FaultSlot, why: i32) -> bool {
    let base = s.base.load(Ordering::Acquire);
    let len = s.len.load(Ordering::Acquire);
    if base == 0 {
        return false;
    }
    // SAFETY: [base, base+len) is one of our own shared mappings (page
    // aligned; the kernel rounds len up to the page). MAP_FIXED replaces it
    // atomically with private zeroed memory at the same address, so every
    // pointer into it stays valid; mmap is a single syscall.
    let p = unsafe {
        libc::mmap(
            base as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return false;
    }
    // Release: pairs with the Acquire load in `detached`.
    s.detached
        .store(if why == 0 { libc::EIO } else { why }, Ordering::Release);
    true
}

/// Maps the slot's file back over its page (after [`back`] succeeded) and
/// clears the detached mark. Not for signal handlers (it is only called by
/// `check`). False when `mmap` failed (the slot stays detached).
pub(crate) fn reattach(slot: usize) -> bool {
    let Some(s) = TABLE.get(slot) else {
        return false;
    };
    let base = s.base.load(Ordering::Acquire);
    let len = s.len.load(Ordering::Acquire);
    let fd = s.fd.load(Ordering::Acquire);
    if base == 0 {
        return false;
    }
    // Cleared before the file is mapped: a fault on the new mapping that
    // detaches it again leaves the mark set.
    let was = s.detached.swap(0, Ordering::AcqRel);
    s.faults.store(0, Ordering::Release);
    // SAFETY: as in `detach_slot`, with our page file's descriptor, shared.
    let p = unsafe {
        libc::mmap(
            base as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        s.detached.store(was, Ordering::Release);
        return false;
    }
    true
}

fn errno() -> i32 {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

fn set_errno(e: i32) {
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = e };
}

fn install() {
    INSTALL.call_once(|| {
        // SAFETY: sigaction structs are plain C data; zeroed is a valid value.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: reads the current disposition only (act is null).
        unsafe { libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) };
        let _ = PREVIOUS.set(old);
        // SAFETY: as above.
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = handler as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER | libc::SA_ONSTACK;
        // SAFETY: sa_mask is a valid sigset_t inside `act`.
        unsafe { libc::sigemptyset(&mut act.sa_mask) };
        // SAFETY: `handler` is an extern "C" fn with the SA_SIGINFO signature
        // and only calls async-signal-safe functions.
        unsafe { libc::sigaction(libc::SIGBUS, &act, std::ptr::null_mut()) };
    });
}

extern "C" fn handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // The interrupted code may be between a syscall and its errno read.
    let saved = errno();
    // SAFETY: the kernel passes a valid siginfo_t for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    for s in TABLE.iter() {
        // Acquire: pairs with the Release store of base in `register`.
        let base = s.base.load(Ordering::Acquire);
        let len = s.len.load(Ordering::Acquire);
        if base != 0 && addr >= base && addr < base + len {
            let fd = s.fd.load(Ordering::Acquire);
            let n = s.faults.fetch_add(1, Ordering::AcqRel);
            let why = if n < BACKING_ATTEMPTS {
                match back(fd) {
                    Ok(()) => {
                        HANDLED.fetch_add(1, Ordering::Relaxed);
                        set_errno(saved);
                        return;
                    }
                    Err(e) => e,
                }
            } else {
                // Backed, and it still faults (a full tmpfs refuses the
                // page itself): stop retrying.
                libc::ENOSPC
            };
            if detach_slot(s, why) {
                HANDLED.fetch_add(1, Ordering::Relaxed);
                set_errno(saved);
                return;
            }
            // Not even anonymous memory: returning would fault forever.
            // Die as without us (the guard takes over a dead runtime).
            break;
        }
    }
    set_errno(saved);
    chain(sig, info, ctx);
}

fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let prev = PREVIOUS.get();
    let action = prev.map_or(libc::SIG_DFL, |p| p.sa_sigaction);
    if action == libc::SIG_DFL || action == libc::SIG_IGN {
        // Restore the default and return: the fault repeats and kills the
        // process the way it would have without us.
        // SAFETY: zeroed sigaction with SIG_DFL is valid; sigaction is
        // async-signal-safe.
        unsafe {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &dfl, std::ptr::null_mut());
        }
        return;
    }
    let flags = prev.map_or(0, |p| p.sa_flags);
    if flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed with SA_SIGINFO, so it
        // has this signature.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(action) };
        f(sig, info, ctx);
    } else {
        // SAFETY: a plain handler takes the signal number only.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(action) };
        f(sig);
    }
}
