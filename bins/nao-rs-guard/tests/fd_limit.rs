//! At the open-file limit: every descriptor but the guard's reserve is in
//! use (as a busy UDP listener or a low `RLIMIT_NOFILE` would leave it).
//! The reserve still opens the board at a take-over, and a board that
//! needs more than is left is reported as out of descriptors (EMFILE),
//! never as "no device". Its own test process: it lowers its own limit.

use std::os::fd::{FromRawFd, OwnedFd};

mod common;

use common::poller;
use deathswitch::Page;
use nao_rs_guard::board::Board;
use nao_rs_guard::core::GuardState;
use nao_rs_guard::fds::{FdReserve, RESERVE};
use nao_rs_guard::log::{discard_logbook, LinkFault};
use nao_rs_guard::poller::Poller;
use nao_wire::LinkError;

const MS: u64 = 1_000_000;

fn dev_null() -> Option<OwnedFd> {
    // SAFETY: a literal path and flags; a new fd or -1.
    let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    // SAFETY: just returned by open(2), owned by nothing else.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A board whose open needs `need` descriptors at once and, like the
/// virtual robot's link when `connect` fails, calls any failure NoDevice.
struct HungryBoard {
    need: usize,
    /// No device at all (unplugged).
    unplugged: bool,
    held: Vec<OwnedFd>,
    open: bool,
}

impl Board for HungryBoard {
    fn open(&mut self) -> Result<(), LinkError> {
        if self.unplugged {
            return Err(LinkError::NoDevice);
        }
        for _ in 0..self.need {
            match dev_null() {
                Some(fd) => self.held.push(fd),
                None => {
                    self.held.clear();
                    return Err(LinkError::NoDevice);
                }
            }
        }
        self.open = true;
        Ok(())
    }
    fn send_all_off(&mut self, _t_ns: u64) -> Result<(), LinkError> {
        Ok(())
    }
    fn close(&mut self) {
        self.held.clear();
        self.open = false;
    }
    fn is_open(&self) -> bool {
        self.open
    }
}

/// A poller over `board` that has taken over (a stale beat, nobody to
/// kill) and tried to open the board once.
fn take_over(page: &Page, board: HungryBoard) -> Poller<HungryBoard> {
    let book = discard_logbook();
    let mut p = poller(board, &book).with_reserve(FdReserve::take(RESERVE).expect("the reserve"));
    page.rearm();
    let t = deathswitch::monotonic_ns() - 1_000 * MS;
    page.write_heartbeat(1, t, false);
    p.poll(page, t + MS);
    p.poll(page, t + 100 * MS);
    assert!(matches!(p.core().state(), GuardState::Holding { .. }));
    p
}

#[test]
fn at_the_descriptor_limit_the_reserve_opens_the_board_and_emfile_is_named() {
    // A bounded limit, then every free descriptor taken.
    let r = libc::rlimit {
        rlim_cur: 256,
        rlim_max: 256,
    };
    // SAFETY: setrlimit reads one rlimit we own.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) }, 0);
    let dir = tempfile::tempdir().unwrap();
    let page = Page::open(&dir.path().join("deathswitch")).unwrap();
    let board = |need| HungryBoard {
        need,
        unplugged: false,
        held: Vec::new(),
        open: false,
    };
    let mut hog = Vec::new();
    // The reserve is taken inside `take_over`; leave room for it only.
    let fill = |hog: &mut Vec<OwnedFd>| {
        while let Some(fd) = dev_null() {
            hog.push(fd);
        }
        for _ in 0..RESERVE {
            hog.pop();
        }
    };

    // A board that needs as many descriptors as the reserve: opened.
    fill(&mut hog);
    let p = take_over(&page, board(RESERVE));
    assert!(p.board().is_open(), "the reserve opened the board");
    assert_eq!(p.open_failing(), None);
    drop(p);
    hog.clear();

    // One that needs more than is left: out of descriptors, not no device.
    fill(&mut hog);
    let p = take_over(&page, board(RESERVE + 1));
    assert!(!p.board().is_open());
    assert_eq!(p.open_failing(), Some(LinkFault::NoFds));
    drop(p);
    hog.clear();

    // With room: that board opens, and an unplugged one is no device.
    let p = take_over(&page, board(RESERVE + 1));
    assert!(p.board().is_open());
    let unplugged = HungryBoard {
        unplugged: true,
        ..board(1)
    };
    let p = take_over(&page, unplugged);
    assert_eq!(p.open_failing(), Some(LinkFault::NoDevice));
}
