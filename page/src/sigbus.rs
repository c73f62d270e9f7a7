//! The process-wide SIGBUS handler. Truncating the page file under a live
//! mapping makes every access to the lost part raise SIGBUS; the handler
//! finds the mapping by `si_addr` in a fixed table of slots, re-extends the
//! file with `ftruncate` on the kept descriptor and returns, so the access is
//! retried and reads zero: no magic, which counts as tripped. Faults at other
//! addresses go to the previous handler. Only atomics and `ftruncate`
//! (async-signal-safe) run in the handler.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// How many mappings one process can register (each replacement of the
/// page file adds one).
pub const SLOTS: usize = 64;

struct Slot {
    used: AtomicBool,
    base: AtomicUsize,
    len: AtomicUsize,
    fd: AtomicI32,
}

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: Slot = Slot {
    used: AtomicBool::new(false),
    base: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    fd: AtomicI32::new(-1),
};

static TABLE: [Slot; SLOTS] = [EMPTY; SLOTS];
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
static INSTALL: std::sync::Once = std::sync::Once::new();
static HANDLED: AtomicUsize = AtomicUsize::new(0);

/// How many SIGBUS faults on registered mappings this process repaired.
pub fn handled() -> usize {
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
    // SAFETY: the kernel passes a valid siginfo_t for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    for s in TABLE.iter() {
        // Acquire: pairs with the Release store of base in `register`.
        let base = s.base.load(Ordering::Acquire);
        let len = s.len.load(Ordering::Acquire);
        if base != 0 && addr >= base && addr < base + len {
            let fd = s.fd.load(Ordering::Acquire);
            // SAFETY: ftruncate is async-signal-safe; fd is the page file kept
            // open for as long as the slot is registered.
            let rc = unsafe { libc::ftruncate(fd, crate::LEN as libc::off_t) };
            if rc == 0 {
                HANDLED.fetch_add(1, Ordering::Relaxed);
                return;
            }
            // The file can't be re-extended: returning would fault forever.
            // Die as without us (the guard takes over a dead runtime).
            break;
        }
    }
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
