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
}

impl Reason {
    /// Every reason, in code order.
    pub const ALL: [Reason; 13] = [
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
        }
    }

    /// The reason with the `name` of `docs/page.md`, if any.
    pub fn from_name(name: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.name() == name)
    }

    /// The reason stored as `code` in the page (1..=13), if any.
    pub fn from_code(code: u32) -> Option<Reason> {
        (code as usize)
            .checked_sub(1)
            .and_then(|i| Reason::ALL.get(i).copied())
    }

    /// The code stored in the page (1..=13).
    pub fn code(self) -> u32 {
        self as u32
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
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
        assert_eq!(Reason::from_code(14), None);
        assert_eq!(Reason::from_name("Boot"), None);
        assert_eq!(Reason::ChestButton.name(), "chest-button");
        assert_eq!(Reason::GuardNoConfirmation.name(), "guard-no-confirmation");
    }
}
