//! Lower-case hex, the one encoder of the house: sha256 sums (the
//! verification mark, deploy's file sums, the capture's), HMAC tags and key
//! ids (the beacon).

/// `bytes` as lower-case hex, two digits a byte.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    s
}

/// 64 hex digits (either case) to 32 bytes; `None` for any other text.
pub fn unhex32(s: &str) -> Option<[u8; 32]> {
    let b = s.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in b.chunks_exact(2).enumerate() {
        let hi = (pair[0] as char).to_digit(16)?;
        let lo = (pair[1] as char).to_digit(16)?;
        out[i] = (hi * 16 + lo) as u8;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_32_bytes_and_refuses_other_text() {
        let bytes: [u8; 32] = core::array::from_fn(|i| (i * 37 + 5) as u8);
        let text = hex(&bytes);
        assert_eq!(text.len(), 64);
        assert_eq!(&text[..6], "052a4f");
        assert_eq!(unhex32(&text), Some(bytes));
        assert_eq!(unhex32(&text.to_uppercase()), Some(bytes));
        assert_eq!(unhex32(&text[..62]), None);
        assert_eq!(unhex32(&format!("{}zz", &text[..62])), None);
        assert_eq!(unhex32(&format!("{}é", &text[..62])), None);
        assert_eq!(hex(&[]), "");
    }
}
