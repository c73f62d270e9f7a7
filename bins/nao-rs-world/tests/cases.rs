//! The safety rules that are orderings in time, judged in the world
//! (`docs/world.md`, "World cases"): each was a process-level test that
//! judged real 12 ms frames on a host that stalls; here the same code (the
//! runtime's step, the guard's core, the page) runs in virtual time, every
//! invariant is checked after every event, and the case asserts its rule
//! on the frames the chest board received. Deterministic: no timing of the
//! machine that runs it.

use deathswitch::rules::{HAND_OVER_BOUND_NS, START_UP_BOUND_NS};
use deathswitch::Reason;
use nao_rs_world::schedule::{Action, Schedule, WakeVia, MS};
use nao_rs_world::world::{
    run_schedule, FrameNote, Outcome, FRAME_NS, GUARD_PID, POLL_NS, REGISTER_NS,
};

fn schedule(run_ms: u64, actions: &[(u64, Action)]) -> Schedule {
    Schedule::by_hand(run_ms, actions)
}

/// `nao-rs wake`: reads the generation now, arrives within 1 ms.
fn wake() -> Action {
    Action::Wake {
        via: WakeVia::Local,
        delay_ns: MS,
        lost: false,
    }
}

/// Runs `s` with its story; no invariant broken.
fn run(s: Schedule) -> Outcome {
    let out = run_schedule(s, None, true);
    assert!(
        out.violation.is_none(),
        "{:?}\n{}",
        out.violation,
        out.story.join("\n")
    );
    out
}

/// The frames received in `[from_ms, to_ms)`.
fn between(out: &Outcome, from_ns: u64, to_ns: u64) -> Vec<FrameNote> {
    out.frames
        .iter()
        .filter(|f| f.at_ns >= from_ns && f.at_ns < to_ns)
        .copied()
        .collect()
}

/// Trip re-armed within one cycle (`naoctl stop; naoctl rearm`, 1 ms
/// apart, 20 times): an all-off frame each time, limp until the next
/// `nao-rs wake` (100 ms later), stiff again after it.
#[test]
fn trip_re_armed_within_one_cycle() {
    let mut actions = vec![(200, wake())];
    let rounds: Vec<u64> = (0..20).map(|k| 400 + k * 300).collect();
    for &t in &rounds {
        actions.push((t, Action::NaoctlStop));
        actions.push((t + 1, Action::Rearm));
        actions.push((t + 100, wake()));
    }
    let out = run(schedule(400 + 20 * 300, &actions));
    for (k, &t) in rounds.iter().enumerate() {
        let limp = between(&out, t * MS, (t + 100) * MS);
        assert!(
            limp.iter().any(|f| !f.stiff),
            "round {k}: no all-off frame between the stop and the wake: {limp:?}"
        );
        assert!(
            limp.iter().all(|f| !f.stiff),
            "round {k}: stiff before the wake: {limp:?}\n{}",
            out.story.join("\n")
        );
        let woken = between(&out, (t + 100) * MS, (t + 300) * MS);
        assert!(
            woken.iter().any(|f| f.stiff),
            "round {k}: not stiff again after the wake: {woken:?}"
        );
    }
}

/// A wake while tripped is used up: a wake read before a trip reaches the
/// runtime while tripped; re-armed, the robot stays limp until the next
/// wake.
#[test]
fn a_wake_while_tripped_is_used_up() {
    let in_flight = Action::Wake {
        via: WakeVia::Network,
        delay_ns: 60 * MS,
        lost: false,
    };
    let out = run(schedule(
        1200,
        &[
            (200, wake()),
            (400, in_flight),
            (410, Action::NaoctlStop),
            (600, Action::Rearm),
            (1000, wake()),
        ],
    ));
    assert!(
        out.story
            .iter()
            .any(|l| l.contains("a wake (read at 0.400 s)")),
        "the wake read before the trip reached the runtime:\n{}",
        out.story.join("\n")
    );
    let limp = between(&out, 411 * MS, 1000 * MS);
    assert!(
        !limp.is_empty() && limp.iter().all(|f| !f.stiff),
        "{limp:?}"
    );
    assert!(between(&out, 1000 * MS, 1200 * MS).iter().any(|f| f.stiff));
}

/// A registered runtime that hangs before its first beat: no frame from
/// anyone until the start-up bound (6 s) has passed since it registered,
/// then the guard trips `guard-start-up-timeout`, kills it and sends
/// all-off frames; the exited runtime's pid is cleared. The same after
/// `naoctl stop` (the first reason stays).
#[test]
fn a_runtime_hung_before_its_first_beat_is_killed_after_the_start_up_bound() {
    for naoctl_stop in [false, true] {
        let mut actions = vec![(50, Action::Hang)];
        if naoctl_stop {
            actions.push((100, Action::NaoctlStop));
        }
        // Registered at 1 ms + REGISTER_NS; ends before systemd's restart
        // (1 s after the kill).
        let registered = MS + REGISTER_NS;
        let out = run(schedule(
            (registered + START_UP_BOUND_NS) / MS + 600,
            &actions,
        ));
        let first = out.frames.first().expect("the guard's frames");
        assert_eq!(first.pid, GUARD_PID, "the board was silent before");
        assert!(
            first.at_ns > registered + START_UP_BOUND_NS
                && first.at_ns <= registered + START_UP_BOUND_NS + 2 * POLL_NS + FRAME_NS,
            "first all-off frame at {:.3} s (bound {:.3} s)\n{}",
            first.at_ns as f64 / 1e9,
            (registered + START_UP_BOUND_NS) as f64 / 1e9,
            out.story.join("\n")
        );
        assert!(out.frames.iter().all(|f| f.pid == GUARD_PID && !f.stiff));
        let want = if naoctl_stop {
            Reason::Naoctl
        } else {
            Reason::GuardStartUpTimeout
        };
        assert_eq!(out.page.reason, Some(want));
        assert!(out.page.guard_holding);
        assert_eq!(
            out.page.driver_pid, None,
            "the exited runtime's pid cleared"
        );
        assert!(
            out.story
                .iter()
                .any(|l| l.contains("takes over (guard-start-up-timeout)")),
            "{}",
            out.story.join("\n")
        );
    }
}

/// A restarted runtime that the guard handed the board hangs holding it
/// before its first beat: the board goes without frames for at most the
/// hand-over bound (1 s), then the guard kills it and sends all-off frames
/// again.
#[test]
fn a_runtime_handed_the_board_that_freezes_is_taken_back_within_the_hand_over_bound() {
    // Crashes at 400 ms; systemd restarts it at 1.4 s; it registers, the
    // guard hands the board over at its next poll, and the new runtime
    // hangs before its first cycle (its start-up takes 120 ms).
    let out = run(schedule(
        3500,
        &[(200, wake()), (400, Action::Crash), (1450, Action::Hang)],
    ));
    let handed = out
        .story
        .iter()
        .find(|l| l.contains("hands the board over"))
        .unwrap_or_else(|| panic!("no hand-over:\n{}", out.story.join("\n")));
    let handed_ns = (handed
        .split_whitespace()
        .next()
        .unwrap()
        .parse::<f64>()
        .unwrap()
        * 1e9)
        .round() as u64;
    assert!(
        handed_ns < 1450 * MS,
        "handed over before the hang:\n{}",
        out.story.join("\n")
    );
    let after: Vec<FrameNote> = between(&out, handed_ns, u64::MAX);
    let resumed = after.first().expect("the guard's frames again");
    assert_eq!(resumed.pid, GUARD_PID, "the frozen runtime never beat");
    assert!(
        resumed.at_ns - handed_ns <= HAND_OVER_BOUND_NS + 2 * POLL_NS + FRAME_NS,
        "the board went {:.3} s without frames after the hand-over",
        (resumed.at_ns - handed_ns) as f64 / 1e9
    );
    assert!(after.iter().all(|f| f.pid == GUARD_PID && !f.stiff));
    assert!(
        out.story
            .iter()
            .filter(|l| l.contains("the guard sends SIGKILL"))
            .count()
            >= 1,
        "the frozen runtime was killed:\n{}",
        out.story.join("\n")
    );
}

/// A guard stalled across a restart (the explorer's finding 1, seed
/// 59704 with `--guard-stall-max-ms 1500`): the runtime crashes while the
/// guard is stalled, systemd's restart registers and takes the free board
/// before the guard looks. The guard takes over (the switch trips), finds
/// the board busy and hands it to the successor; after a re-arm and a
/// wake, the successor's hang is taken over (SIGKILL through its pidfd,
/// the guard's all-off frames).
/// Before, the guard held nothing, a re-arm cleared the running runtime's
/// registration, and its hang went without a take-over (I3).
#[test]
fn a_guard_stalled_across_a_restart_hands_the_board_to_the_successor() {
    let out = run(schedule(
        5200,
        &[
            (200, wake()),
            (974, Action::GuardStall { len_ns: 1070 * MS }),
            (1002, Action::Crash),
            (2774, Action::Rearm),
            (2900, wake()),
            (4532, Action::Hang),
        ],
    ));
    let story = out.story.join("\n");
    assert!(
        story.contains("the board is busy: the guard hands it over to the runtime 1001"),
        "{story}"
    );
    assert!(
        between(&out, 2900 * MS, 4532 * MS).iter().any(|f| f.stiff),
        "the successor moves after the re-arm and the wake:\n{story}"
    );
    assert!(
        story.contains("the guard sends SIGKILL to pid 1001"),
        "{story}"
    );
    let after = between(&out, 4532 * MS, u64::MAX);
    assert!(
        after.iter().any(|f| f.pid == GUARD_PID),
        "the hang taken over:\n{story}"
    );
    assert_eq!(out.page.reason, Some(Reason::GuardHeartbeatLost));
}
