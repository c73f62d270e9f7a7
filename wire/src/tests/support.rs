//! A fake chest board for the protocol tests: a `Link` that answers every
//! frame as the protocol's devices would, allocates nothing, and can be told to
//! fail reads and writes or corrupt answers.
#![allow(dead_code)]

use crate::link::Call;
use crate::protocol::frame::{Frame, FrameWriter};
use crate::protocol::prefs::crc32;
use crate::protocol::tables::*;
use crate::{Link, LinkError, JOINTS};

/// What a call was (no data, so the log never allocates).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Open,
    SetConfiguration,
    ClaimInterface,
    Close,
    ControlOut(u8, u16),
    ControlIn(u8),
    BulkOut,
    BulkIn,
}

/// How to spoil the next answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spoil {
    None,
    Sync,
    Crc,
    Seq,
}

pub(crate) const LOG: usize = 4096;

pub(crate) struct FakeBoard {
    pub(crate) log: [Kind; LOG],
    pub(crate) log_len: usize,
    pub(crate) prefs: [u8; PREFS_LEN],
    pub(crate) config_version: [u8; 15],
    /// Boards (index into HANDSHAKE_BOARDS) that never answer CONFIG_REQUEST.
    pub(crate) config_silent: u16,
    pub(crate) chest_button: bool,
    pub(crate) battery_ma: i16,
    /// The IMU's accelerometer, mm/s^2 (0: no gravity anywhere, not lying).
    pub(crate) accelerometer: [i16; 3],
    /// The toe bumpers per foot board (bit 0 left, bit 1 right).
    pub(crate) bumpers: [u8; 2],
    pub(crate) temperature: [i8; JOINTS],
    pub(crate) status: [u8; JOINTS],
    pub(crate) count: [u16; JOINTS],
    pub(crate) fail_reads: u32,
    pub(crate) fail_writes: u32,
    pub(crate) spoil: Spoil,
    pub(crate) last_frame: [u8; 512],
    pub(crate) last_frame_len: usize,
    answer: [u8; 512],
    answer_len: usize,
    pub(crate) frames_written: u32,
}

pub(crate) fn prefs_block(zero: u16) -> [u8; PREFS_LEN] {
    let mut b = [0u8; PREFS_LEN];
    b[0..4].copy_from_slice(b"NPRF");
    b[4..6].copy_from_slice(&1u16.to_le_bytes());
    b[6..16].copy_from_slice(b"FAKE-BODY1");
    for j in 0..JOINTS {
        b[298 + 2 * j..300 + 2 * j].copy_from_slice(&zero.to_le_bytes());
    }
    let crc = crc32(&b[..4631]);
    b[4631..].copy_from_slice(&crc.to_le_bytes());
    b
}

impl FakeBoard {
    pub(crate) fn new() -> Box<Self> {
        Box::new(FakeBoard {
            log: [Kind::Close; LOG],
            log_len: 0,
            prefs: prefs_block(2048),
            config_version: [10; 15],
            config_silent: 0,
            chest_button: false,
            battery_ma: 1000,
            accelerometer: [0; 3],
            bumpers: [0; 2],
            temperature: [30; JOINTS],
            status: [0; JOINTS],
            count: [2100; JOINTS],
            fail_reads: 0,
            fail_writes: 0,
            spoil: Spoil::None,
            last_frame: [0; 512],
            last_frame_len: 0,
            answer: [0; 512],
            answer_len: 0,
            frames_written: 0,
        })
    }

    fn note(&mut self, k: Kind) {
        if self.log_len < LOG {
            self.log[self.log_len] = k;
            self.log_len += 1;
        }
    }

    pub(crate) fn calls(&self) -> &[Kind] {
        &self.log[..self.log_len]
    }

    pub(crate) fn clear_log(&mut self) {
        self.log_len = 0;
    }

    pub(crate) fn frame(&self) -> Frame<'_> {
        Frame::parse(&self.last_frame[..self.last_frame_len], SYNC_FRAME).expect("valid frame")
    }

    fn make_answer(&mut self) {
        let frame_bytes = self.last_frame;
        let frame =
            Frame::parse(&frame_bytes[..self.last_frame_len], SYNC_FRAME).expect("valid frame");
        let seq = match self.spoil {
            Spoil::Seq => frame.seq.wrapping_add(7),
            _ => frame.seq,
        };
        let mut w = FrameWriter::answer(&mut self.answer, seq).unwrap();
        for m in frame.messages() {
            let a = m.address;
            match BoardCommand::try_from(m.command) {
                Ok(BoardCommand::Read) => {
                    let len = read_answer_len(a).unwrap();
                    let p = w.reserve(a, u8::from(AnswerKind::Read), len).unwrap();
                    match device_kind(a).unwrap() {
                        DeviceKind::Battery => {
                            p[2..4].copy_from_slice(&self.battery_ma.to_le_bytes())
                        }
                        DeviceKind::Imu => {
                            for (i, a) in self.accelerometer.iter().enumerate() {
                                p[2 * i..2 * i + 2].copy_from_slice(&a.to_le_bytes());
                            }
                        }
                        DeviceKind::FootBoard(f) => p[8] = self.bumpers[f],
                        DeviceKind::Chest => {
                            p[0] = self.chest_button as u8;
                            p[1] = CLIENT_CONNECTED;
                        }
                        DeviceKind::JointBoard(b) => {
                            for (i, &j) in JOINT_BOARDS[b].joints.iter().enumerate() {
                                p[6 * i..6 * i + 2].copy_from_slice(&self.count[j].to_le_bytes());
                                p[6 * i + 4] = self.temperature[j] as u8;
                                p[6 * i + 5] = self.status[j];
                            }
                        }
                        _ => {}
                    }
                }
                Ok(BoardCommand::ConfigRequest) => {
                    let i = HANDSHAKE_BOARDS.iter().position(|&x| x == a).unwrap();
                    if self.config_silent & (1 << i) == 0 {
                        let p = w
                            .reserve(a, u8::from(AnswerKind::Config), CONFIG_LEN)
                            .unwrap();
                        p[0] = self.config_version[i];
                    }
                }
                Ok(BoardCommand::Start | BoardCommand::TempTracking) => {
                    w.push(a, u8::from(AnswerKind::Status), &[0]).unwrap()
                }
                Ok(BoardCommand::EepromRead) => {
                    let _ = w
                        .reserve(a, u8::from(AnswerKind::EepromRead), m.payload[2] as usize)
                        .unwrap();
                }
                _ => {}
            }
        }
        self.answer_len = w.finish();
        match self.spoil {
            Spoil::Sync => self.answer[0] = 0x00,
            Spoil::Crc => self.answer[self.answer_len - 1] ^= 0xff,
            _ => {}
        }
    }
}

impl Link for FakeBoard {
    fn call(&mut self, call: Call<'_>, buf: &mut [u8]) -> Result<usize, LinkError> {
        match call {
            Call::Open { .. } => self.note(Kind::Open),
            Call::SetConfiguration(_) => self.note(Kind::SetConfiguration),
            Call::ClaimInterface(_) => self.note(Kind::ClaimInterface),
            Call::Close => self.note(Kind::Close),
            Call::ControlOut { setup, .. } => {
                self.note(Kind::ControlOut(setup.request, setup.value))
            }
            Call::ControlIn { setup, .. } => {
                let (r, v, i) = (setup.request, setup.value, setup.index);
                self.note(Kind::ControlIn(r));
                match VendorRequest::try_from(r) {
                    Ok(VendorRequest::Version) => buf[..4].copy_from_slice(&[2, 17, 7, 0]),
                    Ok(VendorRequest::Prefs) => {
                        let at = i as usize;
                        let n = buf.len().min(PREFS_LEN.saturating_sub(at));
                        buf[..n].copy_from_slice(&self.prefs[at..at + n]);
                    }
                    Ok(VendorRequest::BootId) => buf.fill(b'0' + v as u8),
                    _ => {}
                }
                return Ok(buf.len());
            }
            Call::BulkOut { data, .. } => {
                self.note(Kind::BulkOut);
                self.last_frame[..data.len()].copy_from_slice(data);
                self.last_frame_len = data.len();
                self.frames_written += 1;
                if self.fail_writes > 0 {
                    self.fail_writes -= 1;
                    return Err(LinkError::Timeout);
                }
                self.make_answer();
                return Ok(data.len());
            }
            Call::BulkIn { .. } => {
                self.note(Kind::BulkIn);
                if self.fail_reads > 0 {
                    self.fail_reads -= 1;
                    return Err(LinkError::Timeout);
                }
                buf[..self.answer_len].copy_from_slice(&self.answer[..self.answer_len]);
                return Ok(self.answer_len);
            }
        }
        Ok(0)
    }
}
