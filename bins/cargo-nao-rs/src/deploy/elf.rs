//! Is a robot binary static? Read from its ELF program headers on the
//! laptop, before anything is copied: no `PT_INTERP` (a loader) and no
//! `DT_NEEDED` (a shared library). The NAO's own system has a 32-bit
//! userland, so a dynamically linked x86_64 program finds no loader there
//! (docs/robot-system.md). Pure: bytes in, verdict out, no panic on any
//! bytes.

/// Why a file is not a static x86_64 program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotStatic {
    /// Not an ELF file at all, or cut short.
    NotElf,
    /// An ELF file, but not 64-bit little-endian x86_64.
    WrongMachine,
    /// Names a loader (the `PT_INTERP` path).
    Interpreter(String),
    /// Needs shared libraries (their count; the names are in the string
    /// table, which a verdict does not need).
    Needed(usize),
}

impl std::fmt::Display for NotStatic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotStatic::NotElf => write!(f, "is not an ELF program (or is cut short)"),
            NotStatic::WrongMachine => write!(f, "is not a 64-bit x86_64 program"),
            NotStatic::Interpreter(p) => {
                write!(f, "is dynamically linked: it names the loader {p}")
            }
            NotStatic::Needed(n) => {
                write!(f, "is dynamically linked: it needs {n} shared libraries")
            }
        }
    }
}

const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const EM_X86_64: u16 = 62;

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}
fn usize_at(b: &[u8], at: usize) -> Option<usize> {
    usize::try_from(u64_at(b, at)?).ok()
}

/// `Ok(())` for a static x86_64 ELF program (static-pie included: it has a
/// dynamic section, but no `DT_NEEDED` and no interpreter).
pub fn check_static(b: &[u8]) -> Result<(), NotStatic> {
    if b.get(..4) != Some(b"\x7fELF") {
        return Err(NotStatic::NotElf);
    }
    // EI_CLASS 2 = 64-bit, EI_DATA 1 = little-endian.
    if b.get(4) != Some(&2) || b.get(5) != Some(&1) {
        return Err(NotStatic::WrongMachine);
    }
    if u16_at(b, 18).ok_or(NotStatic::NotElf)? != EM_X86_64 {
        return Err(NotStatic::WrongMachine);
    }
    let phoff = usize_at(b, 32).ok_or(NotStatic::NotElf)?;
    let phentsize = usize::from(u16_at(b, 54).ok_or(NotStatic::NotElf)?);
    let phnum = usize::from(u16_at(b, 56).ok_or(NotStatic::NotElf)?);
    if phentsize < 56 {
        return Err(NotStatic::NotElf);
    }
    let mut needed = 0;
    for i in 0..phnum {
        let ph = i
            .checked_mul(phentsize)
            .and_then(|o| o.checked_add(phoff))
            .ok_or(NotStatic::NotElf)?;
        let p_type = u32_at(b, ph).ok_or(NotStatic::NotElf)?;
        let offset = usize_at(b, ph + 8).ok_or(NotStatic::NotElf)?;
        let filesz = usize_at(b, ph + 32).ok_or(NotStatic::NotElf)?;
        let seg = offset
            .checked_add(filesz)
            .and_then(|end| b.get(offset..end))
            .ok_or(NotStatic::NotElf)?;
        match p_type {
            PT_INTERP => {
                let path = seg.split(|&c| c == 0).next().unwrap_or_default();
                return Err(NotStatic::Interpreter(
                    String::from_utf8_lossy(path).into_owned(),
                ));
            }
            PT_DYNAMIC => {
                for e in seg.chunks_exact(16) {
                    let tag = u64_at(e, 0).ok_or(NotStatic::NotElf)?;
                    if tag == DT_NULL {
                        break;
                    }
                    if tag == DT_NEEDED {
                        needed += 1;
                    }
                }
            }
            _ => {}
        }
    }
    if needed > 0 {
        return Err(NotStatic::Needed(needed));
    }
    Ok(())
}

#[cfg(test)]
/// A minimal x86_64 ELF file with the given program headers
/// (`(p_type, contents)`), for the tests.
pub fn tiny_elf(headers: &[(u32, &[u8])]) -> Vec<u8> {
    let phoff = 64usize;
    let data_at = phoff + 56 * headers.len();
    let mut b = vec![0u8; data_at];
    b[..4].copy_from_slice(b"\x7fELF");
    b[4] = 2;
    b[5] = 1;
    b[6] = 1;
    b[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    b[18..20].copy_from_slice(&EM_X86_64.to_le_bytes());
    b[32..40].copy_from_slice(&(phoff as u64).to_le_bytes());
    b[52..54].copy_from_slice(&64u16.to_le_bytes());
    b[54..56].copy_from_slice(&56u16.to_le_bytes());
    b[56..58].copy_from_slice(&(headers.len() as u16).to_le_bytes());
    let mut at = data_at;
    for (i, (t, data)) in headers.iter().enumerate() {
        let ph = phoff + 56 * i;
        b[ph..ph + 4].copy_from_slice(&t.to_le_bytes());
        b[ph + 8..ph + 16].copy_from_slice(&(at as u64).to_le_bytes());
        b[ph + 32..ph + 40].copy_from_slice(&(data.len() as u64).to_le_bytes());
        at += data.len();
    }
    for (_, data) in headers {
        b.extend_from_slice(data);
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dyn_entries(tags: &[u64]) -> Vec<u8> {
        let mut v = Vec::new();
        for t in tags {
            v.extend_from_slice(&t.to_le_bytes());
            v.extend_from_slice(&0u64.to_le_bytes());
        }
        v
    }

    #[test]
    fn elf_static_and_static_pie_pass() {
        assert_eq!(check_static(&tiny_elf(&[(1, b"code")])), Ok(()));
        // static-pie: a dynamic section without DT_NEEDED.
        let d = dyn_entries(&[0x6fff_fffb, 0]);
        assert_eq!(
            check_static(&tiny_elf(&[(1, b"x"), (PT_DYNAMIC, &d)])),
            Ok(())
        );
    }

    #[test]
    fn elf_dynamic_is_refused() {
        let e = check_static(&tiny_elf(&[(PT_INTERP, b"/lib64/ld-linux-x86-64.so.2\0")]));
        assert_eq!(
            e,
            Err(NotStatic::Interpreter("/lib64/ld-linux-x86-64.so.2".into()))
        );
        let d = dyn_entries(&[DT_NEEDED, DT_NEEDED, 0, DT_NEEDED]);
        assert_eq!(
            check_static(&tiny_elf(&[(PT_DYNAMIC, &d)])),
            Err(NotStatic::Needed(2))
        );
    }

    #[test]
    fn elf_garbage_never_panics() {
        assert_eq!(check_static(b""), Err(NotStatic::NotElf));
        assert_eq!(check_static(b"#!/bin/sh\n"), Err(NotStatic::NotElf));
        let good = tiny_elf(&[(1, b"code"), (PT_INTERP, b"/x\0")]);
        for cut in 0..good.len() {
            let _ = check_static(&good[..cut]);
        }
        let mut wrong = good.clone();
        wrong[18] = 3; // EM_386
        assert_eq!(check_static(&wrong), Err(NotStatic::WrongMachine));
        let mut huge = good;
        huge[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(check_static(&huge), Err(NotStatic::NotElf));
    }
}
