//! Bad input on the protocol engineer's answer decoder, the devices' answer
//! handling and the preference parser: arbitrary and mutated bytes never
//! panic; an answer or a preference block with one byte changed is always
//! rejected (a failed exchange / a start-up error, `docs/protocol.md` sections 5, 7 and 2).
//! Case count: PROPTEST_CASES (CI: 100,000).

use crate::protocol::devices::{hand_answer, Sensors};
use crate::protocol::frame::{Frame, FrameWriter, MAX_FRAME_LEN};
use crate::protocol::handshake::Handshake;
use crate::protocol::prefs::{crc32, Prefs};
use crate::JOINTS;
use proptest::prelude::*;

const PREFS_LEN: usize = 4635;
const CRC_AT: usize = 4631;

/// A valid preference block with the given content bytes after the header.
fn prefs_block(content: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; PREFS_LEN];
    let n = content.len().min(CRC_AT - 6);
    b[6..6 + n].copy_from_slice(&content[..n]);
    b[0..4].copy_from_slice(b"NPRF");
    b[4..6].copy_from_slice(&1u16.to_le_bytes());
    let crc = crc32(&b[..CRC_AT]);
    b[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
    b
}

fn message() -> impl Strategy<Value = (u8, u8, Vec<u8>)> {
    (
        prop_oneof![
            prop::sample::select(vec![
                0x01u8, 0x02, 0x03, 0x04, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18,
                0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x20, 0x21, 0x40, 0x41, 0xf0, 0xf1
            ]),
            any::<u8>(),
        ],
        prop_oneof![
            prop::sample::select(vec![0x81u8, 0x82, 0x83, 0xa0]),
            any::<u8>()
        ],
        prop::collection::vec(any::<u8>(), 0..48),
    )
}

/// An answer with valid sync, seq and CRC around arbitrary messages.
fn answer(seq: u16, messages: &[(u8, u8, Vec<u8>)]) -> Vec<u8> {
    let mut buf = vec![0u8; MAX_FRAME_LEN];
    let mut w = FrameWriter::answer(&mut buf, seq).expect("a 512-byte buffer holds an answer");
    for (address, command, payload) in messages {
        if w.push(*address, *command, payload).is_err() {
            break;
        }
    }
    let n = w.finish();
    buf.truncate(n);
    buf
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn fuzz_answer_decoder_arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600), seq in any::<u16>()) {
        if let Ok(f) = Frame::parse_answer(&bytes, seq) {
            prop_assert_eq!(f.seq, seq);
            prop_assert_eq!(bytes[0], 0x5a);
            let total: usize = f.messages().map(|m| 3 + m.payload.len()).sum();
            prop_assert_eq!(total + 6, bytes.len());
            prop_assert_eq!(f.messages().count(), usize::from(f.count));
            let zero = [2048u16; JOINTS];
            let _ = hand_answer(&f, &zero, &mut Sensors::new(&zero), &mut Handshake::new(&[10]));
        }
    }

    #[test]
    fn fuzz_answer_with_valid_crc_is_handed_to_the_devices_without_panic(
        messages in prop::collection::vec(message(), 0..24),
        seq in any::<u16>(),
    ) {
        let bytes = answer(seq, &messages);
        let f = Frame::parse_answer(&bytes, seq).map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        let zero = [2048u16; JOINTS];
        let mut sensors = Sensors::new(&zero);
        let mut handshake = Handshake::new(&[10]);
        let _ = hand_answer(&f, &zero, &mut sensors, &mut handshake);
        prop_assert!(Frame::parse_answer(&bytes, seq.wrapping_add(1)).is_err(), "a wrong seq is a failed exchange");
    }

    #[test]
    fn fuzz_answer_with_one_changed_byte_is_a_failed_exchange(
        messages in prop::collection::vec(message(), 0..24),
        seq in any::<u16>(),
        at in any::<prop::sample::Index>(),
        x in 1u8..=255,
    ) {
        let mut bytes = answer(seq, &messages);
        let i = at.index(bytes.len());
        bytes[i] ^= x;
        prop_assert!(Frame::parse_answer(&bytes, seq).is_err(), "byte {} changed, still accepted", i);
    }

    #[test]
    fn fuzz_preference_parser_arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64), len in prop::sample::select(vec![0usize, 4, 4634, 4635, 4636])) {
        let mut block = bytes.clone();
        block.resize(len, 0);
        let _ = Prefs::parse(&block);
        let _ = Prefs::parse(&bytes);
    }

    #[test]
    fn fuzz_preference_parser_valid_blocks_parse(content in prop::collection::vec(any::<u8>(), 0..600)) {
        let block = prefs_block(&content);
        prop_assert!(Prefs::parse(&block).is_ok());
    }

    #[test]
    fn fuzz_preference_block_with_one_changed_byte_is_rejected(
        content in prop::collection::vec(any::<u8>(), 0..600),
        at in 0usize..PREFS_LEN,
        x in 1u8..=255,
    ) {
        let mut block = prefs_block(&content);
        block[at] ^= x;
        prop_assert!(Prefs::parse(&block).is_err(), "byte {} changed, still accepted", at);
    }
}
