//! The UDP stop (`docs/page.md`, "Fixed points"): a datagram to port [`PORT`] whose
//! payload starts with the 11 ASCII bytes [`PREFIX`] trips the switch
//! (reason `udp`); anything after the prefix is ignored, anything else is
//! ignored, there is never a reply. One place for the constants: the
//! listener ([`udp`], the runtime's and the guard's) and `cargo nao-rs
//! stop` use these.

/// The stop datagram's prefix: 11 ASCII bytes.
pub const PREFIX: &[u8; 11] = b"NAO-RS STOP";

/// The UDP stop port.
pub const PORT: u16 = 7701;

#[cfg(not(loom))]
pub mod udp;

/// True when `payload` is a stop datagram (starts with [`PREFIX`]).
pub(crate) fn is_stop(payload: &[u8]) -> bool {
    payload.starts_with(PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_stop_prefix_is_the_11_bytes_nao_rs_stop() {
        assert_eq!(PREFIX.len(), 11);
        assert!(is_stop(b"NAO-RS STOP"));
        assert!(is_stop(b"NAO-RS STOP\n"));
        assert!(is_stop(b"NAO-RS STOP\n please"));
        assert!(is_stop(b"NAO-RS STOP please, anything after is ignored"));
        assert!(!is_stop(b"NAO-RS STO"));
        assert!(!is_stop(b"nao-rs stop"));
        assert!(!is_stop(b" NAO-RS STOP"));
        assert!(!is_stop(b""));
    }
}
