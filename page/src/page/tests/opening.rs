//! The opening rules of the page (docs/page.md): what [`Page::open`]
//! finds at the path and what it leaves there.

use std::os::unix::fs::PermissionsExt;

use super::tripped;
use crate::page::{mapping::Make, Opening};
use crate::{Page, PageError, Reason, Switch, LEN, MAGIC};

/// `err`'s message names the page's `path` and says each of `words` (the
/// fix).
fn assert_says(err: &PageError, path: &std::path::Path, words: &[&str]) {
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    for w in words {
        assert!(msg.contains(w), "{w:?} missing: {msg}");
    }
}

fn len(p: &std::path::Path) -> u64 {
    std::fs::metadata(p).unwrap().len()
}

#[test]
fn a_created_page_starts_tripped_with_reason_boot() {
    let (_dir, path) = testkit::page_path();
    let (page, opening) = Page::opened(&path, Make::Open).unwrap();
    assert_eq!(opening, Opening::Created);
    assert!(tripped(&page));
    assert_eq!(page.reason(), Some(Reason::Boot));
    let s = page.snapshot();
    assert!(s.magic_ok);
    assert!(!s.armed);
    assert_eq!(s.last_cycle, None);
    assert_eq!(s.driver_pid, None);
    assert_eq!(len(&path), LEN as u64);
}

#[test]
fn a_new_page_is_created_with_mode_0660() {
    let (_dir, path) = testkit::page_path();
    let _page = Page::open(&path).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o660);
}

#[test]
fn an_existing_page_is_opened_without_o_creat_and_kept_as_it_is() {
    let (_dir, path) = testkit::page_path();
    {
        let page = Page::open(&path).unwrap();
        page.rearm();
        page.register(1234);
    }
    // A mode the creation path would have changed: opening an existing page
    // neither re-creates it nor touches its mode or its state.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let (page, opening) = Page::opened(&path, Make::Open).unwrap();
    assert_eq!(opening, Opening::Existing);
    assert!(!tripped(&page));
    assert_eq!(page.snapshot().driver_pid, Some(1234));
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o640);
}

#[test]
fn an_existing_page_without_the_magic_is_made_whole_and_tripped_page_lost() {
    let (_dir, path) = testkit::page_path();
    std::fs::write(&path, [0u8; LEN]).unwrap();
    let (page, opening) = Page::opened(&path, Make::Open).unwrap();
    assert_eq!(opening, Opening::MadeWhole);
    assert_eq!(page.reason(), Some(Reason::PageLost));
    assert!(page.snapshot().magic_ok);
    assert_eq!(len(&path), LEN as u64);
}

#[test]
fn an_empty_file_is_made_whole_and_tripped_page_lost() {
    let (_dir, path) = testkit::page_path();
    std::fs::write(&path, []).unwrap();
    let page = Page::open(&path).unwrap();
    assert_eq!(page.reason(), Some(Reason::PageLost));
    assert_eq!(len(&path), LEN as u64);
}

#[test]
fn a_short_page_is_made_whole_and_tripped_page_lost_even_with_a_surviving_magic() {
    let (_dir, path) = testkit::page_path();
    {
        let page = Page::open(&path).unwrap();
        page.rearm();
    }
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(64).unwrap();
    drop(f);
    let head = std::fs::read(&path).unwrap();
    assert_eq!(u64::from_le_bytes(head[..8].try_into().unwrap()), MAGIC);
    let page = Page::open(&path).unwrap();
    assert!(tripped(&page));
    assert_eq!(page.reason(), Some(Reason::PageLost));
    assert_eq!(len(&path), LEN as u64);
}

#[test]
fn a_page_of_another_layout_version_is_refused_with_the_fix() {
    let (_dir, path) = testkit::page_path();
    let mut bytes = [0u8; LEN];
    bytes[..8].copy_from_slice(&MAGIC.to_le_bytes());
    bytes[8..12].copy_from_slice(&7u32.to_le_bytes());
    bytes[LEN - 8..].copy_from_slice(&MAGIC.to_le_bytes());
    std::fs::write(&path, bytes).unwrap();
    let err = Page::open(&path).unwrap_err();
    assert!(
        matches!(err, PageError::Version { found: 7, .. }),
        "{err:?}"
    );
    assert_says(&err, &path, &["version 7", "rm "]);
    // The file is left as it was: it belongs to the other version.
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

/// A page of layout 3 (128 bytes, the tail magic at 120: before the
/// re-arm's and the runtime's nonces) is another version: `Page::open`
/// refuses it untouched, `inspect` and a running holder's check count it as
/// damage (the holder repairs its own page to this layout, tripped
/// `page-lost`), and `naoctl stop`'s open makes it a tripped page.
#[test]
fn a_page_of_layout_3_is_another_version_and_counts_as_damage() {
    let (_dir, path) = testkit::page_path();
    let mut v3 = [0u8; 128];
    v3[..8].copy_from_slice(&MAGIC.to_le_bytes());
    v3[8..12].copy_from_slice(&3u32.to_le_bytes());
    v3[72..80].copy_from_slice(&4u64.to_le_bytes());
    v3[112..120].copy_from_slice(&9u64.to_le_bytes());
    v3[120..128].copy_from_slice(&MAGIC.to_le_bytes());
    std::fs::write(&path, v3).unwrap();
    let err = Page::open(&path).unwrap_err();
    assert!(
        matches!(err, PageError::Version { found: 3, .. }),
        "{err:?}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), v3, "left as it was");
    let i = crate::inspect(&path).unwrap();
    assert!(i.damage.is_some() && !i.snapshot.armed, "{i:?}");
    assert_eq!(i.snapshot.wake_generation(), None);
    // A holder of this layout whose page becomes a layout-3 page.
    std::fs::remove_file(&path).unwrap();
    let page = Page::open(&path).unwrap();
    page.rearm();
    std::fs::write(&path, v3).unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(page.check(), crate::Integrity::Intact);
    assert_eq!(page.reason(), Some(Reason::PageLost));
    assert_eq!(page.snapshot().version, crate::VERSION);
    drop(page);
    std::fs::write(&path, v3).unwrap();
    let stop = Page::open_to_trip(&path).unwrap();
    assert_eq!(stop.reason(), Some(Reason::PageLost));
}

#[test]
fn a_missing_directory_names_the_tmpfiles_entry() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-dir").join("deathswitch");
    let err = Page::open(&path).unwrap_err();
    assert!(matches!(err, PageError::MissingDir { .. }), "{err:?}");
    assert_says(&err, &path, &["tmpfiles.d", "2770"]);
}

#[test]
fn permission_denied_names_the_group_hal_and_the_mode() {
    let (_dir, path) = testkit::page_path();
    drop(Page::open(&path).unwrap());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
    // Root ignores file modes: then only the message itself is checked.
    let err = match Page::open(&path) {
        Err(e) => e,
        Ok(_) => PageError::Permission { path: path.clone() },
    };
    assert!(matches!(err, PageError::Permission { .. }), "{err:?}");
    assert_says(&err, &path, &["`hal`", "0660"]);
}

#[test]
fn two_opens_of_one_path_share_the_page() {
    let (_dir, path) = testkit::page_path();
    let a = Page::open(&path).unwrap();
    let b = Page::open(&path).unwrap();
    a.rearm();
    assert!(!tripped(&b));
    assert!(b.trip(Reason::Naoctl));
    assert!(!a.trip(Reason::Udp));
    assert_eq!(a.reason(), Some(Reason::Naoctl));
    b.write_heartbeat(5, 99, true);
    assert_eq!(a.snapshot().last_cycle, Some(5));
}

#[test]
fn default_path_is_the_env_var_or_run_nao_rs() {
    // Read only: the variable may be set by whoever runs the tests.
    let p = crate::default_path();
    match std::env::var_os("NAO_RS_DEATHSWITCH") {
        Some(v) if !v.is_empty() => assert_eq!(p, std::path::PathBuf::from(v)),
        _ => assert_eq!(p, std::path::PathBuf::from("/run/nao-rs/deathswitch")),
    }
}
