//! The start-up facts: what the system a program starts on gives it, read
//! once at start-up and logged as one line by each robot program
//! (`nao-rs run`, `nao-rs-guard`, `nao-rs-beacon`), so a log from a robot
//! says on what it ran: the kernel release, whether `pidfd_open` exists
//! (Linux 5.3; the robot's 4.4 lacks it), whether the binary is static
//! (no loader: it starts on a 32-bit userland too), whether SCHED_FIFO
//! is permitted and whether memory is locked (`mlockall`).
//!
//! [`StartupFacts::probe`] reads them (a few system calls and
//! `/proc/self/status`; never on a cycle path); the rules that turn what
//! was read into facts are pure and table-tested.

use std::fmt;

/// What `pidfd_open` answered on this kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pidfd {
    /// It opened a pidfd of this process (and the probe closed it).
    Present,
    /// ENOSYS: the kernel is older than 5.3 (or a filter answers so).
    Absent,
    /// Another error (its errno): EPERM under a seccomp filter, EMFILE.
    Failed(i32),
}

impl Pidfd {
    /// The fact from `pidfd_open`'s result: `Ok` or its errno.
    pub fn from_result(result: Result<(), i32>) -> Pidfd {
        match result {
            Ok(()) => Pidfd::Present,
            Err(libc::ENOSYS) => Pidfd::Absent,
            Err(e) => Pidfd::Failed(e),
        }
    }
}

/// Whether SCHED_FIFO may be used, and up to which priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fifo {
    /// Permitted up to `max` (99 with CAP_SYS_NICE, else RLIMIT_RTPRIO).
    Granted {
        /// The highest priority the process may take.
        max: u8,
        /// True when CAP_SYS_NICE is what grants it.
        cap_sys_nice: bool,
    },
    /// Refused: no CAP_SYS_NICE and RLIMIT_RTPRIO 0 (or unreadable): the
    /// kit's actors run at the normal policy (and the kit warns once).
    Refused {
        /// The soft RLIMIT_RTPRIO, `None` when it could not be read.
        rtprio: Option<u64>,
    },
}

impl Fifo {
    /// The fact from the effective capabilities (`CapEff` of
    /// /proc/self/status, `None` unreadable) and the soft RLIMIT_RTPRIO.
    pub fn from(cap_eff: Option<u64>, rtprio: Option<u64>) -> Fifo {
        if cap_eff.is_some_and(|c| c & (1 << CAP_SYS_NICE) != 0) {
            return Fifo::Granted {
                max: 99,
                cap_sys_nice: true,
            };
        }
        match rtprio {
            Some(l) if l > 0 => Fifo::Granted {
                max: l.min(99) as u8,
                cap_sys_nice: false,
            },
            _ => Fifo::Refused { rtprio },
        }
    }
}

/// `CAP_SYS_NICE` of linux/capability.h.
const CAP_SYS_NICE: u32 = 23;

/// The facts a program logs once at start-up; its [`fmt::Display`] is the
/// one line logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartupFacts {
    /// The kernel's release (`uname -r`), "unknown" when uname fails.
    pub kernel: String,
    /// What `pidfd_open` answered.
    pub pidfd: Pidfd,
    /// True for a static binary (no loader, no shared library): built
    /// with `-C target-feature=+crt-static` (the robot build).
    pub static_binary: bool,
    /// Whether SCHED_FIFO is permitted.
    pub fifo: Fifo,
    /// The locked memory (`VmLck` of /proc/self/status) in KiB: above 0
    /// once `mlockall` was granted; `None` when unreadable.
    pub locked_kib: Option<u64>,
}

impl StartupFacts {
    /// Reads the facts of this process now. Call it after the program's
    /// `mlockall` so the memory fact says whether that was granted.
    pub fn probe() -> StartupFacts {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let (cap_eff, locked_kib) = parse_status(&status);
        StartupFacts {
            kernel: kernel_release(),
            pidfd: Pidfd::from_result(probe_pidfd()),
            static_binary: cfg!(target_feature = "crt-static"),
            fifo: Fifo::from(cap_eff, crate::actor::rtprio_limit()),
            locked_kib,
        }
    }
}

impl fmt::Display for StartupFacts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kernel {}, ", self.kernel)?;
        match self.pidfd {
            Pidfd::Present => write!(f, "pidfd present")?,
            Pidfd::Absent => write!(f, "pidfd absent (ENOSYS: a kernel before 5.3)")?,
            Pidfd::Failed(e) => write!(
                f,
                "pidfd refused ({})",
                std::io::Error::from_raw_os_error(e)
            )?,
        }
        if self.static_binary {
            write!(f, ", static (no loader)")?;
        } else {
            write!(f, ", dynamic (needs the x86_64 loader and glibc)")?;
        }
        match self.fifo {
            Fifo::Granted {
                max,
                cap_sys_nice: true,
            } => write!(f, ", SCHED_FIFO up to {max} (CAP_SYS_NICE)")?,
            Fifo::Granted { max, .. } => write!(f, ", SCHED_FIFO up to {max} (RLIMIT_RTPRIO)")?,
            Fifo::Refused { rtprio } => {
                write!(f, ", SCHED_FIFO refused (no CAP_SYS_NICE, RLIMIT_RTPRIO ")?;
                match rtprio {
                    Some(l) => write!(f, "{l}")?,
                    None => write!(f, "unknown")?,
                }
                write!(f, ": the normal policy)")?;
            }
        }
        match self.locked_kib {
            Some(k) if k > 0 => write!(f, ", memory locked ({k} kB)"),
            Some(_) => write!(f, ", memory not locked"),
            None => write!(f, ", memory lock unknown"),
        }
    }
}

/// `CapEff` (hexadecimal) and `VmLck` (kB) of a /proc/PID/status text;
/// `None` for a line that is missing or does not parse.
pub fn parse_status(text: &str) -> (Option<u64>, Option<u64>) {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    let cap_eff = field("CapEff:").and_then(|v| u64::from_str_radix(v, 16).ok());
    let locked = field("VmLck:")
        .and_then(|v| v.strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok());
    (cap_eff, locked)
}

/// The kernel's release from uname, "unknown" when it fails.
fn kernel_release() -> String {
    // SAFETY: utsname is plain bytes; all zeros is a valid value.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: uname writes only into `u`.
    if unsafe { libc::uname(&mut u) } != 0 {
        return "unknown".to_string();
    }
    // SAFETY: the kernel NUL-terminates `release` within its 65 bytes.
    let release = unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) };
    release.to_string_lossy().into_owned()
}

/// `pidfd_open` on this process: `Ok` (the pidfd closed again) or errno.
fn probe_pidfd() -> Result<(), i32> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL));
    }
    // SAFETY: closes the fd just opened, owned by nothing else.
    unsafe { libc::close(fd as i32) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pidfd_fact_from_the_answer() {
        assert_eq!(Pidfd::from_result(Ok(())), Pidfd::Present);
        assert_eq!(Pidfd::from_result(Err(libc::ENOSYS)), Pidfd::Absent);
        assert_eq!(
            Pidfd::from_result(Err(libc::EPERM)),
            Pidfd::Failed(libc::EPERM)
        );
    }

    #[test]
    fn fifo_fact_from_capabilities_and_rtprio() {
        let nice = 1u64 << CAP_SYS_NICE;
        for (cap, rtprio, want) in [
            (
                Some(nice),
                Some(0),
                Fifo::Granted {
                    max: 99,
                    cap_sys_nice: true,
                },
            ),
            (
                Some(0),
                Some(95),
                Fifo::Granted {
                    max: 95,
                    cap_sys_nice: false,
                },
            ),
            (
                None,
                Some(u64::MAX),
                Fifo::Granted {
                    max: 99,
                    cap_sys_nice: false,
                },
            ),
            (Some(!nice), Some(0), Fifo::Refused { rtprio: Some(0) }),
            (None, None, Fifo::Refused { rtprio: None }),
        ] {
            assert_eq!(Fifo::from(cap, rtprio), want, "{cap:?} {rtprio:?}");
        }
    }

    #[test]
    fn status_lines_parsed_and_bad_ones_are_none() {
        let text = "Name:\tx\nVmLck:\t   12345 kB\nCapEff:\t000001ffffffffff\n";
        assert_eq!(parse_status(text), (Some(0x1ff_ffff_ffff), Some(12345)));
        assert_eq!(parse_status("VmLck:\t0 kB\n"), (None, Some(0)));
        assert_eq!(parse_status("CapEff:\tzz\nVmLck: x kB\n"), (None, None));
        assert_eq!(parse_status(""), (None, None));
    }

    #[test]
    fn the_line_names_each_fact() {
        let robot = StartupFacts {
            kernel: "4.4.86-rt99-aldebaran".into(),
            pidfd: Pidfd::Absent,
            static_binary: true,
            fifo: Fifo::Granted {
                max: 95,
                cap_sys_nice: false,
            },
            locked_kib: Some(8000),
        };
        assert_eq!(
            robot.to_string(),
            "kernel 4.4.86-rt99-aldebaran, pidfd absent (ENOSYS: a kernel before 5.3), \
             static (no loader), SCHED_FIFO up to 95 (RLIMIT_RTPRIO), memory locked (8000 kB)"
        );
        let desk = StartupFacts {
            kernel: "6.1.0".into(),
            pidfd: Pidfd::Present,
            static_binary: false,
            fifo: Fifo::Refused { rtprio: Some(0) },
            locked_kib: Some(0),
        };
        assert_eq!(
            desk.to_string(),
            "kernel 6.1.0, pidfd present, dynamic (needs the x86_64 loader and glibc), \
             SCHED_FIFO refused (no CAP_SYS_NICE, RLIMIT_RTPRIO 0: the normal policy), \
             memory not locked"
        );
    }

    #[test]
    fn probe_reads_this_process() {
        let facts = StartupFacts::probe();
        assert!(!facts.kernel.is_empty() && facts.kernel != "unknown");
        assert!(facts.locked_kib.is_some(), "{facts}");
    }
}
