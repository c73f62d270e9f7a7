//! naoctl under compound faults: `status` is read-only and says
//! what is wrong; `stop` lands on any file; path damage is named with the
//! errno and the fix; `trip_count` is shown.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use deathswitch::{Page, Switch, LEN, MAGIC};
use serde_json::Value;

mod common;
use common::{env, naoctl, text};

fn status_json(page: &Path) -> (Value, Option<i32>) {
    let out = naoctl(page, &["status", "--json"]);
    let t = String::from_utf8_lossy(&out.stdout).into_owned();
    let v = serde_json::from_str(&t).unwrap_or(Value::Null);
    (v, out.status.code())
}

/// The file's bytes, modification and change times: what a write changes.
fn fingerprint(p: &Path) -> (Vec<u8>, i64, i64, i64, i64) {
    let m = std::fs::metadata(p).unwrap();
    (
        std::fs::read(p).unwrap(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
    )
}

fn page_bytes(version: u32) -> [u8; LEN] {
    let mut b = [0u8; LEN];
    b[..8].copy_from_slice(&MAGIC.to_le_bytes());
    b[8..12].copy_from_slice(&version.to_le_bytes());
    b[12..16].copy_from_slice(&1u32.to_le_bytes()); // tripped boot
    b[112..120].copy_from_slice(&1u64.to_le_bytes()); // a nonce (never 0)
    b[LEN - 8..].copy_from_slice(&MAGIC.to_le_bytes());
    b
}

#[test]
fn naoctl_status_is_read_only_and_says_a_file_that_is_not_a_page_is_not_one() {
    let e = env();
    let mut short = page_bytes(deathswitch::VERSION).to_vec();
    short.truncate(8);
    let mut bad_code = page_bytes(deathswitch::VERSION);
    bad_code[12..16].copy_from_slice(&999u32.to_le_bytes());
    let cases: [(&str, Vec<u8>, &str); 7] = [
        (
            "text",
            b"hello, I am not a page\n".to_vec(),
            "not a death switch page",
        ),
        ("empty", Vec::new(), "not a death switch page"),
        ("short", short, "not a death switch page"),
        ("zeroed", vec![0u8; LEN], "not a death switch page"),
        ("version 9", page_bytes(9).to_vec(), "version 9"),
        ("version 2", page_bytes(2).to_vec(), "version 2"),
        (
            "unknown reason",
            bad_code.to_vec(),
            "unknown reason code 999",
        ),
    ];
    for (name, bytes, says) in cases {
        std::fs::write(&e.page, &bytes).unwrap();
        let before = fingerprint(&e.page);
        for args in [&["status"][..], &["status", "--json"][..]] {
            let out = naoctl(&e.page, args);
            let t = text(&out);
            assert_eq!(out.status.code(), Some(1), "{name} {args:?}: {t}");
            assert!(t.contains(says), "{name} {args:?}: {says:?} missing in {t}");
            assert!(t.contains(&e.page.display().to_string()), "{name}: {t}");
            assert!(t.contains("naoctl stop"), "{name}: the fix: {t}");
        }
        let (v, _) = status_json(&e.page);
        assert_eq!(v["state"], "tripped", "{name}");
        assert_eq!(v["reason"], "page-lost", "{name}");
        assert_eq!(
            fingerprint(&e.page),
            before,
            "{name}: status changed the file"
        );
    }
}

#[test]
fn naoctl_status_never_writes_to_a_page() {
    let e = env();
    // A missing page: said so, nothing created.
    let out = naoctl(&e.page, &["status"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text(&out).contains("no death switch page"),
        "{}",
        text(&out)
    );
    assert!(!e.page.exists(), "status created the page");
    // A sound, armed, beating page: read, unchanged.
    let page = Page::open(&e.page).unwrap();
    page.rearm();
    page.register(4242);
    page.write_heartbeat(5, deathswitch::monotonic_ns(), true);
    drop(page);
    let before = fingerprint(&e.page);
    let (v, code) = status_json(&e.page);
    assert_eq!(code, Some(0));
    assert_eq!(v["state"], "armed");
    assert_eq!(v["integrity"], "intact");
    assert!(naoctl(&e.page, &["status"]).status.success());
    assert_eq!(fingerprint(&e.page), before);
    // A read-only file: status still reads it.
    let mut perms = std::fs::metadata(&e.page).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o444);
    std::fs::set_permissions(&e.page, perms).unwrap();
    assert_eq!(status_json(&e.page).1, Some(0));
}

#[test]
fn naoctl_stop_makes_any_file_at_the_page_path_a_tripped_page() {
    let e = env();
    let mut garbage_with_magic = page_bytes(deathswitch::VERSION);
    garbage_with_magic[16..120].fill(0xa5);
    let cases: [(&str, Vec<u8>); 5] = [
        ("text", b"hello, I am not a page\n".to_vec()),
        ("empty", Vec::new()),
        ("zeroed", vec![0u8; LEN]),
        ("version 9", page_bytes(9).to_vec()),
        ("garbage keeping the magic", garbage_with_magic.to_vec()),
    ];
    for (name, bytes) in cases {
        std::fs::write(&e.page, &bytes).unwrap();
        let out = naoctl(&e.page, &["stop"]);
        assert!(out.status.success(), "{name}: {}", text(&out));
        let (v, code) = status_json(&e.page);
        assert_eq!(code, Some(0), "{name}: {v}");
        assert_eq!(v["state"], "tripped", "{name}");
        assert_eq!(v["integrity"], "intact", "{name}");
        assert_eq!(std::fs::metadata(&e.page).unwrap().len(), LEN as u64);
    }
}

#[test]
fn naoctl_status_json_and_human_show_trip_count() {
    let e = env();
    drop(Page::open(&e.page).unwrap());
    assert_eq!(status_json(&e.page).0["trip_count"], 1);
    assert!(naoctl(&e.page, &["rearm", "--yes"]).status.success());
    assert!(naoctl(&e.page, &["stop"]).status.success());
    assert!(naoctl(&e.page, &["rearm", "--yes"]).status.success());
    assert!(naoctl(&e.page, &["stop"]).status.success());
    assert_eq!(status_json(&e.page).0["trip_count"], 3);
    let t = text(&naoctl(&e.page, &["status"]));
    assert!(t.contains("trip count: 3"), "{t}");
}

/// `status`, `stop` and `rearm` on a broken path: each exits 1 naming the
/// path, the errno's text and the fix, and none hangs or panics.
fn all_commands_name(path: &Path, errno_text: &str, fix: &str) {
    for args in [
        &["status"][..],
        &["status", "--json"][..],
        &["stop"][..],
        &["rearm", "--yes"][..],
    ] {
        let out = naoctl(path, args);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {t}");
        assert!(!t.contains("panicked"), "{args:?}: {t}");
        for want in [&path.display().to_string()[..], errno_text, fix] {
            assert!(t.contains(want), "{args:?}: {want:?} missing in {t}");
        }
    }
}

#[test]
fn naoctl_names_a_symlink_loop_at_the_page_path_and_the_fix() {
    let e = env();
    std::os::unix::fs::symlink(&e.page, &e.page).unwrap();
    all_commands_name(
        &e.page,
        "Too many levels of symbolic links",
        "symbolic link loop",
    );
}

#[test]
fn naoctl_names_a_page_directory_replaced_by_a_file_and_the_fix() {
    let e = env();
    let dir = e.dir.path().join("run");
    std::fs::write(&dir, b"I was a directory").unwrap();
    let page = dir.join("deathswitch");
    all_commands_name(&page, "Not a directory", "recreate the directory");
}
