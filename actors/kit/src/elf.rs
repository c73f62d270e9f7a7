//! Is a program static? A small, bounded reader of an ELF file's program
//! headers and dynamic section: the loader it names (`PT_INTERP`) and the
//! shared libraries it needs (`DT_NEEDED`). A robot program must have
//! neither: the NAO's own system has a 32-bit userland, so a dynamically
//! linked x86_64 program finds no loader there (docs/robot-system.md).
//! A static-pie program (the robot build) has a dynamic section (for its
//! own relocations) but no `DT_NEEDED` and no interpreter.
//!
//! [`read`] is pure (bytes in, [`Linking`] out): 32- and 64-bit, either
//! byte order; every offset is checked, every loop bounded, and it never
//! panics, whatever the bytes (a property test feeds it garbage and
//! mangled real programs). `nao-rs doctor` reads the installed programs
//! with it.

use std::fmt;

/// What an ELF file says about how it is linked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Linking {
    /// `ELFCLASS64` (else 32-bit).
    pub class64: bool,
    /// `e_machine` (62: x86_64, 3: i386).
    pub machine: u16,
    /// The loader `PT_INTERP` names (`/lib64/ld-linux-x86-64.so.2`).
    pub interpreter: Option<String>,
    /// The `DT_NEEDED` libraries; a name that cannot be read is
    /// `"?"` (the count still tells).
    pub needed: Vec<String>,
    /// A `PT_DYNAMIC` segment exists (a static-pie program has one too).
    pub dynamic_section: bool,
}

impl Linking {
    /// No loader and no shared library: the program starts on any x86_64
    /// Linux whatever its userland.
    pub fn is_static(&self) -> bool {
        self.interpreter.is_none() && self.needed.is_empty()
    }

    /// The machine's name (`x86_64`, `i386`, else `machine N`).
    pub fn machine_name(&self) -> String {
        match self.machine {
            EM_X86_64 => "x86_64".into(),
            EM_386 => "i386".into(),
            EM_AARCH64 => "aarch64".into(),
            m => format!("machine {m}"),
        }
    }
}

impl fmt::Display for Linking {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bits = if self.class64 { 64 } else { 32 };
        write!(f, "{bits}-bit {}", self.machine_name())?;
        if self.is_static() {
            if self.dynamic_section {
                return write!(f, ", static-pie (no loader, no shared library)");
            }
            return write!(f, ", static (no loader, no shared library)");
        }
        write!(f, ", dynamically linked")?;
        if let Some(i) = &self.interpreter {
            write!(f, ": loader {i}")?;
        }
        if !self.needed.is_empty() {
            write!(f, "; needs {}", self.needed.join(", "))?;
        }
        Ok(())
    }
}

/// Why bytes are not a readable ELF file (one kind per way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElfError {
    /// No `\x7fELF` magic: not an ELF file.
    NotElf,
    /// Neither 32- nor 64-bit, or neither byte order.
    BadIdent,
    /// A header or table lies beyond the end of the file (cut short).
    Truncated,
    /// A table's entry size is smaller than its entries.
    BadEntrySize,
}

impl fmt::Display for ElfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ElfError::NotElf => "is not an ELF program (no \\x7fELF magic)",
            ElfError::BadIdent => "is an ELF file of neither 32 nor 64 bits or neither byte order",
            ElfError::Truncated => "is an ELF file cut short (a table lies beyond its end)",
            ElfError::BadEntrySize => "is an ELF file with a malformed program header table",
        })
    }
}

impl std::error::Error for ElfError {}

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;
const EM_386: u16 = 3;
const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;

/// At most this many dynamic entries are read (a real program has < 100).
const MAX_DYNAMIC: usize = 1 << 16;
/// At most this many library names are kept.
const MAX_NEEDED: usize = 1024;
/// A name longer than this is cut.
const MAX_NAME: usize = 4096;

/// The byte reader: width and order from the ELF identification.
#[derive(Clone, Copy)]
struct Reader<'a> {
    b: &'a [u8],
    wide: bool,
    big: bool,
}

impl Reader<'_> {
    fn bytes<const N: usize>(&self, at: usize) -> Option<[u8; N]> {
        self.b.get(at..at.checked_add(N)?)?.try_into().ok()
    }
    fn u16(&self, at: usize) -> Option<u16> {
        let a = self.bytes::<2>(at)?;
        Some(if self.big {
            u16::from_be_bytes(a)
        } else {
            u16::from_le_bytes(a)
        })
    }
    fn u32(&self, at: usize) -> Option<u32> {
        let a = self.bytes::<4>(at)?;
        Some(if self.big {
            u32::from_be_bytes(a)
        } else {
            u32::from_le_bytes(a)
        })
    }
    fn u64(&self, at: usize) -> Option<u64> {
        let a = self.bytes::<8>(at)?;
        Some(if self.big {
            u64::from_be_bytes(a)
        } else {
            u64::from_le_bytes(a)
        })
    }
    /// A word: 8 bytes in a 64-bit file, 4 in a 32-bit one.
    fn word(&self, at: usize) -> Option<u64> {
        if self.wide {
            self.u64(at)
        } else {
            self.u32(at).map(u64::from)
        }
    }
    /// A NUL-terminated string at `at` (cut at [`MAX_NAME`]; lossy UTF-8).
    fn cstr(&self, at: usize) -> Option<String> {
        let rest = self.b.get(at..)?;
        let rest = &rest[..rest.len().min(MAX_NAME)];
        let end = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
        Some(String::from_utf8_lossy(&rest[..end]).into_owned())
    }
}

/// One program header's fields that matter here.
#[derive(Clone, Copy)]
struct Segment {
    kind: u32,
    offset: u64,
    vaddr: u64,
    filesz: u64,
}

fn to_usize(v: u64) -> Option<usize> {
    usize::try_from(v).ok()
}

/// Reads how the ELF file `bytes` is linked. Never panics.
pub fn read(bytes: &[u8]) -> Result<Linking, ElfError> {
    if bytes.get(..4) != Some(b"\x7fELF") {
        return Err(ElfError::NotElf);
    }
    let wide = match bytes.get(4) {
        Some(1) => false,
        Some(2) => true,
        _ => return Err(ElfError::BadIdent),
    };
    let big = match bytes.get(5) {
        Some(1) => false,
        Some(2) => true,
        _ => return Err(ElfError::BadIdent),
    };
    let r = Reader {
        b: bytes,
        wide,
        big,
    };
    let t = ElfError::Truncated;
    let machine = r.u16(18).ok_or(t)?;
    // e_phoff, e_phentsize, e_phnum by class.
    let (phoff, phentsize, phnum) = if wide {
        (
            r.u64(32).ok_or(t)?,
            r.u16(54).ok_or(t)?,
            r.u16(56).ok_or(t)?,
        )
    } else {
        (
            u64::from(r.u32(28).ok_or(t)?),
            r.u16(42).ok_or(t)?,
            r.u16(44).ok_or(t)?,
        )
    };
    let min_entry = if wide { 56 } else { 32 };
    if phnum > 0 && usize::from(phentsize) < min_entry {
        return Err(ElfError::BadEntrySize);
    }
    let phoff = to_usize(phoff).ok_or(t)?;
    // At most 65535 headers (e_phnum is 16 bits): the loop is bounded.
    let mut segments = Vec::with_capacity(usize::from(phnum).min(64));
    for i in 0..usize::from(phnum) {
        let at = i
            .checked_mul(usize::from(phentsize))
            .and_then(|o| o.checked_add(phoff))
            .ok_or(t)?;
        let kind = r.u32(at).ok_or(t)?;
        let seg = if wide {
            Segment {
                kind,
                offset: r.u64(at + 8).ok_or(t)?,
                vaddr: r.u64(at + 16).ok_or(t)?,
                filesz: r.u64(at + 32).ok_or(t)?,
            }
        } else {
            Segment {
                kind,
                offset: u64::from(r.u32(at + 4).ok_or(t)?),
                vaddr: u64::from(r.u32(at + 8).ok_or(t)?),
                filesz: u64::from(r.u32(at + 16).ok_or(t)?),
            }
        };
        segments.push(seg);
    }
    let interpreter = segments.iter().find(|s| s.kind == PT_INTERP).map(|s| {
        to_usize(s.offset)
            .and_then(|o| r.cstr(o))
            .unwrap_or_else(|| "?".into())
    });
    let dynamic = segments.iter().find(|s| s.kind == PT_DYNAMIC);
    let needed = match dynamic {
        Some(d) => needed_names(r, d, &segments),
        None => Vec::new(),
    };
    Ok(Linking {
        class64: wide,
        machine,
        interpreter,
        needed,
        dynamic_section: dynamic.is_some(),
    })
}

/// The `DT_NEEDED` names of the dynamic segment `d` (names through
/// `DT_STRTAB`, an address mapped to the file by the `PT_LOAD` segments).
/// A dynamic segment that runs past the file's end is read as far as it
/// goes.
fn needed_names(r: Reader<'_>, d: &Segment, segments: &[Segment]) -> Vec<String> {
    let entry = if r.wide { 16 } else { 8 };
    let Some(start) = to_usize(d.offset) else {
        return Vec::new();
    };
    let count = to_usize(d.filesz).unwrap_or(usize::MAX) / entry;
    let mut strtab = None;
    let mut offsets = Vec::new();
    for i in 0..count.min(MAX_DYNAMIC) {
        let Some(at) = i.checked_mul(entry).and_then(|o| o.checked_add(start)) else {
            break;
        };
        let (Some(tag), Some(val)) = (r.word(at), r.word(at + entry / 2)) else {
            break;
        };
        match tag {
            DT_NULL => break,
            DT_NEEDED if offsets.len() < MAX_NEEDED => offsets.push(val),
            DT_STRTAB => strtab = Some(val),
            _ => {}
        }
    }
    let strtab_file = strtab.and_then(|addr| file_offset(addr, segments));
    offsets
        .into_iter()
        .map(|o| {
            strtab_file
                .and_then(|s| s.checked_add(o))
                .and_then(to_usize)
                .and_then(|at| r.cstr(at))
                .unwrap_or_else(|| "?".into())
        })
        .collect()
}

/// The file offset of the address `addr`, through the `PT_LOAD` segment
/// that maps it.
fn file_offset(addr: u64, segments: &[Segment]) -> Option<u64> {
    segments.iter().find_map(|s| {
        let inside = s.kind == PT_LOAD
            && addr >= s.vaddr
            && addr.checked_sub(s.vaddr).is_some_and(|d| d < s.filesz);
        inside
            .then(|| s.offset.checked_add(addr - s.vaddr))
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 little-endian x86_64 file: header, program headers,
    /// an interpreter string, a dynamic section and a string table.
    fn elf64(interp: Option<&str>, needed: &[&str], dynamic: bool) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[6] = 1;
        b[18..20].copy_from_slice(&EM_X86_64.to_le_bytes());
        let phnum = 1 + usize::from(interp.is_some()) + usize::from(dynamic);
        b[32..40].copy_from_slice(&64u64.to_le_bytes());
        b[54..56].copy_from_slice(&56u16.to_le_bytes());
        b[56..58].copy_from_slice(&(phnum as u16).to_le_bytes());
        let data = 64 + 56 * phnum;
        // The string table: "\0" then the names.
        let mut strtab = vec![0u8];
        let mut name_at = Vec::new();
        for n in needed {
            name_at.push(strtab.len() as u64);
            strtab.extend_from_slice(n.as_bytes());
            strtab.push(0);
        }
        let interp_at = data;
        let interp_bytes = interp
            .map(|i| [i.as_bytes(), b"\0"].concat())
            .unwrap_or_default();
        let strtab_at = interp_at + interp_bytes.len();
        let dyn_at = strtab_at + strtab.len();
        let mut dyn_bytes = Vec::new();
        for o in &name_at {
            dyn_bytes.extend_from_slice(&DT_NEEDED.to_le_bytes());
            dyn_bytes.extend_from_slice(&o.to_le_bytes());
        }
        // STRTAB as an address: vaddr = offset + 0x400000.
        dyn_bytes.extend_from_slice(&DT_STRTAB.to_le_bytes());
        dyn_bytes.extend_from_slice(&(strtab_at as u64 + 0x40_0000).to_le_bytes());
        dyn_bytes.extend_from_slice(&[0u8; 16]);
        let total = dyn_at + dyn_bytes.len();
        let ph = |b: &mut Vec<u8>, kind: u32, off: usize, len: usize| {
            let mut h = [0u8; 56];
            h[..4].copy_from_slice(&kind.to_le_bytes());
            h[8..16].copy_from_slice(&(off as u64).to_le_bytes());
            h[16..24].copy_from_slice(&(off as u64 + 0x40_0000).to_le_bytes());
            h[32..40].copy_from_slice(&(len as u64).to_le_bytes());
            b.extend_from_slice(&h);
        };
        ph(&mut b, PT_LOAD, 0, total);
        if interp.is_some() {
            ph(&mut b, PT_INTERP, interp_at, interp_bytes.len());
        }
        if dynamic {
            ph(&mut b, PT_DYNAMIC, dyn_at, dyn_bytes.len());
        }
        b.extend_from_slice(&interp_bytes);
        b.extend_from_slice(&strtab);
        b.extend_from_slice(&dyn_bytes);
        b
    }

    #[test]
    fn elf_reader_tells_static_from_dynamic() {
        let dynamic = read(&elf64(
            Some("/lib64/ld-linux-x86-64.so.2"),
            &["libc.so.6", "libgcc_s.so.1"],
            true,
        ))
        .unwrap();
        assert!(!dynamic.is_static());
        assert_eq!(
            dynamic.interpreter.as_deref(),
            Some("/lib64/ld-linux-x86-64.so.2")
        );
        assert_eq!(dynamic.needed, ["libc.so.6", "libgcc_s.so.1"]);
        assert_eq!(
            dynamic.to_string(),
            "64-bit x86_64, dynamically linked: loader /lib64/ld-linux-x86-64.so.2; needs \
             libc.so.6, libgcc_s.so.1"
        );
        let pie = read(&elf64(None, &[], true)).unwrap();
        assert!(pie.is_static() && pie.dynamic_section);
        assert_eq!(
            pie.to_string(),
            "64-bit x86_64, static-pie (no loader, no shared library)"
        );
        let plain = read(&elf64(None, &[], false)).unwrap();
        assert!(plain.is_static() && !plain.dynamic_section);
        // A library without a loader is still not static.
        assert!(!read(&elf64(None, &["libc.so.6"], true))
            .unwrap()
            .is_static());
    }

    /// A 32-bit i386 program naming the loader of a 32-bit userland (NAO
    /// OS's own programs): header 52 bytes, one 32-byte program header.
    #[test]
    fn elf_reader_reads_a_32_bit_program() {
        let interp = b"/lib/ld-linux.so.2\0";
        let mut b = vec![0u8; 52];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 1;
        b[5] = 1;
        b[18..20].copy_from_slice(&EM_386.to_le_bytes());
        b[28..32].copy_from_slice(&52u32.to_le_bytes());
        b[42..44].copy_from_slice(&32u16.to_le_bytes());
        b[44..46].copy_from_slice(&1u16.to_le_bytes());
        let mut ph = [0u8; 32];
        ph[..4].copy_from_slice(&PT_INTERP.to_le_bytes());
        ph[4..8].copy_from_slice(&84u32.to_le_bytes());
        ph[16..20].copy_from_slice(&(interp.len() as u32).to_le_bytes());
        b.extend_from_slice(&ph);
        b.extend_from_slice(interp);
        let l = read(&b).unwrap();
        assert!(!l.class64 && !l.is_static() && !l.dynamic_section);
        assert_eq!(
            l.to_string(),
            "32-bit i386, dynamically linked: loader /lib/ld-linux.so.2"
        );
    }

    #[test]
    fn elf_reader_refuses_what_is_not_elf() {
        assert_eq!(read(b""), Err(ElfError::NotElf));
        assert_eq!(read(b"#!/bin/sh\n"), Err(ElfError::NotElf));
        assert_eq!(read(b"\x7fELF"), Err(ElfError::BadIdent));
        assert_eq!(read(b"\x7fELF\x02\x01"), Err(ElfError::Truncated));
        let mut cut = elf64(Some("/lib/ld-linux.so.2"), &["libc.so.6"], true);
        cut.truncate(100);
        assert_eq!(read(&cut), Err(ElfError::Truncated));
        let mut small = elf64(None, &[], true);
        small[54] = 8;
        assert_eq!(read(&small), Err(ElfError::BadEntrySize));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// Any bytes: no panic, and whatever is read is bounded.
        #[test]
        fn elf_reader_never_panics_on_any_bytes(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)) {
            let _ = read(&bytes);
            let mut elf = b"\x7fELF".to_vec();
            elf.extend_from_slice(&bytes);
            if let Ok(l) = read(&elf) {
                proptest::prop_assert!(l.needed.len() <= MAX_NEEDED);
            }
        }

        /// A real-shaped file with bytes overwritten anywhere: no panic.
        #[test]
        fn elf_reader_never_panics_on_a_mangled_program(
            edits in proptest::collection::vec((0usize..400, proptest::prelude::any::<u8>()), 1..12),
            cut in 0usize..400,
        ) {
            let mut b = elf64(Some("/lib64/ld-linux-x86-64.so.2"), &["libc.so.6", "libm.so.6"], true);
            for (at, v) in edits {
                if let Some(x) = b.get_mut(at) {
                    *x = v;
                }
            }
            let _ = read(&b);
            b.truncate(cut);
            let _ = read(&b);
        }
    }
}
