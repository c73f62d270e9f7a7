//! Frames and answers (`docs/protocol.md` section 5): one layout both ways.
//!
//! `sync u8, seq u16 LE, count u8, count x (address u8, command u8, length u8,
//! payload), CRC-16/IBM-3740 u16 LE` of all bytes before the CRC.
//!
//! [`FrameWriter`] builds a frame (or, for the virtual robot, an answer) into a
//! caller's buffer; [`Frame::parse`] validates one without allocating and
//! iterates its messages. This module's API is stable.

use core::fmt;

use crc::{Crc, CRC_16_IBM_3740};

use super::tables::{SYNC_ANSWER, SYNC_FRAME};

/// Header bytes: sync, seq (2), count.
pub(crate) const HEADER_LEN: usize = 4;
/// CRC bytes at the end.
pub(crate) const CRC_LEN: usize = 2;
/// Bytes of a message before its payload: address, command, length.
pub(crate) const MESSAGE_HEADER_LEN: usize = 3;
/// The largest frame or answer: the bulk IN buffer length.
pub const MAX_FRAME_LEN: usize = 512;
/// The largest number of messages (the count is a u8).
pub(crate) const MAX_MESSAGES: usize = 255;

const CRC16: Crc<u16> = Crc::<u16>::new(&CRC_16_IBM_3740);

/// CRC-16/IBM-3740 (poly 0x1021, init 0xffff, no reflection, no xorout).
#[inline]
pub(crate) fn crc16(data: &[u8]) -> u16 {
    CRC16.checksum(data)
}

/// Why a frame or answer could not be built or parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// Fewer bytes than a header and a CRC (6).
    TooShort {
        /// Bytes given.
        len: usize,
    },
    /// The first byte is not the expected sync.
    BadSync {
        /// The expected sync (`0xa5` frame, `0x5a` answer).
        expected: u8,
        /// The byte found.
        found: u8,
    },
    /// The CRC at the end does not match the bytes before it.
    BadCrc {
        /// CRC computed over the bytes.
        expected: u16,
        /// CRC stored in the last two bytes.
        found: u16,
    },
    /// Message `index` runs past the CRC.
    Truncated {
        /// 0-based index of the message.
        index: usize,
    },
    /// Bytes are left between the last message and the CRC.
    TrailingBytes {
        /// How many.
        len: usize,
    },
    /// The seq is not the one expected (an answer to another frame).
    BadSeq {
        /// The expected seq.
        expected: u16,
        /// The seq found.
        found: u16,
    },
    /// The writer's buffer is full, or a payload is over 255 bytes, or
    /// there are more than 255 messages.
    Overflow,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FrameError::TooShort { len } => {
                write!(
                    f,
                    "frame too short: {len} bytes, need at least 6 (header and CRC)"
                )
            }
            FrameError::BadSync { expected, found } => {
                write!(
                    f,
                    "bad sync byte: expected {expected:#04x}, found {found:#04x}"
                )
            }
            FrameError::BadCrc { expected, found } => {
                write!(
                    f,
                    "bad CRC-16: computed {expected:#06x}, frame carries {found:#06x}"
                )
            }
            FrameError::Truncated { index } => {
                write!(f, "message {index} runs past the end of the frame")
            }
            FrameError::TrailingBytes { len } => {
                write!(f, "{len} bytes left after the last message")
            }
            FrameError::BadSeq { expected, found } => {
                write!(f, "bad seq: expected {expected}, found {found}")
            }
            FrameError::Overflow => write!(
                f,
                "frame overflow: over 512 bytes, 255 messages or a 255-byte payload"
            ),
        }
    }
}

impl std::error::Error for FrameError {}

/// One message of a frame or answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    /// Device address.
    pub address: u8,
    /// Command byte.
    pub command: u8,
    /// Payload (its length is the message's length byte).
    pub payload: &'a [u8],
}

/// Builds one frame (sync `0xa5`) or answer (sync `0x5a`) into a caller's
/// buffer. Never allocates; a message that does not fit is an
/// [`FrameError::Overflow`] and leaves the frame as it was.
pub struct FrameWriter<'a> {
    buf: &'a mut [u8],
    len: usize,
    count: usize,
}

impl<'a> FrameWriter<'a> {
    /// Starts a frame with `sync` and `seq` in `buf` (at most the first
    /// [`MAX_FRAME_LEN`] bytes are used).
    ///
    /// # Errors
    ///
    /// [`FrameError::Overflow`] when `buf` cannot hold a header and a CRC
    /// (6 bytes).
    pub(crate) fn new(buf: &'a mut [u8], sync: u8, seq: u16) -> Result<Self, FrameError> {
        let cap = buf.len().min(MAX_FRAME_LEN);
        if cap < HEADER_LEN + CRC_LEN {
            return Err(FrameError::Overflow);
        }
        let buf = &mut buf[..cap];
        buf[0] = sync;
        buf[1..3].copy_from_slice(&seq.to_le_bytes());
        buf[3] = 0;
        Ok(FrameWriter {
            buf,
            len: HEADER_LEN,
            count: 0,
        })
    }

    /// A frame (host to device).
    ///
    /// # Errors
    ///
    /// [`FrameError::Overflow`] when `buf` cannot hold a header and a CRC,
    /// as [`FrameWriter::new`].
    pub fn frame(buf: &'a mut [u8], seq: u16) -> Result<Self, FrameError> {
        Self::new(buf, SYNC_FRAME, seq)
    }

    /// An answer (device to host), carrying the seq of the frame it answers.
    ///
    /// # Errors
    ///
    /// [`FrameError::Overflow`] when `buf` cannot hold a header and a CRC,
    /// as [`FrameWriter::new`].
    pub fn answer(buf: &'a mut [u8], seq: u16) -> Result<Self, FrameError> {
        Self::new(buf, SYNC_ANSWER, seq)
    }

    /// Appends a message with `payload`.
    ///
    /// # Errors
    ///
    /// [`FrameError::Overflow`] when the message does not fit before the
    /// CRC, its payload is over 255 bytes or the frame has 255 messages
    /// already; the frame is left as it was.
    pub fn push(&mut self, address: u8, command: u8, payload: &[u8]) -> Result<(), FrameError> {
        let dst = self.reserve(address, command, payload.len())?;
        dst.copy_from_slice(payload);
        Ok(())
    }

    /// Appends a message of `len` payload bytes and returns them to fill in
    /// place (zeroed).
    ///
    /// # Errors
    ///
    /// [`FrameError::Overflow`] when the message does not fit before the
    /// CRC, its payload is over 255 bytes or the frame has 255 messages
    /// already; the frame is left as it was.
    pub fn reserve(
        &mut self,
        address: u8,
        command: u8,
        len: usize,
    ) -> Result<&mut [u8], FrameError> {
        if len > u8::MAX as usize || self.count >= MAX_MESSAGES {
            return Err(FrameError::Overflow);
        }
        let end = self.len + MESSAGE_HEADER_LEN + len;
        if end + CRC_LEN > self.buf.len() {
            return Err(FrameError::Overflow);
        }
        let start = self.len;
        self.buf[start] = address;
        self.buf[start + 1] = command;
        self.buf[start + 2] = len as u8;
        self.len = end;
        self.count += 1;
        let payload = &mut self.buf[start + MESSAGE_HEADER_LEN..end];
        payload.fill(0);
        Ok(payload)
    }

    /// Appends a message whose payload is u16 values, little endian.
    ///
    /// # Errors
    ///
    /// [`FrameError::Overflow`] when the message does not fit before the
    /// CRC, its payload is over 255 bytes or the frame has 255 messages
    /// already; the frame is left as it was.
    pub(crate) fn push_u16s(
        &mut self,
        address: u8,
        command: u8,
        values: impl ExactSizeIterator<Item = u16>,
    ) -> Result<(), FrameError> {
        let n = values.len();
        let dst = self.reserve(address, command, n * 2)?;
        for (chunk, v) in dst.chunks_exact_mut(2).zip(values) {
            chunk.copy_from_slice(&v.to_le_bytes());
        }
        Ok(())
    }

    /// Messages so far.
    #[cfg(test)]
    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// Writes the count and the CRC; returns the frame's length.
    pub fn finish(self) -> usize {
        self.buf[3] = self.count as u8;
        let crc = crc16(&self.buf[..self.len]);
        self.buf[self.len..self.len + CRC_LEN].copy_from_slice(&crc.to_le_bytes());
        self.len + CRC_LEN
    }
}

/// A validated frame or answer, borrowing its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The sync byte.
    pub sync: u8,
    /// The seq.
    pub seq: u16,
    /// Number of messages.
    pub count: u8,
    body: &'a [u8],
}

impl<'a> Frame<'a> {
    /// Validates `bytes` as a frame or answer with sync `sync`: length,
    /// sync, CRC, then that the `count` messages exactly fill the bytes
    /// before the CRC. Never panics, never allocates.
    ///
    /// # Errors
    ///
    /// The first check that fails, in that order:
    /// [`FrameError::TooShort`], [`FrameError::BadSync`],
    /// [`FrameError::BadCrc`], [`FrameError::Truncated`],
    /// [`FrameError::TrailingBytes`].
    pub fn parse(bytes: &'a [u8], sync: u8) -> Result<Frame<'a>, FrameError> {
        if bytes.len() < HEADER_LEN + CRC_LEN {
            return Err(FrameError::TooShort { len: bytes.len() });
        }
        if bytes[0] != sync {
            return Err(FrameError::BadSync {
                expected: sync,
                found: bytes[0],
            });
        }
        let crc_at = bytes.len() - CRC_LEN;
        let expected = crc16(&bytes[..crc_at]);
        let found = u16::from_le_bytes([bytes[crc_at], bytes[crc_at + 1]]);
        if expected != found {
            return Err(FrameError::BadCrc { expected, found });
        }
        let count = bytes[3];
        let body = &bytes[HEADER_LEN..crc_at];
        let mut at = 0usize;
        for index in 0..count as usize {
            if at + MESSAGE_HEADER_LEN > body.len() {
                return Err(FrameError::Truncated { index });
            }
            let end = at + MESSAGE_HEADER_LEN + body[at + 2] as usize;
            if end > body.len() {
                return Err(FrameError::Truncated { index });
            }
            at = end;
        }
        if at != body.len() {
            return Err(FrameError::TrailingBytes {
                len: body.len() - at,
            });
        }
        Ok(Frame {
            sync,
            seq: u16::from_le_bytes([bytes[1], bytes[2]]),
            count,
            body,
        })
    }

    /// Validates an answer (sync `0x5a`) to the frame with seq `seq`.
    ///
    /// # Errors
    ///
    /// What [`Frame::parse`] returns, then [`FrameError::BadSeq`] for an
    /// answer to another frame.
    pub(crate) fn parse_answer(bytes: &'a [u8], seq: u16) -> Result<Frame<'a>, FrameError> {
        let frame = Self::parse(bytes, SYNC_ANSWER)?;
        if frame.seq != seq {
            return Err(FrameError::BadSeq {
                expected: seq,
                found: frame.seq,
            });
        }
        Ok(frame)
    }

    /// The messages, in order.
    pub fn messages(&self) -> impl Iterator<Item = Message<'a>> + Clone + core::fmt::Debug {
        MessageIter {
            body: self.body,
            left: self.count as usize,
        }
    }
}

/// Iterates the messages of a validated [`Frame`].
#[derive(Debug, Clone)]
struct MessageIter<'a> {
    body: &'a [u8],
    left: usize,
}

impl<'a> Iterator for MessageIter<'a> {
    type Item = Message<'a>;

    fn next(&mut self) -> Option<Message<'a>> {
        if self.left == 0 || self.body.len() < MESSAGE_HEADER_LEN {
            return None;
        }
        let len = self.body[2] as usize;
        let end = MESSAGE_HEADER_LEN + len;
        if end > self.body.len() {
            return None;
        }
        let msg = Message {
            address: self.body[0],
            command: self.body[1],
            payload: &self.body[MESSAGE_HEADER_LEN..end],
        };
        self.body = &self.body[end..];
        self.left -= 1;
        Some(msg)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::test_bytes::{hex, STARTUP_FRAME_0 as SEQ0};

    #[test]
    fn crc16_is_ibm_3740() {
        assert_eq!(crc16(b"123456789"), 0x29b1);
    }

    #[test]
    fn frame_layout_is_sync_seq_count_messages_crc() {
        let mut buf = [0u8; MAX_FRAME_LEN];
        let mut w = FrameWriter::frame(&mut buf, 0).unwrap();
        for a in [0x03, 0x04, 0x40, 0x41] {
            w.push(a, 0x02, &[]).unwrap();
        }
        w.push(0x40, 0x03, &[0, 0, 64]).unwrap();
        w.push(0x41, 0x03, &[0, 0, 64]).unwrap();
        let n = w.finish();
        assert_eq!(&buf[..n], &hex(SEQ0)[..]);
    }

    #[test]
    fn parse_iterates_the_messages() {
        let bytes = hex(SEQ0);
        let f = Frame::parse(&bytes, SYNC_FRAME).unwrap();
        assert_eq!(f.seq, 0);
        let msgs: Vec<Message> = f.messages().collect();
        assert_eq!(msgs.len(), 6);
        assert_eq!(
            msgs[4],
            Message {
                address: 0x40,
                command: 0x03,
                payload: &[0, 0, 64]
            }
        );
    }

    /// An answer, seq `seq`, with one message (the chest board's READ
    /// answer `04 81 00 24`).
    fn one_message_answer(seq: u16) -> Vec<u8> {
        let mut buf = [0u8; 64];
        let mut w = FrameWriter::answer(&mut buf, seq).unwrap();
        w.push(0x04, 0x81, &[0, 0x24]).unwrap();
        let n = w.finish();
        buf[..n].to_vec()
    }

    /// `frame` claiming `count` messages, its CRC made good again.
    fn with_count(frame: &[u8], count: u8) -> Vec<u8> {
        let mut f = frame.to_vec();
        let n = f.len();
        f[3] = count;
        let crc = crc16(&f[..n - 2]);
        f[n - 2..].copy_from_slice(&crc.to_le_bytes());
        f
    }

    #[test]
    fn answer_with_bad_sync_crc_or_seq_is_rejected() {
        let good = one_message_answer(7);
        assert!(Frame::parse_answer(&good, 7).is_ok());
        assert_eq!(
            Frame::parse_answer(&good, 8),
            Err(FrameError::BadSeq {
                expected: 8,
                found: 7
            })
        );
        let mut bad = good.clone();
        bad[0] = 0xa5;
        assert!(matches!(
            Frame::parse_answer(&bad, 7),
            Err(FrameError::BadSync { .. })
        ));
        let mut bad = good.clone();
        bad[5] ^= 1;
        assert!(matches!(
            Frame::parse_answer(&bad, 7),
            Err(FrameError::BadCrc { .. })
        ));
        assert!(matches!(
            Frame::parse_answer(&good[..3], 7),
            Err(FrameError::TooShort { .. })
        ));
    }

    #[test]
    fn count_that_does_not_match_the_bytes_is_rejected() {
        let answer = one_message_answer(1);
        assert_eq!(
            Frame::parse(&with_count(&answer, 2), SYNC_ANSWER),
            Err(FrameError::Truncated { index: 1 })
        );
        assert_eq!(
            Frame::parse(&with_count(&answer, 0), SYNC_ANSWER),
            Err(FrameError::TrailingBytes { len: 5 })
        );
    }

    #[test]
    fn writer_overflow_is_an_error_not_a_panic() {
        let mut buf = [0u8; 10];
        let mut w = FrameWriter::frame(&mut buf, 0).unwrap();
        assert!(w.push(1, 1, &[]).is_ok());
        assert_eq!(w.push(1, 1, &[0; 8]), Err(FrameError::Overflow));
        assert_eq!(w.count(), 1);
        assert_eq!(w.finish(), 9);
        assert!(FrameWriter::frame(&mut [0u8; 3], 0).is_err());
    }
}
