//! The runtime's safety status bits, published in the page's
//! `safety_flags` word and shown by `naoctl status`.

bitflags::bitflags! {
    /// The safety status bits of the page's `safety_flags` word.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct SafetyFlags: u32 {
        /// HAL's controller-lost ramp is active (no command for 25 cycles).
        const CONTROLLER_LOST = 1 << 0;
        /// HAL's cycle-stall safety is active (more than 100 ms between cycles).
        const CYCLE_STALL = 1 << 1;
        /// HAL's battery over-current reduction is active.
        const OVER_CURRENT = 1 << 2;
        /// The link to the chest board is reconnecting.
        const RECONNECTING = 1 << 3;
        /// Invalid answers from the chest board were seen recently.
        const INVALID_ANSWERS = 1 << 4;
        /// A motor or foot board was rejected by the handshake.
        const BOARDS_REJECTED = 1 << 5;
        /// Neither the runtime nor a guard owns the UDP stop port.
        const UDP_PORT_NOT_OWNED = 1 << 6;
        /// The guard named in the page is not alive (its pid is gone, or
        /// belongs to a process with another start time).
        const GUARD_DEAD = 1 << 7;
    }
}

/// Every flag with its name (as `naoctl` prints it), in bit order.
pub(crate) const NAMES: [(SafetyFlags, &str); 8] = [
    (SafetyFlags::CONTROLLER_LOST, "controller-lost"),
    (SafetyFlags::CYCLE_STALL, "cycle-stall"),
    (SafetyFlags::OVER_CURRENT, "over-current"),
    (SafetyFlags::RECONNECTING, "reconnecting"),
    (SafetyFlags::INVALID_ANSWERS, "invalid-answers"),
    (SafetyFlags::BOARDS_REJECTED, "boards-rejected"),
    (SafetyFlags::UDP_PORT_NOT_OWNED, "udp-port-not-owned"),
    (SafetyFlags::GUARD_DEAD, "guard-dead"),
];

/// The names of the flags set in `bits`, in bit order; unknown bits are
/// named `bit-N`.
pub fn names(bits: u32) -> impl Iterator<Item = std::borrow::Cow<'static, str>> {
    (0..32u32).filter(move |i| bits & (1 << i) != 0).map(|i| {
        NAMES
            .iter()
            .find(|(f, _)| f.bits() == 1 << i)
            .map_or_else(|| format!("bit-{i}").into(), |(_, n)| (*n).into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safety_flag_names_cover_every_bit() {
        assert_eq!(SafetyFlags::all().bits(), 0xff);
        let all: Vec<_> = names(0xff).collect();
        assert_eq!(all.len(), 8);
        assert_eq!(all[0], "controller-lost");
        assert_eq!(all[6], "udp-port-not-owned");
        assert_eq!(all[7], "guard-dead");
        let odd: Vec<_> = names(1 << 1 | 1 << 9).collect();
        assert_eq!(odd, ["cycle-stall", "bit-9"]);
    }
}
