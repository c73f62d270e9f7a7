//! The guard ends on SIGTERM and SIGINT only. Every other asynchronous
//! signal whose default action ends or stops a process is ignored from the
//! start (`SIG_IGN`): a stray `kill -HUP`, `-USR1`, `-QUIT`, an `alarm`, a
//! closed pipe, a terminal's job control, a real-time signal. SIGKILL and
//! SIGSTOP cannot be ignored; the fault signals (SIGSEGV, SIGBUS, SIGILL,
//! SIGFPE, SIGTRAP) keep their handlers (the page's SIGBUS repair, Rust's
//! stack-overflow report), and the kernel delivers a real fault whatever
//! the disposition. SIGABRT and SIGSYS sent by another process are
//! ignored; `abort()` and a seccomp trap still end the guard (the kernel
//! and libc force them).

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};

/// The signals the guard ignores (the named ones; real-time signals are
/// ignored as well, see [`ignore_all_but_term_and_int`]).
pub const IGNORED: &[Signal] = &[
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGABRT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGPIPE,
    Signal::SIGALRM,
    Signal::SIGSTKFLT,
    Signal::SIGTSTP,
    Signal::SIGTTIN,
    Signal::SIGTTOU,
    Signal::SIGXCPU,
    Signal::SIGXFSZ,
    Signal::SIGVTALRM,
    Signal::SIGPROF,
    Signal::SIGIO,
    Signal::SIGPWR,
    Signal::SIGSYS,
];

/// Whether an asynchronous `sig` (by number) ends the guard: TERM and INT
/// (a clean stop), KILL (cannot be caught), and the fault signals, whose
/// handlers stay. Everything else is ignored.
pub fn ends_the_guard(sig: i32) -> bool {
    [
        libc::SIGTERM,
        libc::SIGINT,
        libc::SIGKILL,
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGTRAP,
    ]
    .contains(&sig)
}

/// Sets every signal of [`IGNORED`] and every real-time signal libc lets a
/// program have to `SIG_IGN`. Call first thing, before any thread starts.
/// Returns the signals that could not be ignored (none expected).
pub fn ignore_all_but_term_and_int() -> Vec<i32> {
    let ign = SigAction::new(SigHandler::SigIgn, SaFlags::SA_RESTART, SigSet::empty());
    let mut failed = Vec::new();
    for &sig in IGNORED {
        debug_assert!(!ends_the_guard(sig as i32));
        // SAFETY: SIG_IGN installs no handler code; nothing runs in signal
        // context.
        if unsafe { sigaction(sig, &ign) }.is_err() {
            failed.push(sig as i32);
        }
    }
    for sig in libc::SIGRTMIN()..=libc::SIGRTMAX() {
        // SAFETY: SIG_IGN for a real-time signal libc hands out (its own
        // internal ones lie below SIGRTMIN()); no handler code.
        if unsafe { libc::signal(sig, libc::SIG_IGN) } == libc::SIG_ERR {
            failed.push(sig);
        }
    }
    failed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_term_int_kill_and_the_fault_signals_end_the_guard() {
        for &s in IGNORED {
            assert!(!ends_the_guard(s as i32), "{s}");
        }
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGKILL, libc::SIGBUS] {
            assert!(ends_the_guard(s));
        }
        // Every signal whose default ends or stops a process is either
        // ignored or listed as ending the guard (SIGSTOP cannot be ignored).
        for s in 1..libc::SIGRTMIN() {
            let Ok(sig) = Signal::try_from(s) else {
                continue;
            };
            let harmless = [
                Signal::SIGCHLD,
                Signal::SIGCONT,
                Signal::SIGURG,
                Signal::SIGWINCH,
                Signal::SIGSTOP,
            ];
            assert!(
                harmless.contains(&sig) || IGNORED.contains(&sig) || ends_the_guard(s),
                "{sig} is neither ignored nor meant to end the guard"
            );
        }
    }
}
