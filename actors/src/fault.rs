//! Faults injected into the real runtime for the guard's tests (feature
//! `fault-injection`, which no robot build enables): the guard is tested
//! against the runtime it guards, not a third cycle loop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use deathswitch::{Beat, Reason, Snapshot, Switch};

/// A fault `nao-rs run --fault` injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Beats but never confirms an all-off frame, and its frames ignore the
    /// switch (it reads armed, its count as first read, no wake needed).
    NeverConfirm,
    /// Registers, then freezes for good (ignoring SIGTERM) before the
    /// start-up.
    FreezeRegistered,
    /// Start-up done, holding the board, then freezes before the first beat.
    FreezeLinked,
    /// SIGUSR2 makes the cycle thread write through a null pointer: a real
    /// segfault, before the stop SIGUSR2 also asks for can trip `shutdown`.
    CrashOnUsr2,
}

impl Fault {
    /// The fault named `name` (`never-confirm`, `freeze-registered`,
    /// `freeze-linked`, `crash-on-usr2`).
    pub fn from_name(name: &str) -> Option<Fault> {
        Some(match name {
            "never-confirm" => Fault::NeverConfirm,
            "freeze-registered" => Fault::FreezeRegistered,
            "freeze-linked" => Fault::FreezeLinked,
            "crash-on-usr2" => Fault::CrashOnUsr2,
            _ => return None,
        })
    }
}

/// Sleeps for good; only SIGKILL ends the process.
pub(crate) fn freeze() -> ! {
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}

static USR2: AtomicBool = AtomicBool::new(false);

/// Installs (once) the SIGUSR2 handler of [`Fault::CrashOnUsr2`]: it only
/// records the signal.
fn catch_usr2() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let flag: &'static AtomicBool = &USR2;
        // SAFETY: the handler only stores to a static atomic, which is
        // async-signal-safe.
        let _ = unsafe {
            signal_hook::low_level::register(signal_hook::consts::SIGUSR2, move || {
                flag.store(true, Ordering::Relaxed)
            })
        };
    });
}

/// Once SIGUSR2 came, the calling thread segfaults.
fn crash_on_usr2() {
    // Relaxed: a test's trigger, no data behind it.
    if USR2.load(Ordering::Relaxed) {
        let p: *mut u8 = std::ptr::null_mut();
        // SAFETY: not safe, on purpose: the injected fault is a real
        // segfault of the cycle thread (a SIGSEGV sent with kill(2) would be
        // absorbed by Rust's stack-overflow handler).
        unsafe { std::ptr::write_volatile(p, 1) };
    }
}

/// With [`Fault::CrashOnUsr2`]: once SIGUSR2 came, the calling thread (the
/// cycle's, every tick) segfaults.
pub(crate) fn crash_if_asked(fault: Option<Fault>) {
    if fault == Some(Fault::CrashOnUsr2) {
        catch_usr2();
        crash_on_usr2();
    }
}

/// The switch as the runtime with `fault` sees it.
pub(crate) fn switch(inner: Arc<dyn Switch>, fault: Option<Fault>) -> Arc<dyn Switch> {
    match fault {
        Some(f @ (Fault::NeverConfirm | Fault::CrashOnUsr2)) => {
            if f == Fault::CrashOnUsr2 {
                catch_usr2();
            }
            Arc::new(FaultySwitch {
                fault: f,
                first: std::sync::OnceLock::new(),
                inner,
            })
        }
        _ => inner,
    }
}

/// The cycle's switch with a fault; every call not named here goes to the
/// inner switch.
///
/// - [`Fault::NeverConfirm`]: its reads ignore every trip (armed, the
///   count first read) and its beats never confirm all-off.
/// - [`Fault::CrashOnUsr2`]: after SIGUSR2 the cycle thread segfaults at
///   its next read, trip or beat, before it can trip. SIGUSR2 is also one
///   of `nao-rs run`'s stop signals: without this the stop it asks for
///   would trip `shutdown` first (at the top of the next cycle) and the
///   crash would come after a clean trip.
struct FaultySwitch {
    fault: Fault,
    first: std::sync::OnceLock<Snapshot>,
    inner: Arc<dyn Switch>,
}

impl FaultySwitch {
    fn crashing(&self) -> bool {
        self.fault == Fault::CrashOnUsr2
    }
}

impl Switch for FaultySwitch {
    fn read(&self) -> Snapshot {
        if self.crashing() {
            crash_on_usr2();
            return self.inner.read();
        }
        let now = self.inner.read();
        let first = *self.first.get_or_init(|| now);
        Snapshot {
            armed: true,
            reason: None,
            reason_code: 0,
            trip_count: first.trip_count,
            ..now
        }
    }
    fn trip(&self, reason: Reason) -> bool {
        if self.crashing() {
            crash_on_usr2();
        }
        self.inner.trip(reason)
    }
    fn beat(&self, beat: &Beat) {
        if self.crashing() {
            crash_on_usr2();
            return self.inner.beat(beat);
        }
        self.inner.beat(&Beat {
            all_off: false,
            ..*beat
        })
    }
    fn register(&self, pid: u32) {
        self.inner.register(pid)
    }
    fn clock(&self) -> &dyn nao_kit::clock::Clock {
        self.inner.clock()
    }
    fn path(&self) -> Option<&std::path::Path> {
        self.inner.path()
    }
    fn peek(&self) -> Snapshot {
        self.inner.peek()
    }
}
