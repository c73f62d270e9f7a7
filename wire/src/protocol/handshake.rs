//! The motor board handshake (`docs/protocol.md` section 8): each joint and foot board is
//! asked CONFIG_REQUEST in cycles 0, 1 and 2 until decided; a board is
//! accepted when its first configuration answer carries an accepted version.

use super::tables::{HANDSHAKE_BOARDS, HANDSHAKE_BOARD_COUNT};

/// The accepted configuration versions by default (HAL 2.8.5).
pub const DEFAULT_ACCEPTED: [u8; 1] = [10];
/// Cycles 0..=LAST_REQUEST_CYCLE ask the undecided boards.
pub(crate) const LAST_REQUEST_CYCLE: u64 = 2;
/// At most this many accepted versions.
pub(crate) const MAX_ACCEPTED: usize = 16;

/// Why an accepted list is refused: the list holds 1 to 16 versions, each
/// 0..=255, none twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcceptedError {
    /// No version at all.
    Empty,
    /// More than 16 versions (the count given).
    TooMany(usize),
    /// A version given twice.
    Repeated(u8),
    /// A field that is not a decimal version 0..=255.
    NotAVersion(String),
}

impl core::fmt::Display for AcceptedError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            AcceptedError::Empty => write!(f, "no version given; give at least one, e.g. 10"),
            AcceptedError::TooMany(n) => write!(
                f,
                "{n} versions given, at most {MAX_ACCEPTED} are allowed; drop {}",
                n - MAX_ACCEPTED
            ),
            AcceptedError::Repeated(v) => {
                write!(f, "version {v} is given twice; give each version once")
            }
            AcceptedError::NotAVersion(s) => {
                write!(f, "{s:?} is not a version (a decimal number 0..255)")
            }
        }
    }
}

impl std::error::Error for AcceptedError {}

/// Checks an accepted list: 1 to 16 versions, none twice.
///
/// # Errors
///
/// [`AcceptedError::Empty`], [`AcceptedError::TooMany`] or
/// [`AcceptedError::Repeated`] (the first version given twice).
pub fn check_accepted(versions: &[u8]) -> Result<(), AcceptedError> {
    if versions.is_empty() {
        return Err(AcceptedError::Empty);
    }
    if versions.len() > MAX_ACCEPTED {
        return Err(AcceptedError::TooMany(versions.len()));
    }
    for (i, v) in versions.iter().enumerate() {
        if versions[..i].contains(v) {
            return Err(AcceptedError::Repeated(*v));
        }
    }
    Ok(())
}

/// Parses and checks an accepted list written `10` or `10,11` (decimal,
/// comma separated), as the recording's `accepted` line and the command
/// lines' `--accepted` give it.
pub(crate) fn parse_accepted(text: &str) -> Result<Vec<u8>, AcceptedError> {
    let mut versions = Vec::new();
    for field in text.split(',') {
        let ok = !field.is_empty() && field.bytes().all(|b| b.is_ascii_digit());
        match field.parse::<u8>() {
            Ok(v) if ok => versions.push(v),
            _ => return Err(AcceptedError::NotAVersion(field.to_string())),
        }
    }
    check_accepted(&versions)?;
    Ok(versions)
}

/// One board's handshake state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BoardState {
    /// No configuration answer yet.
    Pending,
    /// Its configuration version is accepted.
    Accepted {
        /// The version it reported.
        version: u8,
    },
    /// Not accepted: a version not in the list, or no answer in time
    /// (`None`), or guard mode (`None`).
    Rejected {
        /// The version it reported, if any.
        version: Option<u8>,
    },
}

/// The handshake of the 15 boards, in [`HANDSHAKE_BOARDS`] order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Handshake {
    states: [BoardState; HANDSHAKE_BOARD_COUNT],
    accepted: [u8; MAX_ACCEPTED],
    accepted_len: usize,
}

impl Handshake {
    /// Every board pending; `accepted` are the versions to accept. A list
    /// from outside is checked with [`check_accepted`] first (the runtime
    /// refuses to start otherwise); here at most 16 are kept.
    pub(crate) fn new(accepted: &[u8]) -> Self {
        let mut list = [0u8; MAX_ACCEPTED];
        let n = accepted.len().min(MAX_ACCEPTED);
        list[..n].copy_from_slice(&accepted[..n]);
        Handshake {
            states: [BoardState::Pending; HANDSHAKE_BOARD_COUNT],
            accepted: list,
            accepted_len: n,
        }
    }

    /// Guard mode: every board rejected from the start, none asked.
    pub(crate) fn none_accepted() -> Self {
        Handshake {
            states: [BoardState::Rejected { version: None }; HANDSHAKE_BOARD_COUNT],
            accepted: [0; MAX_ACCEPTED],
            accepted_len: 0,
        }
    }

    /// The accepted versions.
    pub(crate) fn accepted_versions(&self) -> &[u8] {
        &self.accepted[..self.accepted_len]
    }

    /// Whether cycle `k`'s frame asks board `i` (index into
    /// [`HANDSHAKE_BOARDS`]).
    pub(crate) fn asks(&self, i: usize, k: u64) -> bool {
        k <= LAST_REQUEST_CYCLE && self.states[i] == BoardState::Pending
    }

    /// A configuration answer handed over from `address` with `version`.
    /// Only the first decides; answers from other addresses are ignored.
    pub(crate) fn on_config(&mut self, address: u8, version: u8) {
        let Some(i) = HANDSHAKE_BOARDS.iter().position(|&a| a == address) else {
            return;
        };
        if self.states[i] != BoardState::Pending {
            return;
        }
        self.states[i] = if self.accepted_versions().contains(&version) {
            BoardState::Accepted { version }
        } else {
            BoardState::Rejected {
                version: Some(version),
            }
        };
    }

    /// End of cycle `k`'s hand-over: from cycle 3 on (after the answer to
    /// cycle 2's frame), every board still pending is rejected.
    pub(crate) fn end_of_cycle(&mut self, k: u64) {
        if k > LAST_REQUEST_CYCLE {
            for s in &mut self.states {
                if *s == BoardState::Pending {
                    *s = BoardState::Rejected { version: None };
                }
            }
        }
    }

    /// Board `i`'s state.
    #[cfg(test)]
    pub(crate) fn state(&self, i: usize) -> BoardState {
        self.states[i]
    }

    /// Whether board `i` is accepted.
    pub(crate) fn is_accepted(&self, i: usize) -> bool {
        matches!(self.states[i], BoardState::Accepted { .. })
    }

    /// Bit i set: board i accepted.
    pub(crate) fn accepted_mask(&self) -> u16 {
        self.mask(|s| matches!(s, BoardState::Accepted { .. }))
    }

    /// Bit i set: board i rejected.
    pub(crate) fn rejected_mask(&self) -> u16 {
        self.mask(|s| matches!(s, BoardState::Rejected { .. }))
    }

    /// Whether every board is decided.
    #[cfg(test)]
    pub(crate) fn done(&self) -> bool {
        !self.states.contains(&BoardState::Pending)
    }

    fn mask(&self, f: impl Fn(&BoardState) -> bool) -> u16 {
        self.states
            .iter()
            .enumerate()
            .filter(|(_, s)| f(s))
            .fold(0, |m, (i, _)| m | 1 << i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshake_asks_in_cycles_0_1_2_until_decided() {
        let mut h = Handshake::new(&DEFAULT_ACCEPTED);
        assert!(h.asks(0, 0) && h.asks(0, 1) && h.asks(0, 2) && !h.asks(0, 3));
        h.on_config(0x10, 10);
        assert!(!h.asks(0, 1));
        assert!(h.asks(1, 1));
    }

    #[test]
    fn handshake_first_configuration_answer_decides() {
        let mut h = Handshake::new(&DEFAULT_ACCEPTED);
        h.on_config(0x11, 11);
        h.on_config(0x11, 10);
        assert_eq!(h.state(1), BoardState::Rejected { version: Some(11) });
        h.on_config(0x12, 10);
        h.on_config(0x12, 11);
        assert_eq!(h.state(2), BoardState::Accepted { version: 10 });
    }

    #[test]
    fn handshake_board_undecided_after_cycle_2_answer_is_rejected() {
        let mut h = Handshake::new(&DEFAULT_ACCEPTED);
        h.end_of_cycle(2);
        assert!(!h.done());
        h.end_of_cycle(3);
        assert!(h.done());
        assert_eq!(h.rejected_mask(), 0x7fff);
        h.on_config(0x10, 10);
        assert_eq!(h.accepted_mask(), 0);
    }

    #[test]
    fn handshake_accepts_only_listed_versions() {
        let mut h = Handshake::new(&[10, 11]);
        h.on_config(0x1d, 11);
        h.on_config(0x1e, 12);
        assert!(h.is_accepted(13));
        assert!(!h.is_accepted(14));
        h.on_config(0x05, 10); // not a handshake board
        assert_eq!(h.accepted_mask(), 1 << 13);
    }

    #[test]
    fn guard_mode_handshake_rejects_every_board_and_asks_none() {
        let h = Handshake::none_accepted();
        assert!((0..15).all(|i| !h.asks(i, 0)));
        assert_eq!(h.accepted_mask(), 0);
    }

    #[test]
    fn accepted_list_of_at_most_16_versions_none_twice() {
        let sixteen: Vec<u8> = (0..16).collect();
        assert_eq!(check_accepted(&sixteen), Ok(()));
        let seventeen: Vec<u8> = (0..17).collect();
        assert_eq!(check_accepted(&seventeen), Err(AcceptedError::TooMany(17)));
        assert_eq!(
            check_accepted(&[10, 11, 10]),
            Err(AcceptedError::Repeated(10))
        );
        assert_eq!(check_accepted(&[]), Err(AcceptedError::Empty));
        assert_eq!(parse_accepted("10,11"), Ok(vec![10, 11]));
        assert_eq!(parse_accepted("255"), Ok(vec![255]));
        for bad in ["256", "", "10,", "-1", "+1", "0x10", "10 ,11"] {
            assert!(
                matches!(parse_accepted(bad), Err(AcceptedError::NotAVersion(_))),
                "{bad:?}"
            );
        }
        assert_eq!(parse_accepted("7,7"), Err(AcceptedError::Repeated(7)));
        let e = parse_accepted("0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16").unwrap_err();
        assert_eq!(
            e.to_string(),
            "17 versions given, at most 16 are allowed; drop 1"
        );
    }
}
