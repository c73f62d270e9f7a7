//! The trip reasons and their names (`docs/page.md`, "Fixed points").

/// Why the switch was tripped. The discriminant is the code stored in the
/// page's `reason` word (0 means armed).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// A fresh page: every boot starts tripped.
    Boot = 1,
    /// `naoctl stop`.
    Naoctl,
    /// The UDP stop datagram.
    Udp,
    /// A chest button press.
    ChestButton,
    /// The phone app, through the API.
    App,
    /// A program through the runtime's API.
    Api,
    /// A joint reporting 90 degC or more.
    Heat,
    /// A joint board reporting a fault.
    Fault,
    /// The runtime stopping.
    Shutdown,
    /// The page file truncated, zeroed, overwritten, deleted or replaced.
    PageLost,
    /// Guard rule 2: the heartbeat stopped.
    GuardHeartbeatLost,
    /// Guard rule 3: a trip was not confirmed in time.
    GuardNoConfirmation,
    /// The guard saw the registered runtime's process end (its pidfd),
    /// before any beat timeout.
    GuardRuntimeExited,
    /// The guard: a registered runtime gave no first beat within the
    /// start-up bound, or a runtime it handed the board to gave no beat
    /// within the hand-over bound (`docs/guard.md`).
    GuardStartUpTimeout,
    /// No nao-rs process can read the UDP stop port: the socket could not
    /// be had, or the one handed over failed the check.
    StopPortUnread,
    /// Bring-up: the joint's measured position left the commanded one by
    /// more than the bound for too many cycles.
    BringupFollowingError,
    /// Bring-up: the joint moved against a commanded step (a wrong zero,
    /// sign or joint mapping).
    BringupWrongDirection,
    /// Bring-up: the joint's current stayed above the bound.
    BringupOverCurrent,
    /// Bring-up: the joint was too hot.
    BringupTooHot,
}

impl Reason {
    /// Every reason, in code order.
    pub const ALL: [Reason; 19] = [
        Reason::Boot,
        Reason::Naoctl,
        Reason::Udp,
        Reason::ChestButton,
        Reason::App,
        Reason::Api,
        Reason::Heat,
        Reason::Fault,
        Reason::Shutdown,
        Reason::PageLost,
        Reason::GuardHeartbeatLost,
        Reason::GuardNoConfirmation,
        Reason::GuardRuntimeExited,
        Reason::GuardStartUpTimeout,
        Reason::StopPortUnread,
        Reason::BringupFollowingError,
        Reason::BringupWrongDirection,
        Reason::BringupOverCurrent,
        Reason::BringupTooHot,
    ];

    /// The spec's name, as `naoctl` prints it (`"chest-button"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Reason::Boot => "boot",
            Reason::Naoctl => "naoctl",
            Reason::Udp => "udp",
            Reason::ChestButton => "chest-button",
            Reason::App => "app",
            Reason::Api => "api",
            Reason::Heat => "heat",
            Reason::Fault => "fault",
            Reason::Shutdown => "shutdown",
            Reason::PageLost => "page-lost",
            Reason::GuardHeartbeatLost => "guard-heartbeat-lost",
            Reason::GuardNoConfirmation => "guard-no-confirmation",
            Reason::GuardRuntimeExited => "guard-runtime-exited",
            Reason::GuardStartUpTimeout => "guard-start-up-timeout",
            Reason::StopPortUnread => "stop-port-unread",
            Reason::BringupFollowingError => "bringup-following-error",
            Reason::BringupWrongDirection => "bringup-wrong-direction",
            Reason::BringupOverCurrent => "bringup-over-current",
            Reason::BringupTooHot => "bringup-too-hot",
        }
    }

    /// The reason with the `name` of `docs/page.md`, if any.
    pub fn from_name(name: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.name() == name)
    }

    /// The reason stored as `code` in the page (1..=19), if any.
    pub(crate) fn from_code(code: u32) -> Option<Reason> {
        (code as usize)
            .checked_sub(1)
            .and_then(|i| Reason::ALL.get(i).copied())
    }

    /// The code stored in the page (1..=19).
    pub(crate) fn code(self) -> u32 {
        self as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_names_and_codes_round_trip() {
        for (i, r) in Reason::ALL.into_iter().enumerate() {
            assert_eq!(r.code(), i as u32 + 1);
            assert_eq!(Reason::from_code(r.code()), Some(r));
            assert_eq!(Reason::from_name(r.name()), Some(r));
        }
        assert_eq!(Reason::from_code(0), None);
        assert_eq!(Reason::from_code(20), None);
        assert_eq!(Reason::StopPortUnread.code(), 15);
        assert_eq!(Reason::BringupTooHot.code(), 19);
        assert_eq!(Reason::from_name("Boot"), None);
        assert_eq!(Reason::ChestButton.name(), "chest-button");
        assert_eq!(Reason::GuardNoConfirmation.name(), "guard-no-confirmation");
    }
}
