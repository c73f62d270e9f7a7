//! `nao_kit::elf` on real programs: this test program (dynamic), the
//! development build of nao-rs (dynamic), the static robot build where it
//! was built (`target/robot-bin/` of scripts/robot-build.sh, or
//! `cargo robot-build`'s own folder) and Debian's
//! static-pie `ldconfig` where it is installed.

use std::path::{Path, PathBuf};

use nao_kit::elf;

fn read(path: &Path) -> Option<elf::Linking> {
    let bytes = std::fs::read(path).ok()?;
    Some(elf::read(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn elf_reader_sees_this_test_program_as_dynamic() {
    let l = read(Path::new("/proc/self/exe")).expect("/proc/self/exe");
    assert!(!l.is_static(), "{l}");
    assert!(l.class64 && l.machine_name() == "x86_64", "{l}");
    assert!(
        l.interpreter
            .as_deref()
            .is_some_and(|i| i.contains("ld-linux")),
        "{l}"
    );
    assert!(l.needed.iter().any(|n| n.starts_with("libc.so")), "{l}");
}

#[test]
fn elf_reader_on_the_development_and_robot_builds() {
    let mut seen = 0;
    for dir in ["target/release", "target/debug"] {
        let p = workspace().join(dir).join("nao-rs");
        if let Some(l) = read(&p) {
            assert!(!l.is_static(), "{}: {l}", p.display());
            seen += 1;
        }
    }
    for dir in ["target/robot-bin", "target/x86_64-unknown-linux-gnu/robot"] {
        for name in ["nao-rs", "nao-rs-guard", "naoctl", "nao-rs-beacon"] {
            let p = workspace().join(dir).join(name);
            if let Some(l) = read(&p) {
                assert!(l.is_static() && l.dynamic_section, "{}: {l}", p.display());
                seen += 1;
            }
        }
    }
    if let Some(l) = read(Path::new("/usr/sbin/ldconfig")) {
        assert!(l.is_static(), "/usr/sbin/ldconfig: {l}");
        seen += 1;
    }
    eprintln!("elf_programs: {seen} real programs read");
}
