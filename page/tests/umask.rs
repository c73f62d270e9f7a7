//! The creation mode under a strict umask, in its own test binary because
//! the umask is process-wide.

use std::os::unix::fs::PermissionsExt;

#[test]
fn a_new_page_is_created_with_mode_0660_whatever_the_umask() {
    let (_dir, path) = testkit::page_path();
    // SAFETY: umask only changes this process's file creation mask; this
    // binary has no other test creating files concurrently.
    let old = unsafe { libc::umask(0o077) };
    let page = deathswitch::Page::open(&path);
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    let page = page.unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o660);
    assert_eq!(page.reason(), Some(deathswitch::Reason::Boot));
}
