//! The fixed tables of `docs/protocol.md`: USB constants (section 1),
//! the preference block's size (section 2), device addresses in HAL's order
//! (section 3), joints, boards and bus slots (section 4), command bytes
//! (section 5) and the position and stiffness encodings.
//!
//! Everything here is a `const` or a pure function; this module's API is
//! stable (the virtual robot builds on it).

use crate::command::{Joint, JOINTS};
use Joint as J;

/// A `#[repr(u8)]` enum of the bytes of one field of the protocol, with
/// `u8::from` and `TryFrom<u8>` (an unknown byte comes back as the error:
/// outside input never panics).
macro_rules! byte_enum {
    ($(#[$doc:meta])* $vis:vis enum $name:ident {
        $($(#[$vdoc:meta])* $variant:ident = $byte:literal,)+
    }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(u8)]
        $vis enum $name {
            $($(#[$vdoc])* $variant = $byte,)+
        }

        impl From<$name> for u8 {
            fn from(v: $name) -> u8 {
                v as u8
            }
        }

        impl TryFrom<u8> for $name {
            type Error = u8;
            fn try_from(byte: u8) -> Result<Self, u8> {
                match byte {
                    $($byte => Ok($name::$variant),)+
                    other => Err(other),
                }
            }
        }
    };
}
pub(crate) use byte_enum;

// ---------------------------------------------------------------- section 1

/// The chest board's USB configuration.
pub const CONFIGURATION: u8 = 1;
/// The interface the runtime claims.
pub const INTERFACE: u8 = 0;
/// Bulk OUT endpoint (frames).
pub const EP_OUT: u8 = 0x02;
/// Bulk IN endpoint (answers).
pub const EP_IN: u8 = 0x81;
/// The buffer length of every bulk IN read.
pub const BULK_IN_LEN: usize = 512;

byte_enum! {
    /// A vendor control request of the chest board (bRequest).
    pub enum VendorRequest {
        /// START (out, no data).
        Start = 0x01,
        /// VERSION (in, 4 bytes: major, minor, patch, 0).
        Version = 0x02,
        /// PREFS (in, wIndex = byte offset).
        Prefs = 0x03,
        /// BOOT_ID (in, wValue = n, 8 bytes).
        BootId = 0x04,
        /// CLIENT_STATE (out, wValue = state).
        ClientState = 0x05,
    }
}

impl VendorRequest {
    /// Its bmRequestType (vendor, recipient device): `0x40` host to device
    /// for START and CLIENT_STATE, `0xc0` device to host for the others.
    pub const fn request_type(self) -> u8 {
        match self {
            VendorRequest::Start | VendorRequest::ClientState => 0x40,
            VendorRequest::Version | VendorRequest::Prefs | VendorRequest::BootId => 0xc0,
        }
    }
}
/// Length of the VERSION answer.
pub(crate) const VERSION_LEN: usize = 4;
/// Length of one BOOT_ID answer.
pub(crate) const BOOT_ID_LEN: usize = 8;
/// Number of bootloader ids (wValue 0, 1, 2).
pub(crate) const BOOT_IDS: usize = 3;

/// Client state after power-on and after every reconnect.
pub const CLIENT_DISCONNECTED: u8 = 0x00;
/// Client state the runtime reports (HAL's "LoLA connected").
pub(crate) const CLIENT_CONNECTED: u8 = 0x24;

// ---------------------------------------------------------------- section 2

/// Size of the preference block in bytes.
pub const PREFS_LEN: usize = 4635;
/// Bytes per PREFS request.
pub(crate) const PREFS_CHUNK: usize = 1024;

/// Length of the PREFS request at `offset`: `min(1024, 4635 - offset)`
/// (0 at or past the end).
pub const fn prefs_chunk_len(offset: usize) -> usize {
    if offset >= PREFS_LEN {
        0
    } else if PREFS_LEN - offset < PREFS_CHUNK {
        PREFS_LEN - offset
    } else {
        PREFS_CHUNK
    }
}

// ---------------------------------------------------------------- section 3

/// Inertial unit.
pub(crate) const ADDR_IMU: u8 = 0x01;
/// Battery.
pub(crate) const ADDR_BATTERY: u8 = 0x02;
/// Sonar board.
pub(crate) const ADDR_SONAR: u8 = 0x03;
/// Chest board.
pub(crate) const ADDR_CHEST: u8 = 0x04;
/// Left foot board.
pub(crate) const ADDR_LEFT_FOOT: u8 = 0x1d;
/// Right foot board.
pub(crate) const ADDR_RIGHT_FOOT: u8 = 0x1e;
/// First EEPROM behind the chest board.
pub(crate) const ADDR_EEPROM_A: u8 = 0x40;
/// Second EEPROM behind the chest board.
pub(crate) const ADDR_EEPROM_B: u8 = 0x41;
/// Broadcast to motor bus A (upper body).
pub(crate) const ADDR_BUS_A: u8 = 0xf0;
/// Broadcast to motor bus B (lower body and feet).
pub(crate) const ADDR_BUS_B: u8 = 0xf1;

/// Number of devices read every cycle.
pub(crate) const DEVICE_COUNT: usize = 21;

/// Every device in HAL's order: the order of the READ messages of a frame.
pub(crate) const DEVICES: [u8; DEVICE_COUNT] = [
    ADDR_IMU,
    ADDR_BATTERY,
    ADDR_SONAR,
    ADDR_CHEST,
    0x10,
    0x11,
    0x12,
    0x13,
    0x14,
    0x15,
    0x16,
    0x17,
    0x18,
    0x19,
    0x1a,
    0x1b,
    0x1c,
    ADDR_LEFT_FOOT,
    ADDR_RIGHT_FOOT,
    ADDR_EEPROM_A,
    ADDR_EEPROM_B,
];

/// The kind of device behind an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// The inertial unit.
    Imu,
    /// The battery.
    Battery,
    /// The sonar board.
    Sonar,
    /// The chest board.
    Chest,
    /// Joint board n (0..13, address `0x10 + n`).
    JointBoard(usize),
    /// Foot board: 0 left, 1 right.
    FootBoard(usize),
    /// EEPROM: 0 (`0x40`), 1 (`0x41`).
    Eeprom(usize),
    /// Motor bus broadcast: 0 bus A, 1 bus B.
    Bus(usize),
}

/// The device at `address`, or `None` for an address of no device.
pub const fn device_kind(address: u8) -> Option<DeviceKind> {
    match address {
        ADDR_IMU => Some(DeviceKind::Imu),
        ADDR_BATTERY => Some(DeviceKind::Battery),
        ADDR_SONAR => Some(DeviceKind::Sonar),
        ADDR_CHEST => Some(DeviceKind::Chest),
        0x10..=0x1c => Some(DeviceKind::JointBoard((address - 0x10) as usize)),
        ADDR_LEFT_FOOT => Some(DeviceKind::FootBoard(0)),
        ADDR_RIGHT_FOOT => Some(DeviceKind::FootBoard(1)),
        ADDR_EEPROM_A => Some(DeviceKind::Eeprom(0)),
        ADDR_EEPROM_B => Some(DeviceKind::Eeprom(1)),
        ADDR_BUS_A => Some(DeviceKind::Bus(0)),
        ADDR_BUS_B => Some(DeviceKind::Bus(1)),
        _ => None,
    }
}

/// A device's name with its address, for error messages (for example
/// `"LWrist board (0x13)"`); `"unknown device"` for an address of none.
pub(crate) const fn device_name(address: u8) -> &'static str {
    match address {
        ADDR_IMU => "inertial unit (0x01)",
        ADDR_BATTERY => "battery (0x02)",
        ADDR_SONAR => "sonar board (0x03)",
        ADDR_CHEST => "chest board (0x04)",
        0x10 => "Head board (0x10)",
        0x11 => "LShoulder board (0x11)",
        0x12 => "LElbow board (0x12)",
        0x13 => "LWrist board (0x13)",
        0x14 => "RShoulder board (0x14)",
        0x15 => "RElbow board (0x15)",
        0x16 => "RWrist board (0x16)",
        0x17 => "LHip board (0x17)",
        0x18 => "LKnee board (0x18)",
        0x19 => "LAnkle board (0x19)",
        0x1a => "RHip board (0x1a)",
        0x1b => "RKnee board (0x1b)",
        0x1c => "RAnkle board (0x1c)",
        ADDR_LEFT_FOOT => "left foot board (0x1d)",
        ADDR_RIGHT_FOOT => "right foot board (0x1e)",
        ADDR_EEPROM_A => "EEPROM A (0x40)",
        ADDR_EEPROM_B => "EEPROM B (0x41)",
        ADDR_BUS_A => "motor bus A (0xf0)",
        ADDR_BUS_B => "motor bus B (0xf1)",
        _ => "unknown device",
    }
}

// ---------------------------------------------------------------- section 4

/// Joint names in joint index order (as in LoLA): [`Joint::name`].
pub const JOINT_NAMES: [&str; JOINTS] = {
    let mut out = [""; JOINTS];
    let mut i = 0;
    while i < JOINTS {
        out[i] = Joint::ALL[i].name();
        i += 1;
    }
    out
};

/// A motor bus: 0 = A (`0xf0`, upper body), 1 = B (`0xf1`, lower body).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bus {
    /// Bus A, broadcast `0xf0`.
    A,
    /// Bus B, broadcast `0xf1`.
    B,
}

impl Bus {
    /// The bus's broadcast address.
    pub(crate) const fn address(self) -> u8 {
        match self {
            Bus::A => ADDR_BUS_A,
            Bus::B => ADDR_BUS_B,
        }
    }
    /// The bus's slots: joint indices in slot order.
    pub const fn slots(self) -> &'static [usize] {
        match self {
            Bus::A => &BUS_A_SLOTS,
            Bus::B => &BUS_B_SLOTS,
        }
    }
}

/// A joint board.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JointBoard {
    /// Its address.
    pub address: u8,
    /// Its name.
    pub(crate) name: &'static str,
    /// The motor bus it is on.
    pub(crate) bus: Bus,
    /// Its joints in the board's order (joint indices).
    pub joints: &'static [usize],
}

impl JointBoard {
    const fn new(address: u8, name: &'static str, bus: Bus, joints: &'static [usize]) -> Self {
        JointBoard {
            address,
            name,
            bus,
            joints,
        }
    }
}

/// Number of joint boards.
pub(crate) const JOINT_BOARD_COUNT: usize = 13;

/// The 13 joint boards in address order (`0x10`..=`0x1c`).
#[rustfmt::skip]
pub const JOINT_BOARDS: [JointBoard; JOINT_BOARD_COUNT] = [
    JointBoard::new(0x10, "Head",      Bus::A, &[J::HeadYaw.index(), J::HeadPitch.index()]),
    JointBoard::new(0x11, "LShoulder", Bus::A, &[J::LShoulderPitch.index(), J::LShoulderRoll.index()]),
    JointBoard::new(0x12, "LElbow",    Bus::A, &[J::LElbowYaw.index(), J::LElbowRoll.index()]),
    JointBoard::new(0x13, "LWrist",    Bus::A, &[J::LWristYaw.index(), J::LHand.index()]),
    JointBoard::new(0x14, "RShoulder", Bus::A, &[J::RShoulderPitch.index(), J::RShoulderRoll.index()]),
    JointBoard::new(0x15, "RElbow",    Bus::A, &[J::RElbowYaw.index(), J::RElbowRoll.index()]),
    JointBoard::new(0x16, "RWrist",    Bus::A, &[J::RWristYaw.index(), J::RHand.index()]),
    JointBoard::new(0x17, "LHip",      Bus::B, &[J::LHipYawPitch.index(), J::LHipRoll.index(), J::LHipPitch.index()]),
    JointBoard::new(0x18, "LKnee",     Bus::B, &[J::LKneePitch.index()]),
    JointBoard::new(0x19, "LAnkle",    Bus::B, &[J::LAnklePitch.index(), J::LAnkleRoll.index()]),
    JointBoard::new(0x1a, "RHip",      Bus::B, &[J::RHipRoll.index(), J::RHipPitch.index()]),
    JointBoard::new(0x1b, "RKnee",     Bus::B, &[J::RKneePitch.index()]),
    JointBoard::new(0x1c, "RAnkle",    Bus::B, &[J::RAnklePitch.index(), J::RAnkleRoll.index()]),
];

/// The joints of the boards on `bus`, board by board in address order:
/// the bus's slot order. `N` must be the bus's joint count (checked when the
/// constant is built).
const fn bus_slots<const N: usize>(bus: Bus) -> [usize; N] {
    let mut out = [0; N];
    let mut n = 0;
    let mut b = 0;
    while b < JOINT_BOARD_COUNT {
        let board = JOINT_BOARDS[b];
        if board.bus as u8 == bus as u8 {
            let mut i = 0;
            while i < board.joints.len() {
                out[n] = board.joints[i];
                n += 1;
                i += 1;
            }
        }
        b += 1;
    }
    assert!(n == N, "a bus's slot count is its boards' joint count");
    out
}

/// Bus A's slots: joint indices in slot order (14 slots).
pub(crate) const BUS_A_SLOTS: [usize; 14] = bus_slots(Bus::A);
/// Bus B's slots: joint indices in slot order (11 slots).
pub(crate) const BUS_B_SLOTS: [usize; 11] = bus_slots(Bus::B);

/// Number of boards in the motor board handshake (13 joint + 2 foot boards).
pub const HANDSHAKE_BOARD_COUNT: usize = 15;
/// The boards of the handshake, in address order: the joint boards, then
/// the left and the right foot board.
pub const HANDSHAKE_BOARDS: [u8; HANDSHAKE_BOARD_COUNT] = {
    let mut out = [ADDR_RIGHT_FOOT; HANDSHAKE_BOARD_COUNT];
    let mut b = 0;
    while b < JOINT_BOARD_COUNT {
        out[b] = JOINT_BOARDS[b].address;
        b += 1;
    }
    out[JOINT_BOARD_COUNT] = ADDR_LEFT_FOOT;
    out
};

/// The index (0..13) into [`JOINT_BOARDS`] of joint `j`'s board.
///
/// # Panics
///
/// For `j >= 25` (a programming error, never outside input).
pub const fn joint_board(j: usize) -> usize {
    JOINT_BOARD_OF_JOINT[j]
}

const JOINT_BOARD_OF_JOINT: [usize; JOINTS] = {
    let mut out = [0usize; JOINTS];
    let mut b = 0;
    while b < JOINT_BOARD_COUNT {
        let joints = JOINT_BOARDS[b].joints;
        let mut i = 0;
        while i < joints.len() {
            out[joints[i]] = b;
            i += 1;
        }
        b += 1;
    }
    out
};

/// Encoder counts per revolution.
pub(crate) const COUNTS_PER_REV: f64 = 4096.0;
/// Largest encoder count.
pub const MAX_COUNT: u16 = 4095;

/// `round` of `docs/protocol.md`: half away from zero, in f64 from the f32 value.
#[inline]
pub(crate) fn round_spec(v: f32, k: f64) -> f64 {
    (v as f64 * k).round()
}

/// Position encoding: `zero + round(angle * 4096 / TAU)`, clamped to
/// 0..=4095. A non-finite angle is the caller's business (section 10 never
/// encodes one); here NaN maps to `zero` and infinities to the clamp ends.
#[inline]
pub(crate) fn encode_position(angle: f32, zero: u16) -> u16 {
    let delta = round_spec(angle, COUNTS_PER_REV / std::f64::consts::TAU);
    let count = zero as f64 + delta;
    if count.is_nan() {
        zero.min(MAX_COUNT)
    } else {
        count.clamp(0.0, MAX_COUNT as f64) as u16
    }
}

/// Position decoding: `(count - zero) * TAU / 4096` radians.
#[inline]
pub fn decode_position(count: u16, zero: u16) -> f32 {
    ((count as f64 - zero as f64) * std::f64::consts::TAU / COUNTS_PER_REV) as f32
}

/// Stiffness per mille: `round(clamp(s, 0, 1) * 1000)`; 0 for a non-finite
/// value.
#[inline]
pub(crate) fn stiffness_per_mille(s: f32) -> u16 {
    if !s.is_finite() {
        return 0;
    }
    (s.clamp(0.0, 1.0) as f64 * 1000.0).round() as u16
}

// ---------------------------------------------------------------- section 5

/// Sync byte of a frame (host to device).
pub const SYNC_FRAME: u8 = 0xa5;
/// Sync byte of an answer (device to host).
pub(crate) const SYNC_ANSWER: u8 = 0x5a;

byte_enum! {
    /// The command byte of a frame's message (host to device).
    pub enum BoardCommand {
        /// READ: any device, no payload.
        Read = 0x01,
        /// START: sonar, chest, IMU, EEPROMs, no payload.
        Start = 0x02,
        /// EEPROM_READ: offset u16, length u8.
        EepromRead = 0x03,
        /// EEPROM_WRITE: never sent by this project.
        EepromWrite = 0x04,
        /// POSITIONS: one u16 count per bus slot.
        Positions = 0x10,
        /// STIFFNESS: one u16 per mille per bus slot.
        Stiffness = 0x11,
        /// TEMP_TRACKING: no payload.
        TempTracking = 0x12,
        /// CONFIG_REQUEST: joint and foot boards, no payload.
        ConfigRequest = 0x20,
        /// CHEST_LED: r, g, b.
        ChestLed = 0x30,
        /// FOOT_LED: r, g, b.
        FootLed = 0x31,
        /// SONAR_MODE: mode u8.
        SonarMode = 0x32,
    }
}

byte_enum! {
    /// The command byte of an answer's message (device to host).
    pub enum AnswerKind {
        /// Answer to READ.
        Read = 0x81,
        /// Answer to START and TEMP_TRACKING: status u8, 0 = ok.
        Status = 0x82,
        /// Answer to EEPROM_READ: the bytes read.
        EepromRead = 0x83,
        /// Answer to CONFIG_REQUEST: version u8, then 8 bytes.
        Config = 0xa0,
    }
}

/// READ answer payload length of the IMU.
pub(crate) const READ_LEN_IMU: usize = 16;
/// READ answer payload length of the battery.
pub(crate) const READ_LEN_BATTERY: usize = 8;
/// READ answer payload length of the sonar.
pub(crate) const READ_LEN_SONAR: usize = 4;
/// READ answer payload length of the chest board.
pub(crate) const READ_LEN_CHEST: usize = 2;
/// READ answer bytes per joint of a joint board.
pub(crate) const READ_LEN_PER_JOINT: usize = 6;
/// READ answer payload length of a foot board.
pub(crate) const READ_LEN_FOOT: usize = 9;
/// READ answer payload length of an EEPROM.
pub(crate) const READ_LEN_EEPROM: usize = 1;
/// CONFIG answer payload length.
pub(crate) const CONFIG_LEN: usize = 9;

/// The READ answer payload length of the device at `address`, or `None`.
pub(crate) fn read_answer_len(address: u8) -> Option<usize> {
    Some(match device_kind(address)? {
        DeviceKind::Imu => READ_LEN_IMU,
        DeviceKind::Battery => READ_LEN_BATTERY,
        DeviceKind::Sonar => READ_LEN_SONAR,
        DeviceKind::Chest => READ_LEN_CHEST,
        DeviceKind::JointBoard(b) => READ_LEN_PER_JOINT * JOINT_BOARDS[b].joints.len(),
        DeviceKind::FootBoard(_) => READ_LEN_FOOT,
        DeviceKind::Eeprom(_) => READ_LEN_EEPROM,
        DeviceKind::Bus(_) => return None,
    })
}

/// The start-up EEPROM read: offset 0, 64 bytes.
pub(crate) const EEPROM_READ_LEN: u8 = 64;

/// Temperature (degC) at or above which a joint trips the switch (heat).
pub(crate) const HEAT_TRIP_DEG_C: i8 = 90;
/// Joint status bit of a fault.
pub(crate) const JOINT_STATUS_FAULT: u8 = 0x01;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_enums_convert_both_ways_and_hand_back_an_unknown_byte() {
        let mut known = 0;
        for b in 0..=u8::MAX {
            for back in [
                BoardCommand::try_from(b).map(u8::from),
                AnswerKind::try_from(b).map(u8::from),
                VendorRequest::try_from(b).map(u8::from),
            ] {
                assert!(back == Ok(b) || back == Err(b), "{b:#04x}");
                known += usize::from(back.is_ok());
            }
        }
        assert_eq!(known, 11 + 4 + 5);
        assert_eq!(
            BoardCommand::try_from(0x20),
            Ok(BoardCommand::ConfigRequest)
        );
        assert_eq!(AnswerKind::try_from(0x82), Ok(AnswerKind::Status));
        assert_eq!(VendorRequest::try_from(0x06), Err(0x06));
        assert_eq!(VendorRequest::ClientState.request_type(), 0x40);
        assert_eq!(VendorRequest::BootId.request_type(), 0xc0);
    }

    #[test]
    fn devices_are_in_hal_order() {
        assert_eq!(DEVICES[0], ADDR_IMU);
        assert_eq!(DEVICES[3], ADDR_CHEST);
        assert_eq!(
            &DEVICES[4..17],
            &[0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c]
        );
        assert_eq!(&DEVICES[17..], &[0x1d, 0x1e, 0x40, 0x41]);
        assert_eq!(HANDSHAKE_BOARDS, DEVICES[4..19]);
    }

    #[test]
    fn bus_slots_are_the_boards_joints_in_address_order() {
        for bus in [Bus::A, Bus::B] {
            let from_boards: Vec<usize> = JOINT_BOARDS
                .iter()
                .filter(|b| b.bus == bus)
                .flat_map(|b| b.joints.iter().copied())
                .collect();
            assert_eq!(from_boards, bus.slots());
        }
        // The slot order of docs/protocol.md section 4, by joint index.
        assert_eq!(
            BUS_A_SLOTS,
            [0, 1, 2, 3, 4, 5, 6, 23, 18, 19, 20, 21, 22, 24]
        );
        assert_eq!(BUS_B_SLOTS, [7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]);
        let mut all: Vec<usize> = BUS_A_SLOTS
            .iter()
            .chain(BUS_B_SLOTS.iter())
            .copied()
            .collect();
        all.sort();
        assert_eq!(all, (0..JOINTS).collect::<Vec<_>>());
    }

    #[test]
    fn joint_board_finds_every_joint() {
        assert_eq!(joint_board(23), 3);
        assert_eq!(joint_board(24), 6);
        assert_eq!(joint_board(7), 7);
        for (b, board) in JOINT_BOARDS.iter().enumerate() {
            for &j in board.joints {
                assert_eq!(joint_board(j), b);
            }
        }
    }

    #[test]
    fn prefs_are_read_in_five_chunks_the_last_539_bytes() {
        let lens: Vec<usize> = (0..5).map(|i| prefs_chunk_len(i * PREFS_CHUNK)).collect();
        assert_eq!(lens, [1024, 1024, 1024, 1024, 539]);
    }

    #[test]
    fn position_encoding_rounds_half_away_and_clamps_to_encoder_range() {
        assert_eq!(encode_position(0.0, 2048), 2048);
        let one_count = (std::f64::consts::TAU / 4096.0) as f32;
        assert_eq!(encode_position(one_count, 2048), 2049);
        assert_eq!(encode_position(-one_count, 2048), 2047);
        assert_eq!(encode_position(100.0, 2048), 4095);
        assert_eq!(encode_position(-100.0, 2048), 0);
        assert_eq!(encode_position(f32::NAN, 2048), 2048);
        assert!((decode_position(2049, 2048) - one_count).abs() < 1e-6);
    }

    #[test]
    fn stiffness_is_clamped_to_0_1_and_non_finite_is_0() {
        assert_eq!(stiffness_per_mille(0.5), 500);
        assert_eq!(stiffness_per_mille(1.5), 1000);
        assert_eq!(stiffness_per_mille(-0.2), 0);
        assert_eq!(stiffness_per_mille(f32::NAN), 0);
        assert_eq!(stiffness_per_mille(f32::INFINITY), 0);
        assert_eq!(stiffness_per_mille(0.0005), 1);
    }
}
