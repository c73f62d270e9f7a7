//! The preference block the virtual chest board serves (`docs/protocol.md` section 2):
//! 4,635 bytes, magic `NPRF`, layout 1, body id, 17 serial numbers, 25 joint
//! zero positions, foot pressure calibration, IMU offsets, CRC-32.
//!
//! The defaults are those of the recordings in `recordings/` (the same body
//! id, serial numbers, zero positions and calibration), so a session against
//! the simulator looks like the worked examples.
//!
//! The protocol core (`nao_wire::protocol::prefs`) owns the layout, the
//! CRC and the checks, both ways ([`Prefs::encode`], [`Prefs::parse`]);
//! this module only holds the recordings' values (the simulator is the only
//! writer in the project).

pub use nao_wire::protocol::prefs::BODY_ID_LEN;
use nao_wire::protocol::prefs::{Prefs, PressureCalibration};
use nao_wire::protocol::tables::PREFS_LEN;
use nao_wire::JOINTS;

/// The body id of the recordings.
pub const DEFAULT_BODY_ID: &str = "P0000074A05S94F00027";

/// The joint zero positions of the recordings, in joint index order.
pub const DEFAULT_ZEROS: [u16; JOINTS] = [
    2051, 1987, 2112, 2003, 1949, 2080, 2031, 2064, 1990, 2015, 1876, 2210, 2044, 2007, 1982, 1869,
    2230, 2039, 2098, 2071, 1961, 2022, 2054, 1500, 1512,
];

/// The serial numbers of the recordings, in device order: IMU, battery,
/// sonar, chest, the 13 joint boards.
pub const DEFAULT_SERIALS: [&str; 17] = [
    "IMU-7C1A-00412",
    "BAT-21-066793",
    "SON-3B-00127",
    "CHB-6-11873",
    "MB-HEAD-0917",
    "MB-LSHO-1022",
    "MB-LELB-0456",
    "MB-LWRI-0789",
    "MB-RSHO-1101",
    "MB-RELB-0333",
    "MB-RWRI-0644",
    "MB-LHIP-0120",
    "MB-LKNE-0567",
    "MB-LANK-0890",
    "MB-RHIP-0211",
    "MB-RKNE-0678",
    "MB-RANK-0999",
];

const FOOT_CAL: [f32; 16] = [
    0.0122, -3.5, 0.0119, -2.75, 0.0125, -4.0, 0.0121, -3.25, 0.0118, -3.0, 0.0124, -3.5, 0.012,
    -2.5, 0.0123, -3.75,
];
const IMU_OFFSETS: [f32; 6] = [12.5, -8.25, 30.0, 0.0012, -0.0008, 0.0004];

/// The fields of the recordings' block with `body_id` and the joint zero
/// positions `zeros`.
pub fn fields(body_id: &str, zeros: &[u16; JOINTS]) -> Prefs {
    Prefs {
        body_id: body_id.to_string(),
        serials: DEFAULT_SERIALS.map(String::from),
        zero: *zeros,
        foot_pressure: default_foot_calibration(),
        imu_offsets: IMU_OFFSETS,
    }
}

/// Builds a valid preference block with `body_id` (ASCII, at most 20 bytes;
/// longer is cut) and the joint zero positions `zeros`.
pub fn build(body_id: &str, zeros: &[u16; JOINTS]) -> Box<[u8; PREFS_LEN]> {
    fields(body_id, zeros).encode()
}

/// The foot pressure calibration of the default block, `[left,
/// right][sensor]`.
pub fn default_foot_calibration() -> [[PressureCalibration; 4]; 2] {
    std::array::from_fn(|f| {
        std::array::from_fn(|s| PressureCalibration {
            gain: FOOT_CAL[(f * 4 + s) * 2],
            offset: FOOT_CAL[(f * 4 + s) * 2 + 1],
        })
    })
}

/// The foot pressure calibration stored in `block`; the default one for a
/// block the protocol core refuses (the runtime's start-up then stops
/// anyway).
pub fn foot_calibration(block: &[u8; PREFS_LEN]) -> [[PressureCalibration; 4]; 2] {
    match Prefs::parse(block) {
        Ok(p) => p.foot_pressure,
        Err(_) => default_foot_calibration(),
    }
}

/// The zero positions stored in `block` (also in a block the protocol
/// core refuses).
pub fn zeros(block: &[u8; PREFS_LEN]) -> [u16; JOINTS] {
    Prefs::read(block).zero
}

/// Why a preference block is invalid (magic, layout or CRC, as the
/// protocol core's [`Prefs::parse`] says), or `None`. The simulator serves
/// an invalid block from `--prefs FILE` as it is (to test the runtime's
/// start-up error) and only warns.
pub fn check(block: &[u8; PREFS_LEN]) -> Option<String> {
    Prefs::parse(block).err().map(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preference_block_is_4635_bytes_with_magic_layout_and_crc32() {
        let b = build(DEFAULT_BODY_ID, &DEFAULT_ZEROS);
        assert_eq!(b.len(), 4635);
        assert_eq!(&b[0..4], b"NPRF");
        assert_eq!(check(&b), None);
        assert_eq!(&b[6..26], DEFAULT_BODY_ID.as_bytes());
        assert_eq!(zeros(&b), DEFAULT_ZEROS);
        // The CRC-32 itself (zlib's, check value 0xcbf43926 for
        // "123456789") is nao_wire's, tested there (`crc32_is_iso_hdlc`);
        // `check` above found this block's CRC right.
    }

    #[test]
    fn default_preference_block_equals_the_recordings() {
        // The CRC of the recordings' block (startup-v10.rec, last 4 bytes).
        let b = build(DEFAULT_BODY_ID, &DEFAULT_ZEROS);
        assert_eq!(&b[4631..], &[0x77, 0x8f, 0xa9, 0x11]);
        assert_eq!(foot_calibration(&b), default_foot_calibration());
        assert_eq!(default_foot_calibration()[1][3].offset, -3.75);
    }

    #[test]
    fn body_id_and_zero_positions_are_settable() {
        let mut z = DEFAULT_ZEROS;
        z[3] = 1234;
        let b = build("TEST-BODY", &z);
        assert_eq!(&b[6..15], b"TEST-BODY");
        assert_eq!(b[15], 0);
        assert_eq!(zeros(&b)[3], 1234);
        assert_eq!(check(&b), None);
        let mut bad = b.clone();
        bad[100] ^= 1;
        assert!(check(&bad).unwrap().contains("crc"));
    }
}
