//! The chest button rule: which press trips the death switch (reason
//! `chest-button`).
//!
//! Two modes (`docs/game-day.md`):
//!
//! - [`ChestButtonMode::Trip`] (the default, the seeds' rule): every
//!   answer that shows the button pressed trips the switch, exactly as
//!   nao-rs always did.
//! - [`ChestButtonMode::Hold`] (`hold:MS`, MS from [`HOLD_MS_MIN`] to
//!   [`HOLD_MS_MAX`]): a press trips once it has been held for MS or
//!   longer; a shorter press reaches the program only (LoLA `Touch[0]`, the
//!   API's sensors), as it does in both modes. SPL teams use the short press
//!   to start and penalize a robot.
//!
//! How a press is timed in `hold` mode, by the answers alone (the rule
//! sees nothing else): a press starts at the step time of the first
//! handed-over answer that shows the button pressed (a press already held
//! when the runtime starts counts from its first answer); it ends with the
//! first answer that shows it released. Every answer that shows it pressed
//! at least MS after the start trips (again and again while it is held, as
//! in `trip` mode, so a re-arm does not stick while a person holds the
//! button). A cycle with no chest message (a lost, corrupt or stalled
//! answer, a reconnect) is no news: the press neither ends nor restarts, so
//! a gap can only bring a trip earlier, never later.
//!
//! Pure: time comes in (the step's [`crate::step::StepInput::now_ns`]), no
//! I/O, no allocation.

use core::fmt;

/// The shortest hold time `hold` accepts, ms.
pub const HOLD_MS_MIN: u32 = 300;
/// The longest hold time `hold` accepts, ms: the trip still comes long
/// before the firmware's own power-off after 8 s.
pub const HOLD_MS_MAX: u32 = 3000;

const NS_PER_MS: u64 = 1_000_000;

/// Which chest button press trips the switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChestButtonMode {
    /// Every press trips at once (the default).
    #[default]
    Trip,
    /// A press held for `ms` or longer trips; a shorter one reaches the
    /// program only.
    Hold {
        /// The hold time, ms ([`HOLD_MS_MIN`]..=[`HOLD_MS_MAX`]).
        ms: u32,
    },
}

/// Why a chest button setting was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChestButtonModeError {
    /// Neither `trip` nor `hold:MS`.
    NotAMode,
    /// `hold` without a whole number of ms after it.
    NotANumber,
    /// A hold time outside [`HOLD_MS_MIN`]..=[`HOLD_MS_MAX`].
    OutOfRange {
        /// The hold time given, ms.
        ms: u64,
    },
}

impl fmt::Display for ChestButtonModeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChestButtonModeError::NotAMode => write!(
                f,
                "not a chest button mode; give `trip` or `hold:MS` with MS from {HOLD_MS_MIN} to {HOLD_MS_MAX}"
            ),
            ChestButtonModeError::NotANumber => write!(
                f,
                "the hold time is not a whole number of ms; give `hold:MS` with MS from {HOLD_MS_MIN} to {HOLD_MS_MAX}"
            ),
            ChestButtonModeError::OutOfRange { ms } => write!(
                f,
                "the hold time {ms} ms is outside the allowed range {HOLD_MS_MIN} to {HOLD_MS_MAX} ms"
            ),
        }
    }
}

impl std::error::Error for ChestButtonModeError {}

impl ChestButtonMode {
    /// `hold` with `ms`, if within [`HOLD_MS_MIN`]..=[`HOLD_MS_MAX`].
    ///
    /// # Errors
    ///
    /// [`ChestButtonModeError::OutOfRange`] outside the range.
    pub fn hold(ms: u64) -> Result<ChestButtonMode, ChestButtonModeError> {
        if (u64::from(HOLD_MS_MIN)..=u64::from(HOLD_MS_MAX)).contains(&ms) {
            Ok(ChestButtonMode::Hold { ms: ms as u32 })
        } else {
            Err(ChestButtonModeError::OutOfRange { ms })
        }
    }

    /// Reads `trip`, `hold:MS` or `hold MS` (surrounding white space is
    /// ignored).
    ///
    /// # Errors
    ///
    /// Anything else, or a hold time outside the range.
    pub fn parse(s: &str) -> Result<ChestButtonMode, ChestButtonModeError> {
        let s = s.trim();
        if s == "trip" {
            return Ok(ChestButtonMode::Trip);
        }
        let Some(rest) = s.strip_prefix("hold") else {
            return Err(ChestButtonModeError::NotAMode);
        };
        let Some(ms) = rest
            .strip_prefix(':')
            .or_else(|| rest.strip_prefix(char::is_whitespace))
        else {
            return Err(ChestButtonModeError::NotAMode);
        };
        let ms = ms.trim();
        if ms.is_empty() || !ms.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ChestButtonModeError::NotANumber);
        }
        ChestButtonMode::hold(ms.parse().unwrap_or(u64::MAX))
    }

    /// The hold time in ns (`None` in `trip` mode).
    pub fn hold_ns(&self) -> Option<u64> {
        match self {
            ChestButtonMode::Trip => None,
            ChestButtonMode::Hold { ms } => Some(u64::from(*ms) * NS_PER_MS),
        }
    }
}

/// `trip` or `hold:MS`, as [`ChestButtonMode::parse`] reads it.
impl fmt::Display for ChestButtonMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChestButtonMode::Trip => f.write_str("trip"),
            ChestButtonMode::Hold { ms } => write!(f, "hold:{ms}"),
        }
    }
}

/// The rule's state between two answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChestButton {
    mode: ChestButtonMode,
    /// The step time of the first answer of the press now held.
    held_since_ns: Option<u64>,
}

impl ChestButton {
    /// The rule in `mode`, no press seen yet.
    pub(crate) fn new(mode: ChestButtonMode) -> ChestButton {
        ChestButton {
            mode,
            held_since_ns: None,
        }
    }

    /// One step at `now_ns`: `seen` is what the chest's message in the
    /// answer handed over this step said (`Some(true)` pressed,
    /// `Some(false)` released), `None` when no chest message was handed
    /// over. True: trip the switch with reason `chest-button`.
    pub(crate) fn step(&mut self, seen: Option<bool>, now_ns: u64) -> bool {
        let Some(hold_ns) = self.mode.hold_ns() else {
            return seen == Some(true);
        };
        match seen {
            Some(true) => {
                let since = *self.held_since_ns.get_or_insert(now_ns);
                now_ns.saturating_sub(since) >= hold_ns
            }
            Some(false) => {
                self.held_since_ns = None;
                false
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = NS_PER_MS;
    /// The runtime's period.
    const P: u64 = 12 * MS;

    /// One answer in a table: the step time (ms), what it showed
    /// (`None`: no chest message), whether the switch trips.
    type Row = (u64, Option<bool>, bool);

    fn run(name: &str, mode: ChestButtonMode, rows: &[Row]) {
        let mut b = ChestButton::new(mode);
        for (i, &(t_ms, seen, trips)) in rows.iter().enumerate() {
            assert_eq!(
                b.step(seen, t_ms * MS),
                trips,
                "{name}: row {i} (t {t_ms} ms, seen {seen:?})"
            );
        }
    }

    const HOLD_300: ChestButtonMode = ChestButtonMode::Hold { ms: 300 };
    const PRESSED: Option<bool> = Some(true);
    const RELEASED: Option<bool> = Some(false);
    const GAP: Option<bool> = None;

    #[test]
    fn chest_button_hold_trips_only_a_press_held_for_ms() {
        let tables: &[(&str, ChestButtonMode, &[Row])] = &[
            (
                "trip mode: every answer that shows the press trips, as always",
                ChestButtonMode::Trip,
                &[
                    (0, RELEASED, false),
                    (12, PRESSED, true),
                    (24, PRESSED, true),
                    (36, GAP, false),
                    (48, RELEASED, false),
                    (60, PRESSED, true),
                ],
            ),
            (
                "a press shorter than MS: no trip",
                HOLD_300,
                &[
                    (0, RELEASED, false),
                    (12, PRESSED, false),
                    (24, PRESSED, false),
                    (300, PRESSED, false),
                    (311, PRESSED, false),
                    (312, RELEASED, false),
                    (324, RELEASED, false),
                ],
            ),
            (
                "held exactly MS: trips",
                HOLD_300,
                &[
                    (12, PRESSED, false),
                    (311, PRESSED, false),
                    (312, PRESSED, true),
                ],
            ),
            (
                "held across cycles: trips at MS and on every answer after, until released",
                HOLD_300,
                &[
                    (0, PRESSED, false),
                    (288, PRESSED, false),
                    (300, PRESSED, true),
                    (312, PRESSED, true),
                    (2_000, PRESSED, true),
                    (2_012, RELEASED, false),
                    (2_024, RELEASED, false),
                ],
            ),
            (
                "released and pressed again: the count starts again",
                HOLD_300,
                &[
                    (0, PRESSED, false),
                    (288, PRESSED, false),
                    (300, RELEASED, false),
                    (312, PRESSED, false),
                    (600, PRESSED, false),
                    (612, PRESSED, true),
                ],
            ),
            (
                "a press held at start counts from the first answer that shows it",
                HOLD_300,
                &[
                    (5_000, PRESSED, false),
                    (5_288, PRESSED, false),
                    (5_300, PRESSED, true),
                ],
            ),
            (
                "answer gaps are no release: the count goes on",
                HOLD_300,
                &[
                    (0, PRESSED, false),
                    (12, GAP, false),
                    (24, GAP, false),
                    (288, GAP, false),
                    (300, GAP, false),
                    (312, PRESSED, true),
                ],
            ),
            (
                "a reconnect (11 failed exchanges and more): the press held through it trips on \
                 its first answer",
                HOLD_300,
                &[
                    (0, PRESSED, false),
                    (12, GAP, false),
                    (144, GAP, false),
                    (1_000, PRESSED, true),
                ],
            ),
            (
                "a gap then a released answer ends the press",
                HOLD_300,
                &[
                    (0, PRESSED, false),
                    (12, GAP, false),
                    (24, RELEASED, false),
                    (300, PRESSED, false),
                    (599, PRESSED, false),
                    (600, PRESSED, true),
                ],
            ),
            (
                "the longest hold: 3000 ms",
                ChestButtonMode::Hold { ms: 3000 },
                &[
                    (0, PRESSED, false),
                    (2_999, PRESSED, false),
                    (3_000, PRESSED, true),
                ],
            ),
        ];
        for (name, mode, rows) in tables {
            run(name, *mode, rows);
        }
    }

    #[test]
    fn hold_mode_trips_within_ms_rounded_up_to_periods() {
        // A press held on: the first trip comes at the first step at least
        // MS after the first answer that showed it; the frame after it is
        // all-off (the step hands the trip to the gate).
        for ms in [300u64, 1000, 1200, 3000] {
            let mut b = ChestButton::new(ChestButtonMode::hold(ms).unwrap());
            let t0 = 7 * P;
            let first = (0..)
                .map(|k| t0 + k * P)
                .find(|&t| b.step(PRESSED, t))
                .unwrap();
            assert_eq!(first - t0, ms.div_ceil(12) * P, "hold {ms}");
        }
    }

    #[test]
    fn parse_reads_trip_and_hold_and_names_what_is_wrong() {
        use ChestButtonModeError::*;
        let rows: &[(&str, Result<ChestButtonMode, ChestButtonModeError>)] = &[
            ("trip", Ok(ChestButtonMode::Trip)),
            (" trip\n", Ok(ChestButtonMode::Trip)),
            ("hold:1000", Ok(ChestButtonMode::Hold { ms: 1000 })),
            ("hold 1000", Ok(ChestButtonMode::Hold { ms: 1000 })),
            ("hold:300", Ok(ChestButtonMode::Hold { ms: 300 })),
            ("hold:3000", Ok(ChestButtonMode::Hold { ms: 3000 })),
            ("hold:299", Err(OutOfRange { ms: 299 })),
            ("hold:3001", Err(OutOfRange { ms: 3001 })),
            ("hold:0", Err(OutOfRange { ms: 0 })),
            (
                "hold:99999999999999999999999",
                Err(OutOfRange { ms: u64::MAX }),
            ),
            ("hold:", Err(NotANumber)),
            ("hold:1s", Err(NotANumber)),
            ("hold:-5", Err(NotANumber)),
            ("hold", Err(NotAMode)),
            ("hold1000", Err(NotAMode)),
            ("Trip", Err(NotAMode)),
            ("", Err(NotAMode)),
            ("stop", Err(NotAMode)),
        ];
        for (s, want) in rows {
            assert_eq!(ChestButtonMode::parse(s), *want, "{s:?}");
        }
        for m in [ChestButtonMode::Trip, ChestButtonMode::Hold { ms: 1200 }] {
            assert_eq!(ChestButtonMode::parse(&m.to_string()), Ok(m));
        }
        let e = ChestButtonMode::parse("hold:5000").unwrap_err().to_string();
        assert!(
            e.contains("5000") && e.contains("300") && e.contains("3000"),
            "{e}"
        );
    }
}
