//! The cycle's rules (`docs/protocol.md` sections 6 to 10) against a fake chest board.

use super::support::{FakeBoard, Kind, Spoil};
use crate::protocol::bringup::BringUpVerdict;
use crate::protocol::cycle::{
    Cycle, CycleInput, CycleOutput, ExchangeFailure, ReadResult, Reconnect,
};
use crate::protocol::frame::{Frame, FrameError};
use crate::protocol::gate::Verdict;
use crate::protocol::startup::{link_up, Startup, StartupError};
use crate::protocol::tables::*;
use crate::{Command, Joint, JOINTS};

const MS: u64 = 1_000_000;

fn started() -> (Box<FakeBoard>, Cycle) {
    let mut board = FakeBoard::new();
    let id = Startup::run(&mut *board).expect("start-up");
    board.clear_log();
    (board, Cycle::from_identity(&id, &[10]))
}

/// [`started`], and its cycle 0 run (no command): the answers read from
/// cycle 1 on are the board's answers to what it is set to from here.
fn after_cycle_0() -> (Box<FakeBoard>, Cycle) {
    let (mut board, mut cycle) = started();
    run(&mut board, &mut cycle, None, false);
    (board, cycle)
}

fn stiff(s: f32) -> Command {
    Command {
        stiffness: [s; JOINTS],
        position: [0.1; JOINTS],
        chest_led: [1, 2, 3],
        ..Command::default()
    }
}

fn run(
    board: &mut FakeBoard,
    cycle: &mut Cycle,
    cmd: Option<&Command>,
    tripped: bool,
) -> CycleOutput {
    let t = cycle.k() * 12 * MS;
    cycle.run(
        board,
        &CycleInput {
            command: cmd,
            verdict: if tripped {
                &Verdict::LIMP
            } else {
                &Verdict::AWAKE
            },
        },
        t,
    )
}

/// `n` cycles (at least one) of `cmd`, the switch armed; the last output.
fn runs(board: &mut FakeBoard, cycle: &mut Cycle, cmd: Option<&Command>, n: usize) -> CycleOutput {
    let mut out = run(board, cycle, cmd, false);
    for _ in 1..n {
        out = run(board, cycle, cmd, false);
    }
    out
}

fn messages(board: &FakeBoard) -> Vec<(u8, u8)> {
    board
        .frame()
        .messages()
        .map(|m| (m.address, m.command))
        .collect()
}

#[test]
fn startup_returns_identity_after_link_prefs_boot_ids_and_two_frames() {
    let mut board = FakeBoard::new();
    let id = Startup::run(&mut *board).unwrap();
    assert_eq!(id.body_id(), "FAKE-BODY1");
    assert_eq!(id.chest_version.to_string(), "2.17.7");
    assert_eq!(id.boot_ids[2], [b'2'; 8]);
    assert_eq!(id.prefs.zero[0], 2048);
    let c = board.calls();
    assert_eq!(
        &c[..5],
        &[
            Kind::Open,
            Kind::SetConfiguration,
            Kind::ControlOut(u8::from(VendorRequest::Start), 0),
            Kind::ClaimInterface,
            Kind::ControlIn(u8::from(VendorRequest::Version))
        ]
    );
    assert_eq!(
        &c[5..10],
        &[Kind::ControlIn(u8::from(VendorRequest::Prefs)); 5]
    );
    assert_eq!(
        &c[10..13],
        &[Kind::ControlIn(u8::from(VendorRequest::BootId)); 3]
    );
    assert_eq!(
        &c[13..],
        &[Kind::BulkOut, Kind::BulkIn, Kind::BulkOut, Kind::BulkIn]
    );
}

#[test]
fn startup_with_a_bad_prefs_crc_ends_with_an_error_and_sends_no_frame() {
    let mut board = FakeBoard::new();
    board.prefs[300] ^= 1;
    match Startup::run(&mut *board) {
        Err(StartupError::Prefs(e)) => assert_eq!(e.field, "crc"),
        other => panic!("{other:?}"),
    }
    assert_eq!(board.frames_written, 0);
}

#[test]
fn link_up_is_step_1_only() {
    let mut board = FakeBoard::new();
    link_up(&mut *board).unwrap();
    assert_eq!(board.calls().len(), 5);
}

#[test]
fn cycle_frame_is_in_hal_order() {
    let (mut board, mut cycle) = after_cycle_0();
    run(&mut board, &mut cycle, None, false);
    let m = messages(&board);
    let mut want: Vec<(u8, u8)> = DEVICES
        .iter()
        .map(|&a| (a, u8::from(BoardCommand::Read)))
        .collect();
    want.extend([
        (0xf0, u8::from(BoardCommand::Positions)),
        (0xf0, u8::from(BoardCommand::Stiffness)),
        (0xf1, u8::from(BoardCommand::Positions)),
        (0xf1, u8::from(BoardCommand::Stiffness)),
    ]);
    want.extend([
        (0x04, u8::from(BoardCommand::ChestLed)),
        (0x1d, u8::from(BoardCommand::FootLed)),
        (0x1e, u8::from(BoardCommand::FootLed)),
        (0x03, u8::from(BoardCommand::SonarMode)),
    ]);
    want.extend(
        HANDSHAKE_BOARDS
            .iter()
            .map(|&a| (a, u8::from(BoardCommand::ConfigRequest))),
    );
    assert_eq!(m, want);
    let f = board.frame();
    let pos = f.messages().nth(21).unwrap();
    assert_eq!(pos.payload.len(), 28, "bus A: 14 slots");
    assert_eq!(
        f.messages().nth(23).unwrap().payload.len(),
        22,
        "bus B: 11 slots"
    );
}

#[test]
fn first_cycle_on_every_link_sends_client_state_and_leaves_out_chest_led() {
    let (mut board, mut cycle) = started();
    let out = run(&mut board, &mut cycle, None, false);
    assert_eq!(out.client_state, Some((CLIENT_CONNECTED, true)));
    assert_eq!(
        board.calls()[0],
        Kind::ControlOut(u8::from(VendorRequest::ClientState), 0x24)
    );
    assert!(!messages(&board).contains(&(0x04, u8::from(BoardCommand::ChestLed))));
    board.clear_log();
    let out = run(&mut board, &mut cycle, None, false);
    assert_eq!(out.client_state, None);
    assert!(!board
        .calls()
        .iter()
        .any(|c| matches!(c, Kind::ControlOut(..))));
    assert!(messages(&board).contains(&(0x04, u8::from(BoardCommand::ChestLed))));
}

#[test]
fn cycle_0_reads_no_answer_before_its_write() {
    let (mut board, mut cycle) = after_cycle_0();
    assert_eq!(
        board.calls(),
        &[
            Kind::ControlOut(u8::from(VendorRequest::ClientState), 0x24),
            Kind::BulkOut
        ]
    );
    board.clear_log();
    run(&mut board, &mut cycle, None, false);
    assert_eq!(board.calls(), &[Kind::BulkIn, Kind::BulkOut]);
}

#[test]
fn answer_is_read_only_when_the_previous_write_succeeded() {
    let (mut board, mut cycle) = after_cycle_0();
    board.fail_writes = 1;
    let out = run(&mut board, &mut cycle, None, false);
    assert!(matches!(out.failure, Some(ExchangeFailure::Write(_))));
    assert!(!out.frame_written);
    board.clear_log();
    let out = run(&mut board, &mut cycle, None, false);
    assert_eq!(board.calls(), &[Kind::BulkOut]);
    assert_eq!(out.failure, None);
    assert_eq!(out.failed_exchanges, 0);
}

#[test]
fn seq_of_cycle_k_is_k_plus_2_and_never_reset() {
    let (mut board, mut cycle) = started();
    for k in 0..70_000u64 {
        let out = run(&mut board, &mut cycle, None, false);
        assert_eq!(out.seq, ((k + 2) % 65536) as u16);
        if k == 20 {
            // a reconnect does not reset seq
            board.fail_reads = 11;
        }
    }
    assert_eq!(board.frame().seq, ((70_000u64 - 1 + 2) % 65536) as u16);
}

#[test]
fn answer_with_bad_sync_crc_or_seq_is_a_failed_exchange() {
    for (spoil, want) in [
        (Spoil::Sync, "sync"),
        (Spoil::Crc, "crc"),
        (Spoil::Seq, "seq"),
    ] {
        let (mut board, mut cycle) = after_cycle_0();
        board.spoil = spoil;
        run(&mut board, &mut cycle, None, false); // its answer is spoilt
        let out = run(&mut board, &mut cycle, None, false);
        let got = match out.failure {
            Some(ExchangeFailure::Answer(FrameError::BadSync { .. })) => "sync",
            Some(ExchangeFailure::Answer(FrameError::BadCrc { .. })) => "crc",
            Some(ExchangeFailure::Answer(FrameError::BadSeq { .. })) => "seq",
            other => panic!("{other:?}"),
        };
        assert_eq!(got, want);
        assert_eq!(out.failed_exchanges, 1);
    }
}

#[test]
fn reconnect_after_the_11th_failed_exchange_in_a_row() {
    let (mut board, mut cycle) = after_cycle_0();
    board.fail_reads = 11;
    for i in 1..=10 {
        let out = run(&mut board, &mut cycle, None, false);
        assert_eq!(out.failed_exchanges, i);
        assert_eq!(out.reconnect, Reconnect::None);
    }
    board.clear_log();
    let out = run(&mut board, &mut cycle, None, false);
    assert_eq!(out.failed_exchanges, 11);
    assert!(out.reconnect_needed);
    assert_eq!(out.reconnect, Reconnect::Done);
    assert_eq!(
        board.calls(),
        &[
            Kind::BulkIn,
            Kind::BulkOut,
            Kind::Close,
            Kind::Open,
            Kind::SetConfiguration,
            Kind::ControlOut(u8::from(VendorRequest::Start), 0),
            Kind::ClaimInterface,
            Kind::ControlIn(u8::from(VendorRequest::Version))
        ]
    );
    // The next cycle is the first on the new link: client state, no read.
    board.clear_log();
    let out = run(&mut board, &mut cycle, None, false);
    assert_eq!(
        board.calls(),
        &[
            Kind::ControlOut(u8::from(VendorRequest::ClientState), 0x24),
            Kind::BulkOut
        ]
    );
    assert_eq!(out.failed_exchanges, 0);
}

#[test]
fn ten_failed_exchanges_then_a_good_one_reset_the_count() {
    let (mut board, mut cycle) = after_cycle_0();
    board.fail_reads = 10;
    let out = runs(&mut board, &mut cycle, None, 11);
    assert_eq!((out.failed_exchanges, out.reconnect), (0, Reconnect::None));
}

#[test]
fn handshake_accepts_version_10_boards_and_stiffness_reaches_the_wire() {
    let (mut board, mut cycle) = started();
    let c = stiff(0.5);
    let out0 = run(&mut board, &mut cycle, Some(&c), false);
    assert!(
        out0.all_off,
        "no board accepted before the answer to cycle 0"
    );
    run(&mut board, &mut cycle, Some(&c), false);
    let out = run(&mut board, &mut cycle, Some(&c), false);
    assert_eq!(out.accepted_boards, 0x7fff);
    assert_eq!(out.stiffness, [500; JOINTS]);
    assert_eq!(out.position_count[0], encode_position(0.1, 2048));
    // cycle 2 asks no board: all decided by the answer to cycle 0
    assert!(!messages(&board)
        .iter()
        .any(|&(_, c)| c == u8::from(BoardCommand::ConfigRequest)));
}

#[test]
fn handshake_rejects_other_versions_and_their_joints_stay_limp_at_measured_position() {
    let (mut board, mut cycle) = started();
    board.config_version[3] = 11; // the LWrist board: LWristYaw and LHand
    let c = stiff(1.0);
    runs(&mut board, &mut cycle, Some(&c), 3);
    let out = run(&mut board, &mut cycle, Some(&c), false);
    assert_eq!(out.rejected_boards, 1 << 3);
    assert_eq!(out.stiffness[Joint::LWristYaw], 0);
    assert_eq!(out.stiffness[Joint::LHand], 0);
    assert_eq!(
        out.position_count[Joint::LWristYaw],
        2100,
        "held at its measured count"
    );
    assert_eq!(out.stiffness[5], 1000);
}

#[test]
fn handshake_board_silent_until_after_cycle_2_is_rejected() {
    let (mut board, mut cycle) = started();
    board.config_silent = 1 << 14; // right foot board
    let mut asked = 0;
    for _ in 0..5 {
        run(&mut board, &mut cycle, None, false);
        asked += messages(&board).contains(&(0x1e, u8::from(BoardCommand::ConfigRequest))) as u32;
    }
    assert_eq!(asked, 3, "asked in cycles 0, 1 and 2");
    assert_eq!(cycle.handshake().rejected_mask(), 1 << 14);
}

#[test]
fn chest_button_in_an_answer_is_reported_as_a_trip() {
    let (mut board, mut cycle) = started();
    let c = stiff(1.0);
    runs(&mut board, &mut cycle, Some(&c), 5);
    board.chest_button = true;
    let out = run(&mut board, &mut cycle, Some(&c), false); // answer pressed
    assert_eq!(out.trips.reason(), None);
    board.chest_button = false;
    let out = run(&mut board, &mut cycle, Some(&c), false); // hands it over
    assert_eq!(out.trips.reason(), Some(deathswitch::Reason::ChestButton));
}

#[test]
fn joint_at_90_degrees_trips_heat_and_status_bit_0_trips_fault() {
    let (mut board, mut cycle) = after_cycle_0();
    board.temperature[Joint::LKneePitch] = 90;
    let out = runs(&mut board, &mut cycle, None, 2);
    assert_eq!(out.trips.heat, Some(Joint::LKneePitch));
    board.temperature[Joint::LKneePitch] = 40;
    board.status[Joint::LShoulderPitch] = 1;
    let out = runs(&mut board, &mut cycle, None, 2);
    assert_eq!(
        (out.trips.heat, out.trips.fault),
        (None, Some(Joint::LShoulderPitch))
    );
}

#[test]
fn tripped_or_page_lost_frame_is_all_off_but_leds_and_sonar_are_sent() {
    let (mut board, mut cycle) = started();
    let mut c = stiff(1.0);
    c.sonar_mode = 0x0c;
    c.left_foot_led = [9, 9, 9];
    runs(&mut board, &mut cycle, Some(&c), 4);
    let out = run(&mut board, &mut cycle, Some(&c), true);
    assert!(out.all_off);
    let f = board.frame();
    let led = f
        .messages()
        .find(|m| m.address == 0x1d && m.command == u8::from(BoardCommand::FootLed))
        .unwrap();
    assert_eq!(led.payload, &[9, 9, 9]);
    let sonar = f
        .messages()
        .find(|m| m.command == u8::from(BoardCommand::SonarMode))
        .unwrap();
    assert_eq!(sonar.payload, &[0x0c]);
    let out = cycle.run(
        &mut *board,
        &CycleInput {
            command: Some(&c),
            verdict: &Verdict::LIMP,
        },
        100 * 12 * MS,
    );
    assert!(out.all_off);
}

#[test]
fn guard_mode_sends_stiffness_0_from_the_first_frame_and_no_config_request() {
    let mut board = FakeBoard::new();
    link_up(&mut *board).unwrap();
    let mut cycle = Cycle::guard();
    let c = stiff(1.0);
    for _ in 0..5 {
        let out = run(&mut board, &mut cycle, Some(&c), false);
        assert!(out.all_off);
        assert!(!messages(&board)
            .iter()
            .any(|&(_, c)| c == u8::from(BoardCommand::ConfigRequest)));
    }
    assert_eq!(cycle.handshake().accepted_mask(), 0);
}

#[test]
fn split_steps_make_the_same_frames_as_run() {
    let (mut board, mut a) = started();
    let (_, mut b) = started();
    let c = stiff(0.7);
    let mut answer = [0u8; 512];
    let mut answer_len = None::<usize>;
    for k in 0..30u64 {
        let input = CycleInput {
            command: Some(&c),
            verdict: &Verdict::AWAKE,
        };
        run(&mut board, &mut a, Some(&c), false);
        let frame_a = board.frame();
        let bytes = b.build(&input, k * 12 * MS).to_vec();
        assert_eq!(
            Frame::parse(&bytes, SYNC_FRAME).unwrap(),
            frame_a,
            "cycle {k}"
        );
        if b.client_state_request().is_some() {
            b.client_state_result(true);
        }
        let read = match answer_len {
            Some(n) if b.reads_previous() => ReadResult::Answer(&answer[..n]),
            _ => ReadResult::Skipped,
        };
        let out = b.complete(read, Ok(()));
        assert_eq!(out.failure, None);
        // the fake board's answer to this frame, for the next cycle
        let mut probe = FakeBoard::new();
        probe.last_frame[..bytes.len()].copy_from_slice(&bytes);
        use crate::Link;
        probe.bulk_out(EP_OUT, &bytes).unwrap();
        let n = probe.bulk_in(EP_IN, &mut answer).unwrap();
        answer_len = Some(n);
    }
}

#[test]
fn position_slot_is_the_zero_count_until_a_joint_is_measured() {
    let (mut board, mut cycle) = started(); // zero 2048, the board reports 2100
    let out = run(&mut board, &mut cycle, None, false);
    assert_eq!(out.position_count, [2048; JOINTS]);
}

#[test]
fn frame_is_built_from_answers_up_to_the_one_read_in_the_cycle_before() {
    let (mut board, mut cycle) = started();
    run(&mut board, &mut cycle, None, false); // cycle 0: nothing measured
    let out = run(&mut board, &mut cycle, None, false); // reads cycle 0's answer after building
    assert_eq!(out.position_count, [2048; JOINTS]);
    assert_eq!(out.sensors.position_count, [2100; JOINTS]);
    board.count = [2200; JOINTS];
    let out = run(&mut board, &mut cycle, None, false);
    assert_eq!(out.position_count, [2100; JOINTS]);
}

#[test]
fn battery_overcurrent_in_answers_scales_stiffness_down() {
    let (mut board, mut cycle) = started();
    let c = stiff(1.0);
    board.battery_ma = 5200;
    let last = runs(&mut board, &mut cycle, Some(&c), 30)
        .levels
        .overcurrent;
    assert!((240..1000).contains(&last), "{last}");
    let out = run(&mut board, &mut cycle, Some(&c), false);
    assert_eq!(
        out.stiffness[0] as u32,
        1000 * out.levels.overcurrent as u32 / 1000
    );
}

#[test]
fn rearm_never_resumes_a_command_held_from_before_the_trip() {
    // Seed: "Re-arming never resumes motion". A controller that sent a stiff
    // command and then went silent through a trip must not get it back on
    // re-arm: the trip makes the held command limp (a deviation from HAL).
    let (mut board, mut cycle) = started();
    let c = stiff(0.5);
    runs(&mut board, &mut cycle, Some(&c), 4);
    let out = run(&mut board, &mut cycle, None, false);
    assert_eq!(out.stiffness[0], 500, "held command before the trip");
    let out = run(&mut board, &mut cycle, None, true);
    assert!(out.all_off);
    let out = run(&mut board, &mut cycle, None, false);
    assert!(out.all_off, "re-armed, controller silent: stays limp");
    assert_eq!(out.stiffness, [0; JOINTS]);
    // A new command after the re-arm is obeyed again.
    let out = run(&mut board, &mut cycle, Some(&c), false);
    assert_eq!(out.stiffness[0], 500);
}

#[test]
fn never_writes_board_stored_data_not_even_hals_10_s_temperature_log() {
    // Safety principle 1: nao-rs writes no data stored on the boards. HAL
    // writes a motor temperature log into the EEPROMs every 10 s; over 15 s
    // of cycles no frame carries EEPROM_WRITE.
    let (mut board, mut cycle) = started();
    let c = stiff(0.5);
    for _ in 0..1250 {
        run(&mut board, &mut cycle, Some(&c), false);
        assert!(
            !messages(&board)
                .iter()
                .any(|&(_, cmd)| cmd == u8::from(BoardCommand::EepromWrite)),
            "EEPROM_WRITE in cycle {}",
            cycle.k()
        );
    }
}

#[test]
fn controller_lost_counts_a_controller_command_or_bring_ups_verdict_as_new() {
    let bringup = BringUpVerdict {
        joint: Joint::LShoulderPitch,
        stiffness: 0.2,
        target: 0.4,
        window: None,
        missing: None,
        trip: None,
    };
    let in_bringup = Verdict {
        bringup: Some(bringup),
        ..Verdict::AWAKE
    };
    let limp_bringup = Verdict {
        bringup: Some(BringUpVerdict {
            stiffness: 0.0,
            ..bringup
        }),
        ..Verdict::LIMP
    };
    let c = stiff(0.5);
    // (command, verdict, a new command for the controller-lost ramp)
    let table: [(Option<&Command>, &Verdict, bool); 6] = [
        (Some(&c), &Verdict::AWAKE, true),
        (None, &Verdict::AWAKE, false),
        (None, &Verdict::LIMP, false),
        // In bring-up the gate commands the joint every cycle, whatever
        // the verdict allows; a controller's command is ignored there.
        (None, &in_bringup, true),
        (None, &limp_bringup, true),
        (Some(&c), &in_bringup, true),
    ];
    for (command, verdict, new) in table {
        let input = CycleInput { command, verdict };
        assert_eq!(input.new_command(), new, "{command:?} {verdict:?}");
    }
}
