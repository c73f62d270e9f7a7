//! The safety status: a set of flags rebuilt every cycle from what is
//! observed now, published in the page (`naoctl status` shows it); each
//! change is logged once.

use nao_wire::protocol::cycle::{CycleOutput, ExchangeFailure, Reconnect};
use nao_wire::protocol::safety::Levels;

pub use deathswitch::flags::SafetyFlags;

/// The log line text of each flag (static, for the event ring).
pub(crate) fn text(flag: SafetyFlags) -> &'static str {
    match flag {
        SafetyFlags::CONTROLLER_LOST => "safety: controller lost",
        SafetyFlags::CYCLE_STALL => "safety: cycle stall",
        SafetyFlags::OVER_CURRENT => "safety: battery over-current",
        SafetyFlags::RECONNECTING => "safety: reconnecting",
        SafetyFlags::INVALID_ANSWERS => "safety: invalid answers",
        SafetyFlags::BOARDS_REJECTED => "safety: boards rejected",
        SafetyFlags::UDP_PORT_NOT_OWNED => "safety: UDP port not owned",
        SafetyFlags::GUARD_DEAD => "safety: the guard named in the page is not alive",
        _ => "safety: flags",
    }
}
/// Cycles an invalid answer keeps its flag set (1 s at 12 ms).
pub(crate) const INVALID_ANSWER_HOLD_CYCLES: u64 = 83;

/// Rebuilds the flags from each cycle's output (pure).
#[derive(Debug, Clone, Default)]
pub(crate) struct FlagObserver {
    last_invalid_k: Option<u64>,
    link_down: bool,
    flags: SafetyFlags,
}

impl FlagObserver {
    /// No flags yet.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Takes one cycle's output and the flags observed outside the cycle
    /// (`udp-port-not-owned` from the UDP listener, `guard-dead` from the
    /// runtime's non-real-time side; other bits are ignored); returns the
    /// new flags and the bits that changed.
    pub(crate) fn observe(
        &mut self,
        out: &CycleOutput,
        outside: SafetyFlags,
    ) -> (SafetyFlags, SafetyFlags) {
        if matches!(out.failure, Some(ExchangeFailure::Answer(_))) {
            self.last_invalid_k = Some(out.k);
        }
        match out.reconnect {
            Reconnect::Failed => self.link_down = true,
            Reconnect::Done => self.link_down = false,
            Reconnect::None => {
                if out.failure.is_none() {
                    self.link_down = false;
                }
            }
        }
        let mut f = levels_flags(&out.levels);
        f.set(
            SafetyFlags::RECONNECTING,
            self.link_down || out.failed_exchanges > 0,
        );
        f.set(
            SafetyFlags::INVALID_ANSWERS,
            self.last_invalid_k
                .is_some_and(|k| out.k.saturating_sub(k) < INVALID_ANSWER_HOLD_CYCLES),
        );
        f.set(SafetyFlags::BOARDS_REJECTED, out.rejected_boards != 0);
        f |= outside & (SafetyFlags::UDP_PORT_NOT_OWNED | SafetyFlags::GUARD_DEAD);
        let changed = f ^ self.flags;
        self.flags = f;
        (f, changed)
    }
}

/// The flags of HAL's three levels.
pub(crate) fn levels_flags(l: &Levels) -> SafetyFlags {
    let mut f = SafetyFlags::empty();
    f.set(SafetyFlags::CONTROLLER_LOST, l.controller < 1000);
    f.set(SafetyFlags::CYCLE_STALL, l.stall < 1000);
    f.set(SafetyFlags::OVER_CURRENT, l.overcurrent < 1000);
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use nao_wire::link::{Call, Link, LinkError};
    use nao_wire::protocol::cycle::{Cycle, CycleInput};
    use nao_wire::protocol::frame::FrameError;
    use nao_wire::protocol::gate::Verdict;

    /// A link with no board behind it: every call fails.
    struct NoBoard;

    impl Link for NoBoard {
        fn call(&mut self, _: Call<'_>, _: &mut [u8]) -> Result<usize, LinkError> {
            Err(LinkError::NoDevice)
        }
    }

    /// A real cycle's output (the guard's cycle on a link with no board),
    /// then set to cycle `k`, no failure, no board rejected, full levels.
    fn out(k: u64) -> CycleOutput {
        let limp = CycleInput {
            command: None,
            verdict: &Verdict::LIMP,
        };
        let mut o = Cycle::guard().run(&mut NoBoard, &limp, 0);
        o.k = k;
        o.failure = None;
        o.failed_exchanges = 0;
        o.rejected_boards = 0;
        o.levels = Levels::default();
        o
    }

    #[test]
    fn safety_flags_are_rebuilt_from_what_is_observed_now() {
        let mut obs = FlagObserver::new();
        let mut o = out(0);
        o.levels.controller = 998;
        let (f, changed) = obs.observe(&o, SafetyFlags::empty());
        assert_eq!(f, SafetyFlags::CONTROLLER_LOST);
        assert_eq!(changed, SafetyFlags::CONTROLLER_LOST);
        let (f, changed) = obs.observe(&out(1), SafetyFlags::empty());
        assert!(f.is_empty());
        assert_eq!(
            changed,
            SafetyFlags::CONTROLLER_LOST,
            "the clear is a change too"
        );
        let (_, changed) = obs.observe(&out(2), SafetyFlags::empty());
        assert!(changed.is_empty(), "no change: nothing to log");
    }

    #[test]
    fn invalid_answer_flag_holds_for_one_second() {
        let mut obs = FlagObserver::new();
        let mut o = out(10);
        o.failure = Some(ExchangeFailure::Answer(FrameError::TooShort { len: 0 }));
        o.failed_exchanges = 1;
        assert!(obs
            .observe(&o, SafetyFlags::empty())
            .0
            .contains(SafetyFlags::INVALID_ANSWERS));
        assert!(obs
            .observe(&out(10 + 82), SafetyFlags::empty())
            .0
            .contains(SafetyFlags::INVALID_ANSWERS));
        assert!(!obs
            .observe(&out(10 + 83), SafetyFlags::empty())
            .0
            .contains(SafetyFlags::INVALID_ANSWERS));
    }

    #[test]
    fn boards_rejected_and_udp_not_owned_flags() {
        let mut obs = FlagObserver::new();
        let mut o = out(0);
        o.rejected_boards = 1;
        let (f, _) = obs.observe(&o, SafetyFlags::UDP_PORT_NOT_OWNED);
        assert_eq!(
            f,
            SafetyFlags::BOARDS_REJECTED | SafetyFlags::UDP_PORT_NOT_OWNED
        );
        // Only the outside bits pass from outside.
        let (f, changed) = obs.observe(
            &out(1),
            SafetyFlags::GUARD_DEAD | SafetyFlags::CONTROLLER_LOST,
        );
        assert_eq!(f, SafetyFlags::GUARD_DEAD);
        assert!(changed.contains(SafetyFlags::GUARD_DEAD));
    }
}
