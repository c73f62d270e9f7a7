//! Quoting for the generated POSIX sh scripts.

/// `s` as one single-quoted sh word.
pub fn sq(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sq_quotes_every_character() {
        assert_eq!(sq(""), "''");
        assert_eq!(sq("/etc/a b"), "'/etc/a b'");
        assert_eq!(sq("it's $x"), r"'it'\''s $x'");
    }
}
