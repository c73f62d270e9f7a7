//! The recording link: forwards every call and writes its line; inputs where
//! they stand; write errors never change what the link returns.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use nao_wire::link::Call;
use nao_wire::recording::record_link::RecordingLink;
use nao_wire::recording::{parse, Item, Recorded};
use nao_wire::{Command, Link, LinkError};

#[global_allocator]
static GLOBAL: nao_kit::alloc::CountingAlloc = nao_kit::alloc::CountingAlloc;

/// A link that answers bulk reads from a list of results, and fails the
/// calls named in `fail`.
#[derive(Default)]
struct FakeLink {
    answers: Vec<Result<Vec<u8>, LinkError>>,
    next: usize,
    fail_bulk_out: bool,
    fail_open: bool,
    /// Bulk writes made (shared: the test reads it while the recording
    /// link owns the fake).
    writes: Arc<AtomicUsize>,
}

impl Link for FakeLink {
    fn call(&mut self, call: Call<'_>, answer: &mut [u8]) -> Result<usize, LinkError> {
        match call {
            Call::Open { .. } if self.fail_open => Err(LinkError::NoDevice),
            Call::ControlIn { .. } => {
                let n = answer.len().min(4);
                answer[..n].copy_from_slice(&[2, 0x11, 7, 0][..n]);
                Ok(n)
            }
            Call::BulkOut { data, .. } => {
                self.writes.fetch_add(1, Ordering::Relaxed);
                if self.fail_bulk_out {
                    Err(LinkError::Timeout)
                } else {
                    Ok(data.len())
                }
            }
            Call::BulkIn { .. } => {
                let a = &self.answers[self.next % self.answers.len()];
                self.next += 1;
                match a {
                    Ok(bytes) => {
                        answer[..bytes.len()].copy_from_slice(bytes);
                        Ok(bytes.len())
                    }
                    Err(e) => Err(*e),
                }
            }
            Call::ControlOut { data, .. } => Ok(data.len()),
            _ => Ok(0),
        }
    }

    fn detail(&self) -> Option<&str> {
        Some("babble")
    }
}

fn calls(text: &str) -> Vec<Item> {
    parse(text)
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
        .into_iter()
        .map(|l| l.item)
        .collect()
}

#[test]
fn recording_link_writes_every_call_and_input_in_order() {
    let fake = FakeLink {
        answers: vec![Ok(vec![0x5a, 1]), Err(LinkError::Timeout)],
        ..FakeLink::default()
    };
    let mut link = RecordingLink::new(fake, Vec::new()).unwrap();
    link.accepted(&[10, 11]).unwrap();
    link.switch(true).unwrap();
    link.open(0xffff, 0x0006).unwrap();
    link.set_configuration(1).unwrap();
    link.control_out(0x40, 0x01, 0, 0, &[]).unwrap();
    link.claim_interface(0).unwrap();
    let mut four = [0u8; 4];
    assert_eq!(link.control_in(0xc0, 0x02, 0, 0, &mut four).unwrap(), 4);
    link.cycle(0, 300).unwrap();
    link.command(&Command {
        sonar_mode: 0x0c,
        ..Command::default()
    })
    .unwrap();
    link.bulk_out(0x02, &[0xa5, 0x00]).unwrap();
    link.cycle(1, 312).unwrap();
    link.trip(deathswitch::Reason::Udp).unwrap();
    let mut buf = [0u8; 512];
    assert_eq!(link.bulk_in(0x81, &mut buf).unwrap(), 2);
    assert_eq!(link.bulk_in(0x81, &mut buf), Err(LinkError::Timeout));
    link.rearm().unwrap();
    link.silence().unwrap();
    link.close();
    let (_, out) = link.finish().unwrap();
    let text = String::from_utf8(out).unwrap();
    let items = calls(&text);
    assert_eq!(items[0], Item::Accepted(vec![10, 11]));
    assert_eq!(items[1], Item::SwitchArmed(true));
    let line = |i: usize| items[i].to_string();
    assert_eq!(line(2), "open ffff:0006");
    assert_eq!(line(6), "control_in c0 02 0000 0000 4 02110700");
    assert_eq!(items[7], Item::Cycle { k: 0, t_ms: 300 });
    assert!(matches!(&items[8], Item::Command(c) if c.sonar_mode == 0x0c));
    assert_eq!(line(9), "bulk_out 02 a500");
    assert_eq!(items[11], Item::Trip(Some(deathswitch::Reason::Udp)));
    assert_eq!(line(12), "bulk_in 81 512 5a01");
    assert_eq!(line(13), "bulk_in 81 512 !timeout");
    assert_eq!(
        &items[14..],
        &[Item::Rearm, Item::Silence, Item::Call(Recorded::Close)]
    );
}

#[test]
fn recording_link_returns_what_the_inner_link_returns() {
    let fake = FakeLink {
        answers: vec![Err(LinkError::Other)],
        fail_bulk_out: true,
        fail_open: true,
        ..FakeLink::default()
    };
    let mut link = RecordingLink::new(fake, Vec::new()).unwrap();
    assert_eq!(link.open(0xffff, 6), Err(LinkError::NoDevice));
    assert_eq!(link.bulk_out(0x02, &[1, 2]), Err(LinkError::Timeout));
    let mut buf = [0u8; 512];
    assert_eq!(link.bulk_in(0x81, &mut buf), Err(LinkError::Other));
    let (_, out) = link.finish().unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("# failed: open ffff:0006: "), "{text}");
    assert!(
        text.contains("# failed: bulk_out 02 0102: USB transfer timed out"),
        "{text}"
    );
    assert!(
        text.contains("# bulk_in 81 512 failed: USB call failed babble; written as !pipe"),
        "{text}"
    );
    // The unrepresentable read error becomes !pipe, after a comment.
    let calls: Vec<String> = calls(&text).iter().map(Item::to_string).collect();
    assert_eq!(calls, ["bulk_in 81 512 !pipe"]);
}

/// A sink that fails every write.
struct Broken;
impl io::Write for Broken {
    fn write(&mut self, _: &[u8]) -> io::Result<usize> {
        Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"))
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn recording_link_write_errors_never_change_the_calls() {
    let writer = nao_wire::recording::RecordingWriter::new(Vec::new()).unwrap();
    drop(writer);
    // The header write itself fails on a broken sink.
    assert!(RecordingLink::new(FakeLink::default(), Broken).is_err());
    // A sink that breaks later: the calls still go through, the error is kept.
    struct Later(usize);
    impl io::Write for Later {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            if self.0 == 0 {
                return Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"));
            }
            self.0 -= 1;
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let writes = Arc::new(AtomicUsize::new(0));
    let fake = FakeLink {
        answers: vec![Ok(vec![1])],
        writes: Arc::clone(&writes),
        ..FakeLink::default()
    };
    let mut link = RecordingLink::new(fake, Later(1)).unwrap();
    for _ in 0..3 {
        assert_eq!(link.bulk_out(0x02, &[1]), Ok(1));
    }
    assert_eq!(writes.load(Ordering::Relaxed), 3);
    // The next input says so with the kept error's kind; `finish` returns
    // the kept error itself.
    assert_eq!(
        link.cycle(0, 0).map_err(|e| e.kind()),
        Err(io::ErrorKind::StorageFull)
    );
    assert_eq!(
        link.finish().map(|_| ()).map_err(|e| e.kind()),
        Err(io::ErrorKind::StorageFull)
    );
}

#[test]
fn recording_link_allocates_nothing_per_cycle() {
    let fake = FakeLink {
        answers: vec![Ok(vec![0x5a; 269]), Err(LinkError::Timeout)],
        ..FakeLink::default()
    };
    let mut link = RecordingLink::new(fake, io::sink()).unwrap();
    let frame = [0xa5u8; 300];
    let mut buf = [0u8; 512];
    let command = Command::default();
    let cycle = |link: &mut RecordingLink<FakeLink, io::Sink>, k: u64, buf: &mut [u8; 512]| {
        link.cycle(k, k * 12).unwrap();
        link.command(&command).unwrap();
        let _ = link.bulk_in(0x81, buf);
        link.bulk_out(0x02, &frame).unwrap();
    };
    for k in 0..10 {
        cycle(&mut link, k, &mut buf);
    }
    let n = nao_kit::alloc::allocations(|| {
        for k in 10..1010 {
            cycle(&mut link, k, &mut buf);
        }
    });
    assert_eq!(n, 0, "allocations in 1,000 recorded cycles");
}
