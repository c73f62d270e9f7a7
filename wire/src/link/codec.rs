//! The request codec of the virtual robot's Unix socket: how a [`Call`]
//! and its reply travel between [`super::sim::SimLink`] and `nao-rs-sim`.
//! Both ends use these constants, so the encoding exists once.
//!
//! Every request and every reply is one message: a `u32` little-endian body
//! length, then the body. A request body is an op byte and its fields
//! (little endian); a reply body is a status byte and its data:
//!
//! | op | call | fields |
//! |---|---|---|
//! | 1 | open | vendor u16, product u16 |
//! | 2 | set_configuration | config u8 |
//! | 3 | claim_interface | iface u8 |
//! | 4 | close | none |
//! | 5 | control_out | bmRequestType u8, bRequest u8, wValue u16, wIndex u16, data |
//! | 6 | control_in | bmRequestType u8, bRequest u8, wValue u16, wIndex u16, wLength u16 |
//! | 7 | bulk_out | endpoint u8, data |
//! | 8 | bulk_in | endpoint u8, buffer length u16 |
//!
//! Status: 0 ok, 1 timeout, 2 pipe, 3 no device, 4 busy, 5 other (the data is
//! a UTF-8 message). The data of an ok reply: none for open, set_configuration,
//! claim_interface and close; the transferred length as `u32` for control_out
//! and bulk_out; the bytes read for control_in and bulk_in.
//!
//! [`encode_request`] appends a request body; the link wraps it with its
//! length prefix, sends it and decodes the reply body with
//! [`decode_reply`]. The simulator (`nao-rs-sim`'s `device.rs`) decodes
//! requests and encodes replies itself, with the `OP_*` and `ST_*`
//! constants and [`status`]; the decoder and reply encoders here, the
//! simulator's side, serve this module's round-trip tests.

use super::{answer_buf, Call, LinkError, Setup};

/// Op: open (vendor u16, product u16).
pub const OP_OPEN: u8 = 1;
/// Op: set_configuration (config u8).
pub const OP_SET_CONFIGURATION: u8 = 2;
/// Op: claim_interface (iface u8).
pub const OP_CLAIM_INTERFACE: u8 = 3;
/// Op: close.
pub const OP_CLOSE: u8 = 4;
/// Op: control_out (bmRequestType, bRequest, wValue, wIndex, data).
pub const OP_CONTROL_OUT: u8 = 5;
/// Op: control_in (bmRequestType, bRequest, wValue, wIndex, wLength).
pub const OP_CONTROL_IN: u8 = 6;
/// Op: bulk_out (endpoint, data).
pub const OP_BULK_OUT: u8 = 7;
/// Op: bulk_in (endpoint, buffer length u16).
pub const OP_BULK_IN: u8 = 8;

/// Reply status: ok.
pub const ST_OK: u8 = 0;
/// Reply status: the transfer timed out.
pub const ST_TIMEOUT: u8 = 1;
/// Reply status: the endpoint stalled.
pub const ST_PIPE: u8 = 2;
/// Reply status: no device (unplugged, or the handle is stale).
pub const ST_NO_DEVICE: u8 = 3;
/// Reply status: another connection holds interface 0.
pub const ST_BUSY: u8 = 4;
/// Reply status: another error; the data is a UTF-8 message.
pub const ST_OTHER: u8 = 5;

/// The largest message body either side accepts (a 64 KiB control transfer
/// and its header fit).
pub const MAX_BODY: usize = 70_000;

/// The reply status of an error kind.
pub fn status(e: LinkError) -> u8 {
    match e {
        LinkError::Timeout => ST_TIMEOUT,
        LinkError::Pipe => ST_PIPE,
        LinkError::NoDevice => ST_NO_DEVICE,
        LinkError::Busy => ST_BUSY,
        LinkError::Mismatch | LinkError::Other => ST_OTHER,
    }
}

/// The error kind of a reply status other than [`ST_OK`] (the inverse of
/// [`status`]; an unknown status is [`LinkError::Other`]).
pub(crate) fn error(status: u8) -> LinkError {
    match status {
        ST_TIMEOUT => LinkError::Timeout,
        ST_PIPE => LinkError::Pipe,
        ST_NO_DEVICE => LinkError::NoDevice,
        ST_BUSY => LinkError::Busy,
        _ => LinkError::Other,
    }
}

/// Appends one message to `out`: the length prefix, then the body that
/// `body` appends (one of the `encode_*` functions below, which write bodies
/// only). Allocates only if `out` must grow.
pub(crate) fn message(out: &mut Vec<u8>, body: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    body(out);
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

fn put_setup(out: &mut Vec<u8>, s: &Setup) {
    out.extend_from_slice(&[s.request_type, s.request]);
    out.extend_from_slice(&s.value.to_le_bytes());
    out.extend_from_slice(&s.index.to_le_bytes());
}

/// Why a call cannot be encoded: a control transfer or `bulk_in` length
/// above 65535, or a transfer too large for [`MAX_BODY`].
pub(crate) fn check_request(call: &Call<'_>) -> Result<(), &'static str> {
    match *call {
        Call::ControlOut { data, .. } if data.len() > usize::from(u16::MAX) => {
            Err("control_out of more than 65535 bytes")
        }
        Call::BulkOut { data, .. } if data.len() > MAX_BODY - 16 => {
            Err("bulk_out larger than the virtual robot takes (70000 - 16 bytes)")
        }
        _ => Ok(()),
    }
}

/// Appends the request body of `call` (the link wraps it with its
/// length prefix to send it). A `bulk_in` buffer longer than 65535 asks for 65535 bytes.
pub fn encode_request(call: &Call<'_>, b: &mut Vec<u8>) {
    match *call {
        Call::Open { vendor, product } => {
            b.push(OP_OPEN);
            b.extend_from_slice(&vendor.to_le_bytes());
            b.extend_from_slice(&product.to_le_bytes());
        }
        Call::SetConfiguration(n) => b.extend_from_slice(&[OP_SET_CONFIGURATION, n]),
        Call::ClaimInterface(n) => b.extend_from_slice(&[OP_CLAIM_INTERFACE, n]),
        Call::Close => b.push(OP_CLOSE),
        Call::ControlOut { setup, data } => {
            b.push(OP_CONTROL_OUT);
            put_setup(b, &setup);
            b.extend_from_slice(data);
        }
        Call::ControlIn { setup, length } => {
            b.push(OP_CONTROL_IN);
            put_setup(b, &setup);
            b.extend_from_slice(&length.to_le_bytes());
        }
        Call::BulkOut { endpoint, data } => {
            b.extend_from_slice(&[OP_BULK_OUT, endpoint]);
            b.extend_from_slice(data);
        }
        Call::BulkIn { endpoint, length } => {
            let length = u16::try_from(length).unwrap_or(u16::MAX);
            b.extend_from_slice(&[OP_BULK_IN, endpoint]);
            b.extend_from_slice(&length.to_le_bytes());
        }
    }
}

#[cfg(test)]
fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

#[cfg(test)]
fn setup_at(b: &[u8]) -> Option<Setup> {
    Some(Setup {
        request_type: *b.get(1)?,
        request: *b.get(2)?,
        value: u16_at(b, 3)?,
        index: u16_at(b, 5)?,
    })
}

/// The call of a request body (the message without its length prefix), or
/// why it is malformed (an empty body, an unknown op, missing fields).
#[cfg(test)]
pub(crate) fn decode_request(body: &[u8]) -> Result<Call<'_>, String> {
    let short = |what: &str| format!("{what}: request of {} bytes is too short", body.len());
    let Some(&op) = body.first() else {
        return Err("empty request".into());
    };
    Ok(match op {
        OP_OPEN => Call::Open {
            vendor: u16_at(body, 1).ok_or_else(|| short("open"))?,
            product: u16_at(body, 3).ok_or_else(|| short("open"))?,
        },
        OP_SET_CONFIGURATION => {
            Call::SetConfiguration(*body.get(1).ok_or_else(|| short("set_configuration"))?)
        }
        OP_CLAIM_INTERFACE => {
            Call::ClaimInterface(*body.get(1).ok_or_else(|| short("claim_interface"))?)
        }
        OP_CLOSE => Call::Close,
        OP_CONTROL_OUT => Call::ControlOut {
            setup: setup_at(body).ok_or_else(|| short("control_out"))?,
            data: &body[7..],
        },
        OP_CONTROL_IN => Call::ControlIn {
            setup: setup_at(body).ok_or_else(|| short("control_in"))?,
            length: u16_at(body, 7).ok_or_else(|| short("control_in"))?,
        },
        OP_BULK_OUT => Call::BulkOut {
            endpoint: *body.get(1).ok_or_else(|| short("bulk_out"))?,
            data: &body[2..],
        },
        OP_BULK_IN => Call::BulkIn {
            endpoint: *body.get(1).ok_or_else(|| short("bulk_in"))?,
            length: u16_at(body, 2).ok_or_else(|| short("bulk_in"))?.into(),
        },
        other => return Err(format!("unknown op {other} (expected 1..=8)")),
    })
}

/// Appends the reply body of a successful `call`: `n` is the length
/// transferred by an OUT call; `answer` the bytes read by an IN call.
#[cfg(test)]
pub(crate) fn encode_ok(call: &Call<'_>, n: usize, answer: &[u8], b: &mut Vec<u8>) {
    b.push(ST_OK);
    match call {
        Call::ControlOut { .. } | Call::BulkOut { .. } => {
            b.extend_from_slice(&(n as u32).to_le_bytes())
        }
        Call::ControlIn { .. } | Call::BulkIn { .. } => b.extend_from_slice(answer),
        _ => {}
    }
}

/// Appends the reply body of a failed call (`text` is sent for
/// [`LinkError::Other`] and [`LinkError::Mismatch`] only: status 5).
#[cfg(test)]
pub(crate) fn encode_error(e: LinkError, text: &str, b: &mut Vec<u8>) {
    b.push(status(e));
    if status(e) == ST_OTHER {
        b.extend_from_slice(text.as_bytes());
    }
}

/// The result of `call` from its reply body (the message without its
/// length prefix): the length an OUT call sent, or the bytes an IN call read
/// copied into the start of `answer` (at least [`Call::answer_len`] bytes
/// long).
///
/// # Errors
///
/// The kind and the message: the error status the simulator sent, with
/// its text (empty for most kinds); or [`LinkError::Other`] and why for a
/// malformed reply (empty, a transfer's length missing, more bytes than
/// asked) or an `answer` too short.
pub fn decode_reply<'r>(
    call: &Call<'_>,
    reply: &'r [u8],
    answer: &mut [u8],
) -> Result<usize, (LinkError, &'r str)> {
    let Some((&st, data)) = reply.split_first() else {
        return Err((LinkError::Other, "empty reply"));
    };
    if st != ST_OK {
        return Err((error(st), core::str::from_utf8(data).unwrap_or("")));
    }
    match call {
        Call::ControlOut { .. } | Call::BulkOut { .. } => match data {
            [a, b, c, d, ..] => Ok(u32::from_le_bytes([*a, *b, *c, *d]) as usize),
            _ => Err((LinkError::Other, "short reply to a transfer")),
        },
        Call::ControlIn { .. } | Call::BulkIn { .. } => {
            let buf = answer_buf(call, answer).map_err(|e| (e, "answer buffer too short"))?;
            let Some(to) = buf.get_mut(..data.len()) else {
                return Err((
                    LinkError::Other,
                    "more bytes returned than asked (overflow)",
                ));
            };
            to.copy_from_slice(data);
            Ok(data.len())
        }
        _ => Ok(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_map_to_link_errors_both_ways() {
        for e in [
            LinkError::Timeout,
            LinkError::Pipe,
            LinkError::NoDevice,
            LinkError::Busy,
            LinkError::Other,
        ] {
            assert_eq!(error(status(e)), e);
        }
        assert_eq!(error(77), LinkError::Other);
    }

    #[test]
    fn every_call_decodes_as_encoded() {
        let setup = Setup {
            request_type: 0xc0,
            request: 0x10,
            value: 0x0102,
            index: 0x0304,
        };
        let calls = [
            Call::Open {
                vendor: 0xffff,
                product: 6,
            },
            Call::SetConfiguration(1),
            Call::ClaimInterface(0),
            Call::Close,
            Call::ControlOut {
                setup,
                data: &[1, 2, 3],
            },
            Call::ControlIn { setup, length: 300 },
            Call::BulkOut {
                endpoint: 2,
                data: &[0xa5; 9],
            },
            Call::BulkIn {
                endpoint: 0x81,
                length: 1024,
            },
        ];
        let mut out = Vec::new();
        for c in calls {
            out.clear();
            message(&mut out, |b| encode_request(&c, b));
            let len = u32::from_le_bytes([out[0], out[1], out[2], out[3]]) as usize;
            assert_eq!(len, out.len() - 4);
            assert_eq!(decode_request(&out[4..]), Ok(c));
        }
        assert!(decode_request(&[]).is_err());
        assert!(decode_request(&[9]).is_err());
        assert!(decode_request(&[OP_OPEN, 1]).is_err());
    }

    #[test]
    fn replies_decode_as_encoded() {
        let bulk_in = Call::BulkIn {
            endpoint: 0x81,
            length: 4,
        };
        let mut out = Vec::new();
        encode_ok(&bulk_in, 0, &[9, 8], &mut out);
        let mut buf = [0u8; 4];
        assert_eq!(decode_reply(&bulk_in, &out, &mut buf), Ok(2));
        assert_eq!(buf[..2], [9, 8]);
        out.clear();
        encode_ok(&bulk_in, 0, &[1; 5], &mut out);
        assert_eq!(
            decode_reply(&bulk_in, &out, &mut buf).map_err(|e| e.0),
            Err(LinkError::Other)
        );
        out.clear();
        encode_error(LinkError::Other, "why", &mut out);
        assert_eq!(
            decode_reply(&bulk_in, &out, &mut buf),
            Err((LinkError::Other, "why"))
        );
        out.clear();
        encode_error(LinkError::Busy, "ignored", &mut out);
        assert_eq!(out, [ST_BUSY]);
        let write = Call::BulkOut {
            endpoint: 2,
            data: &[1, 2, 3],
        };
        out.clear();
        encode_ok(&write, 3, &[], &mut out);
        assert_eq!(decode_reply(&write, &out, &mut []), Ok(3));
    }
}
