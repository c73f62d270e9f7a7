//! Properties of the protocol core over arbitrary input: answers from
//! outside never panic the cycle, a frame round-trips through the writer and
//! the parser, and the encodings stay in range.

use proptest::prelude::*;

use crate::protocol::cycle::{Cycle, CycleInput, ExchangeFailure, ReadResult};
use crate::protocol::frame::{Frame, FrameWriter};
use crate::protocol::gate::Verdict;
use crate::protocol::tables::{decode_position, encode_position, stiffness_per_mille};
use crate::protocol::tables::{SYNC_ANSWER, SYNC_FRAME};
use crate::{Command, JOINTS};

proptest! {
    #[test]
    fn arbitrary_answer_bytes_never_panic_and_bad_ones_fail_the_exchange(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        stiffness in any::<f32>(),
        position in any::<f32>(),
    ) {
        let mut c = Cycle::new([2048; JOINTS], &[10]);
        let cmd = Command { stiffness: [stiffness; JOINTS], position: [position; JOINTS], ..Command::default() };
        let input = CycleInput { command: Some(&cmd), verdict: &Verdict::AWAKE };
        c.build(&input, 0);
        c.complete(ReadResult::Skipped, Ok(()));
        c.build(&input, 12_000_000);
        let out = c.complete(ReadResult::Answer(&bytes), Ok(()));
        let valid = Frame::parse_answer(&bytes, 2).is_ok();
        prop_assert_eq!(out.failure.is_none(), valid);
        if !valid {
            prop_assert!(matches!(out.failure, Some(ExchangeFailure::Answer(_))));
        }
        prop_assert!(out.stiffness.iter().all(|&s| s <= 1000));
        prop_assert!(out.position_count.iter().all(|&p| p <= 4095));
    }

    #[test]
    fn valid_answer_with_arbitrary_messages_never_panics(
        msgs in proptest::collection::vec((any::<u8>(), any::<u8>(), proptest::collection::vec(any::<u8>(), 0..20)), 0..20),
    ) {
        let mut buf = [0u8; 512];
        let mut w = FrameWriter::answer(&mut buf, 2).unwrap();
        for (a, cmd, p) in &msgs {
            let _ = w.push(*a, *cmd, p);
        }
        let n = w.finish();
        let mut c = Cycle::new([2048; JOINTS], &[10]);
        c.build(&CycleInput { command: None, verdict: &Verdict::AWAKE }, 0);
        c.complete(ReadResult::Skipped, Ok(()));
        c.build(&CycleInput { command: None, verdict: &Verdict::AWAKE }, 12_000_000);
        let out = c.complete(ReadResult::Answer(&buf[..n]), Ok(()));
        prop_assert!(out.failure.is_none());
    }

    #[test]
    fn frame_round_trips_through_writer_and_parser(
        seq in any::<u16>(),
        frame in any::<bool>(),
        msgs in proptest::collection::vec((any::<u8>(), any::<u8>(), proptest::collection::vec(any::<u8>(), 0..30)), 0..12),
    ) {
        let sync = if frame { SYNC_FRAME } else { SYNC_ANSWER };
        let mut buf = [0u8; 512];
        let mut w = FrameWriter::new(&mut buf, sync, seq).unwrap();
        for (a, c, p) in &msgs {
            w.push(*a, *c, p).unwrap();
        }
        let n = w.finish();
        let f = Frame::parse(&buf[..n], sync).unwrap();
        prop_assert_eq!(f.seq, seq);
        let back: Vec<(u8, u8, Vec<u8>)> = f.messages().map(|m| (m.address, m.command, m.payload.to_vec())).collect();
        prop_assert_eq!(back, msgs);
    }

    #[test]
    fn position_encoding_is_in_range_and_reads_back_within_half_a_count(
        angle in -3.0f32..3.0,
        zero in 1000u16..3000,
    ) {
        let count = encode_position(angle, zero);
        prop_assert!(count <= 4095);
        let back = decode_position(count, zero);
        let half = (std::f64::consts::TAU / 4096.0 / 2.0) as f32 * 1.001;
        if (1..4095).contains(&count) {
            prop_assert!((back - angle).abs() <= half, "{} -> {} -> {}", angle, count, back);
        }
    }

    #[test]
    fn stiffness_per_mille_is_always_0_to_1000(s in any::<f32>()) {
        prop_assert!(stiffness_per_mille(s) <= 1000);
    }
}
