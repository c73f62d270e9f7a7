//! `Tail` as the bench reads the trace while the simulator writes it: only
//! complete lines, however the writes split them.

use std::io::Write;

use nao_rs_sim::Tail;

#[test]
fn tail_returns_only_complete_lines_as_the_file_grows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let line = "{\"t_ns\":1,\"peer_pid\":1,\"seq\":1,\"max_stiffness\":0,\"max_stiffness_all\":0,\"max_stiffness_accepted\":0,\"all_off\":true,\"stiffness_slots\":0}\n";
    std::fs::write(&path, format!("{line}{}", &line[..10])).unwrap();
    let mut tail = Tail::new(&path);
    assert_eq!(tail.poll().unwrap().len(), 1);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(&line.as_bytes()[10..]).unwrap();
    f.write_all(line.as_bytes()).unwrap();
    assert_eq!(tail.poll().unwrap().len(), 2);
}
