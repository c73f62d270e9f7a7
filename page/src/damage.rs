//! What an integrity check found wrong with the page or its path
//! ([`Damage`]), and the tolerances of the "impossible values" rules.
//!
//! Every kind of damage counts as a lost page: the holder that finds it
//! trips the page it maps `page-lost` and repairs or replaces it
//! (`docs/page.md`, "Impossible values", "Path damage", "Full filesystem").
//! `Damage` is `Copy` and carries numbers only, so finding it allocates
//! nothing; `Display` (for logs and `naoctl`) says what is wrong.

/// How far after the reader's clock a monotonic time in the page
/// (`tripped_at_ns`, `beat_ns`) may be before it counts as impossible.
/// Every writer stamps with `CLOCK_MONOTONIC` (one clock for every process)
/// before its store, and the reader reads its clock after loading the
/// fields, so a genuine value is never later than the reader's clock; the
/// tolerance only absorbs clock-read granularity. It is below the guard's
/// 60 ms beat timeout, so a beat time damaged into the future can blind the
/// guard for at most this long.
pub(crate) const FUTURE_TOLERANCE_NS: u64 = 50_000_000;

/// A time field of the page (for [`Damage::FutureTime`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeField {
    /// `tripped_at_ns` (monotonic).
    TrippedAt,
    /// `beat_ns` (monotonic).
    Beat,
}

impl TimeField {
    /// The field's name in the layout (`docs/page.md`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            TimeField::TrippedAt => "tripped_at_ns",
            TimeField::Beat => "beat_ns",
        }
    }
}

/// What is wrong with a page or its path. Each counts as a lost page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Damage {
    /// The file is shorter than the layout (truncated).
    Short {
        /// The file's length in bytes.
        len: u64,
    },
    /// A magic value is missing (zeroed, overwritten).
    NoMagic,
    /// Both magic values, but another layout version.
    OtherVersion {
        /// The stored version.
        found: u32,
    },
    /// A reason code no nao-rs writes.
    UnknownReason {
        /// The stored code.
        code: u32,
    },
    /// A time later than the reader's clock plus the tolerance
    /// (`FUTURE_TOLERANCE_NS`, 50 ms; monotonic times only: the Unix times are
    /// display only and never judged).
    FutureTime {
        /// Which field.
        field: TimeField,
    },
    /// Armed (`reason` 0) but with a trip's time stored: re-arming clears
    /// the trip times before the reason, and a trip stores them after its
    /// reason, so no sequence of whole operations leaves this (a trip that
    /// raced a re-arm, or damage).
    TripTimeWhileArmed,
    /// The reserved word is not zero, `guard_holding` is neither 0 nor 1,
    /// `motion` is no motion code, or the nonce is 0.
    Garbage,
    /// `trip_count` went down since this holder last read it (it only ever
    /// grows, except when someone re-made the page).
    TripCountWentBack,
    /// `driver_pid` names another process than the runtime this holder
    /// registered (damage, or a second runtime: either way not the page of
    /// this runtime).
    ForeignDriver {
        /// The pid found.
        pid: u32,
    },
    /// `guard_pid` names another process than the guard this holder
    /// registered.
    ForeignGuard {
        /// The pid found.
        pid: u32,
    },
    /// The path was deleted or names another file.
    Replaced,
    /// The path cannot be examined or opened (`stat`/`open` failed with
    /// this errno: a symlink loop, a directory replaced by a file, ...), or
    /// it names something that is not a regular file (errno 0).
    Path {
        /// The errno (0: not a regular file).
        errno: i32,
    },
    /// The file cannot back the page (extending or allocating it failed
    /// with this errno, e.g. `ENOSPC` on a full filesystem): this holder
    /// reads zeroed private memory (tripped `page-lost`) until it can.
    Unbacked {
        /// The errno.
        errno: i32,
    },
}

impl Damage {
    /// A short, stable name (`naoctl status --json`'s `damage`).
    pub fn name(self) -> &'static str {
        match self {
            Damage::Short { .. } => "short",
            Damage::NoMagic => "no-magic",
            Damage::OtherVersion { .. } => "other-version",
            Damage::UnknownReason { .. } => "unknown-reason",
            Damage::FutureTime { .. } => "future-time",
            Damage::TripTimeWhileArmed => "trip-time-while-armed",
            Damage::Garbage => "garbage",
            Damage::TripCountWentBack => "trip-count-went-back",
            Damage::ForeignDriver { .. } => "foreign-driver",
            Damage::ForeignGuard { .. } => "foreign-guard",
            Damage::Replaced => "replaced",
            Damage::Path { .. } => "path",
            Damage::Unbacked { .. } => "unbacked",
        }
    }

    /// Encoded in one word (for [`crate::Page::damage`]'s atomic).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn encode(self) -> u64 {
        let (kind, sub, val): (u64, u64, u64) = match self {
            Damage::Short { len } => (1, 0, len.min(u64::from(u32::MAX))),
            Damage::NoMagic => (2, 0, 0),
            Damage::OtherVersion { found } => (3, 0, found.into()),
            Damage::UnknownReason { code } => (4, 0, code.into()),
            Damage::FutureTime { field } => (5, field as u64, 0),
            Damage::TripTimeWhileArmed => (6, 0, 0),
            Damage::Garbage => (7, 0, 0),
            Damage::TripCountWentBack => (8, 0, 0),
            Damage::ForeignDriver { pid } => (9, 0, pid.into()),
            Damage::ForeignGuard { pid } => (10, 0, pid.into()),
            Damage::Replaced => (11, 0, 0),
            Damage::Path { errno } => (12, 0, u64::from(errno as u32)),
            Damage::Unbacked { errno } => (13, 0, u64::from(errno as u32)),
        };
        kind << 56 | sub << 40 | val
    }

    /// The inverse of [`Damage::encode`] (0: none).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn decode(w: u64) -> Option<Damage> {
        let val = w & 0xffff_ffff;
        let v32 = val as u32;
        Some(match w >> 56 {
            1 => Damage::Short { len: val },
            2 => Damage::NoMagic,
            3 => Damage::OtherVersion { found: v32 },
            4 => Damage::UnknownReason { code: v32 },
            5 => Damage::FutureTime {
                field: match (w >> 40) & 0xff {
                    0 => TimeField::TrippedAt,
                    _ => TimeField::Beat,
                },
            },
            6 => Damage::TripTimeWhileArmed,
            7 => Damage::Garbage,
            8 => Damage::TripCountWentBack,
            9 => Damage::ForeignDriver { pid: v32 },
            10 => Damage::ForeignGuard { pid: v32 },
            11 => Damage::Replaced,
            12 => Damage::Path { errno: v32 as i32 },
            13 => Damage::Unbacked { errno: v32 as i32 },
            _ => return None,
        })
    }
}

/// The text of an errno (`strerror`), e.g. "Too many levels of symbolic links".
pub(crate) fn errno_text(errno: i32) -> String {
    std::io::Error::from_raw_os_error(errno).to_string()
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Damage::Short { len } => write!(
                f,
                "the file is {len} bytes, shorter than the {}-byte page",
                crate::LEN
            ),
            Damage::NoMagic => f.write_str("a magic value is missing (zeroed or overwritten)"),
            Damage::OtherVersion { found } => write!(
                f,
                "the page has layout version {found}, this nao-rs uses version {}",
                crate::VERSION
            ),
            Damage::UnknownReason { code } => write!(f, "unknown reason code {code}"),
            Damage::FutureTime { field } => write!(f, "{} lies in the future", field.name()),
            Damage::TripTimeWhileArmed => f.write_str("armed, but a trip time is stored"),
            Damage::Garbage => f.write_str("a reserved word, guard_holding, motion or the nonce holds a value nao-rs never writes"),
            Damage::TripCountWentBack => f.write_str("trip_count went down (the page was re-made)"),
            Damage::ForeignDriver { pid } => write!(
                f,
                "driver_pid is {pid}, not the runtime that registered (a second runtime, or damage)"
            ),
            Damage::ForeignGuard { pid } => write!(
                f,
                "guard_pid is {pid}, not the guard that registered (a second guard, or damage)"
            ),
            Damage::Replaced => f.write_str("the path was deleted or names another file"),
            Damage::Path { errno: 0 } => {
                f.write_str("the path names something that is not a regular file")
            }
            Damage::Path { errno } => write!(f, "the path cannot be used: {}", errno_text(errno)),
            Damage::Unbacked { errno } => write!(
                f,
                "the file cannot hold the page: {} (reading tripped page-lost until it can)",
                errno_text(errno)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_damage_round_trips_through_its_word() {
        let all = [
            Damage::Short { len: 8 },
            Damage::NoMagic,
            Damage::OtherVersion { found: 7 },
            Damage::UnknownReason { code: 999 },
            Damage::FutureTime {
                field: TimeField::TrippedAt,
            },
            Damage::FutureTime {
                field: TimeField::Beat,
            },
            Damage::TripTimeWhileArmed,
            Damage::Garbage,
            Damage::TripCountWentBack,
            Damage::ForeignDriver { pid: 4242 },
            Damage::ForeignGuard { pid: 7 },
            Damage::Replaced,
            Damage::Path { errno: libc::ELOOP },
            Damage::Path { errno: 0 },
            Damage::Unbacked {
                errno: libc::ENOSPC,
            },
        ];
        for d in all {
            assert_ne!(d.encode(), 0);
            assert_eq!(Damage::decode(d.encode()), Some(d), "{d:?}");
        }
        assert_eq!(Damage::decode(0), None);
    }
}
