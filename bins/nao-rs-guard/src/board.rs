//! The chest board as the guard uses it: the link step of the start-up, one
//! all-off cycle at a time, and letting go. One small trait, so the poll loop
//! can be tested against a board that records what it was asked.

use nao_wire::LinkError;

/// The guard's view of the chest board.
pub trait Board {
    /// Open the board: the link step of the start-up only (open, set
    /// configuration 1, START, claim interface 0, VERSION), no handshake.
    fn open(&mut self) -> Result<(), LinkError>;
    /// One guard-mode cycle: an all-off frame (stiffness 0 on both buses,
    /// from the very first frame) and its exchange, at `t_ns`.
    fn send_all_off(&mut self, t_ns: u64) -> Result<(), LinkError>;
    /// Let the board go (release the interface, close). Never fails.
    fn close(&mut self);
    /// True between a successful `open` and `close`.
    fn is_open(&self) -> bool;
}

use nao_wire::protocol::cycle::{Cycle, CycleInput, ExchangeFailure};
use nao_wire::protocol::gate::Verdict;
use nao_wire::protocol::startup::{link_up, StartupError};
use nao_wire::Link;

/// The chest board over any [`Link`], driven by the protocol core: the
/// start-up's link step (`link_up`) and the guard-mode cycle
/// (`Cycle::guard()`: stiffness 0 on both buses from the first frame, no
/// handshake). This crate never builds a frame itself.
pub struct WireBoard<L: Link> {
    link: L,
    cycle: Cycle,
    open: bool,
}

impl<L: Link> WireBoard<L> {
    /// A closed board over `link`; the guard-mode cycle is made here, once.
    pub fn new(link: L) -> WireBoard<L> {
        WireBoard {
            link,
            cycle: Cycle::guard(),
            open: false,
        }
    }

    /// The link (tests).
    pub fn link(&self) -> &L {
        &self.link
    }
}

impl<L: Link> Board for WireBoard<L> {
    fn open(&mut self) -> Result<(), LinkError> {
        match link_up(&mut self.link) {
            Ok(_version) => {
                // A fresh link: client state and the first-cycle rules anew.
                self.cycle.link_restarted();
                self.open = true;
                Ok(())
            }
            Err(e) => {
                // Leave nothing half open for the next attempt.
                self.link.close();
                Err(match e {
                    StartupError::Link { error, .. } => error,
                    _ => LinkError::Other,
                })
            }
        }
    }

    fn send_all_off(&mut self, t_ns: u64) -> Result<(), LinkError> {
        let input = CycleInput {
            command: None,
            verdict: &Verdict::LIMP,
        };
        let out = self.cycle.run(&mut self.link, &input, t_ns);
        match out.failure {
            // The frame went out; only the previous answer was missing or bad.
            None | Some(ExchangeFailure::Read(_)) | Some(ExchangeFailure::Answer(_)) => Ok(()),
            Some(ExchangeFailure::Write(f)) => Err(f),
        }
    }

    fn close(&mut self) {
        self.link.close();
        self.open = false;
    }

    fn is_open(&self) -> bool {
        self.open
    }
}
