//! Shared by the usbmon tests: a tiny usbmon capture writer (pcap and
//! pcapng, both byte orders, both usbmon headers) and a HAL-like session.
#![allow(dead_code)]

/// One usbmon event to write.
#[derive(Debug, Clone)]
pub struct Ev {
    pub id: u64,
    pub kind: u8,
    pub xfer: u8,
    pub ep: u8,
    pub bus: u16,
    pub dev: u8,
    pub setup: Option<[u8; 8]>,
    pub ts_us: i64,
    pub status: i32,
    pub length: u32,
    pub data: Vec<u8>,
}

/// A tiny usbmon/pcap writer.
pub struct Cap {
    pub little: bool,
    pub mmapped: bool,
}

impl Cap {
    pub fn put16(&self, o: &mut Vec<u8>, v: u16) {
        o.extend_from_slice(&if self.little {
            v.to_le_bytes()
        } else {
            v.to_be_bytes()
        });
    }
    pub fn put32(&self, o: &mut Vec<u8>, v: u32) {
        o.extend_from_slice(&if self.little {
            v.to_le_bytes()
        } else {
            v.to_be_bytes()
        });
    }
    pub fn put64(&self, o: &mut Vec<u8>, v: u64) {
        o.extend_from_slice(&if self.little {
            v.to_le_bytes()
        } else {
            v.to_be_bytes()
        });
    }
    pub fn linktype(&self) -> u32 {
        if self.mmapped {
            220
        } else {
            189
        }
    }

    /// The usbmon header and data of one event.
    pub fn packet(&self, e: &Ev) -> Vec<u8> {
        let mut p = Vec::new();
        self.put64(&mut p, e.id);
        p.extend_from_slice(&[e.kind, e.xfer, e.ep, e.dev]);
        self.put16(&mut p, e.bus);
        p.push(if e.setup.is_some() { 0 } else { b'-' });
        p.push(if e.data.is_empty() {
            if e.ep & 0x80 != 0 {
                b'<'
            } else {
                b'>'
            }
        } else {
            0
        });
        self.put64(&mut p, (e.ts_us / 1_000_000) as u64);
        self.put32(&mut p, (e.ts_us % 1_000_000) as u32);
        self.put32(&mut p, e.status as u32);
        self.put32(&mut p, e.length);
        self.put32(&mut p, e.data.len() as u32);
        p.extend_from_slice(&e.setup.unwrap_or([0; 8]));
        if self.mmapped {
            p.extend_from_slice(&[0; 16]);
        }
        p.extend_from_slice(&e.data);
        p
    }

    pub fn pcap(&self, events: &[Ev]) -> Vec<u8> {
        let mut o = Vec::new();
        self.put32(&mut o, 0xa1b2c3d4);
        self.put16(&mut o, 2);
        self.put16(&mut o, 4);
        self.put32(&mut o, 0);
        self.put32(&mut o, 0);
        self.put32(&mut o, 262144);
        self.put32(&mut o, self.linktype());
        for e in events {
            let p = self.packet(e);
            self.put32(&mut o, (e.ts_us / 1_000_000) as u32);
            self.put32(&mut o, (e.ts_us % 1_000_000) as u32);
            self.put32(&mut o, p.len() as u32);
            self.put32(&mut o, p.len() as u32);
            o.extend_from_slice(&p);
        }
        o
    }

    pub fn block(&self, o: &mut Vec<u8>, kind: u32, body: &[u8]) {
        let mut body = body.to_vec();
        while body.len() & 3 != 0 {
            body.push(0);
        }
        let len = body.len() as u32 + 12;
        self.put32(o, kind);
        self.put32(o, len);
        o.extend_from_slice(&body);
        self.put32(o, len);
    }

    pub fn pcapng(&self, events: &[Ev]) -> Vec<u8> {
        let mut o = Vec::new();
        let mut shb = Vec::new();
        self.put32(&mut shb, 0x1a2b3c4d);
        self.put16(&mut shb, 1);
        self.put16(&mut shb, 0);
        self.put64(&mut shb, u64::MAX);
        self.block(&mut o, 0x0a0d0d0a, &shb);
        let mut idb = Vec::new();
        self.put16(&mut idb, self.linktype() as u16);
        self.put16(&mut idb, 0);
        self.put32(&mut idb, 0);
        self.block(&mut o, 1, &idb);
        for e in events {
            let p = self.packet(e);
            let mut epb = Vec::new();
            self.put32(&mut epb, 0);
            self.put32(&mut epb, 0);
            self.put32(&mut epb, e.ts_us as u32);
            self.put32(&mut epb, p.len() as u32);
            self.put32(&mut epb, p.len() as u32);
            epb.extend_from_slice(&p);
            self.block(&mut o, 6, &epb);
        }
        o
    }
}

/// Builds the events of a short HAL-like session on bus 1 device 5, with a
/// mouse (bus 1 device 2) in between.
pub struct Session {
    pub events: Vec<Ev>,
    pub next_id: u64,
    pub t_us: i64,
    /// The chest board's device number for the transfers that follow.
    pub dev: u8,
}

pub const BUS: u16 = 1;
pub const DEV: u8 = 5;

impl Session {
    pub fn new() -> Self {
        Session {
            events: Vec::new(),
            next_id: 0xffff_8800_0000_0000,
            t_us: 1_700_000_000_000_000,
            dev: DEV,
        }
    }

    pub fn pair(&mut self, mut s: Ev, mut c: Ev) {
        self.next_id += 0x100;
        s.id = self.next_id;
        c.id = self.next_id;
        s.ts_us = self.t_us;
        c.ts_us = self.t_us + 150;
        self.t_us += 1000;
        self.events.push(s);
        self.events.push(c);
    }

    pub fn ev(kind: u8, xfer: u8, ep: u8, dev: u8) -> Ev {
        Ev {
            id: 0,
            kind,
            xfer,
            ep,
            bus: BUS,
            dev,
            setup: None,
            ts_us: 0,
            status: 0,
            length: 0,
            data: vec![],
        }
    }

    pub fn control(&mut self, rt: u8, rq: u8, value: u16, index: u16, out: &[u8], answer: &[u8]) {
        let wlength = if rt & 0x80 != 0 {
            answer.len()
        } else {
            out.len()
        } as u16;
        let [v0, v1] = value.to_le_bytes();
        let [i0, i1] = index.to_le_bytes();
        let [l0, l1] = wlength.to_le_bytes();
        let ep = rt & 0x80;
        let mut s = Self::ev(b'S', 2, ep, self.dev);
        s.setup = Some([rt, rq, v0, v1, i0, i1, l0, l1]);
        s.status = -115;
        s.length = u32::from(wlength);
        s.data = out.to_vec();
        let mut c = Self::ev(b'C', 2, ep, self.dev);
        c.length = if ep != 0 {
            answer.len() as u32
        } else {
            out.len() as u32
        };
        c.data = answer.to_vec();
        self.pair(s, c);
    }

    pub fn bulk_out(&mut self, data: &[u8]) {
        self.bulk_out_status(data, 0);
    }

    /// A frame whose write completes with `status` (0: written).
    pub fn bulk_out_status(&mut self, data: &[u8], status: i32) {
        let mut s = Self::ev(b'S', 3, 0x02, self.dev);
        s.status = -115;
        s.length = data.len() as u32;
        s.data = data.to_vec();
        let mut c = Self::ev(b'C', 3, 0x02, self.dev);
        c.length = if status == 0 { data.len() as u32 } else { 0 };
        c.status = status;
        self.pair(s, c);
    }

    /// The kernel enumerating a device as `dev` (SET_ADDRESS to device 0,
    /// then GET_DESCRIPTOR of the device descriptor with `ids`); the
    /// transfers that follow go to `dev`.
    pub fn enumerate(&mut self, dev: u8, ids: (u16, u16)) {
        self.dev = 0;
        self.control(0x00, 0x05, u16::from(dev), 0, &[], &[]);
        self.dev = dev;
        let mut descriptor = [0u8; 18];
        descriptor[0] = 18;
        descriptor[1] = 1;
        descriptor[8..10].copy_from_slice(&ids.0.to_le_bytes());
        descriptor[10..12].copy_from_slice(&ids.1.to_le_bytes());
        self.control(0x80, 0x06, 0x0100, 0, &[], &descriptor);
    }

    /// Each call of a recording's items as the transfer HAL makes, at the
    /// recording's cycle times (from `t0_us`), transfers 1 ms apart.
    pub fn calls_of(&mut self, items: &[nao_wire::recording::Item], t0_us: i64) {
        use nao_wire::recording::{Item, Recorded};
        self.t_us = t0_us;
        for item in items {
            match item {
                Item::Cycle { t_ms, .. } => self.t_us = t0_us + *t_ms as i64 * 1000,
                Item::Call(c) => match c {
                    Recorded::SetConfiguration(n) => {
                        self.control(0x00, 0x09, u16::from(*n), 0, &[], &[])
                    }
                    Recorded::ControlOut { setup: u, data } => {
                        self.control(u.request_type, u.request, u.value, u.index, data, &[])
                    }
                    Recorded::ControlIn {
                        setup: u,
                        length,
                        answer,
                    } => {
                        assert_eq!(
                            usize::from(*length),
                            answer.len(),
                            "the test writes wLength as the answer length"
                        );
                        self.control(u.request_type, u.request, u.value, u.index, &[], answer)
                    }
                    Recorded::BulkOut { data, .. } => self.bulk_out(data),
                    Recorded::BulkIn { answer, .. } => self.bulk_in(match answer {
                        Ok(a) => Ok(a.as_slice()),
                        Err(_) => Err(-110),
                    }),
                    // Open, claim and close leave no transfer.
                    Recorded::Open { .. } | Recorded::ClaimInterface(_) | Recorded::Close => {}
                },
                _ => {}
            }
        }
    }

    pub fn bulk_in(&mut self, answer: Result<&[u8], i32>) {
        let mut s = Self::ev(b'S', 3, 0x81, self.dev);
        s.status = -115;
        s.length = 512;
        let mut c = Self::ev(b'C', 3, 0x81, self.dev);
        match answer {
            Ok(a) => {
                c.length = a.len() as u32;
                c.data = a.to_vec();
            }
            Err(status) => c.status = status,
        }
        self.pair(s, c);
    }

    pub fn mouse(&mut self) {
        let mut s = Self::ev(b'S', 1, 0x81, 2);
        s.length = 4;
        let mut c = Self::ev(b'C', 1, 0x81, 2);
        c.length = 4;
        c.data = vec![0, 1, 2, 3];
        self.pair(s, c);
    }

    /// The whole session.
    pub fn hal() -> Self {
        let mut s = Session::new();
        s.control(0x80, 0x06, 0x0100, 0, &[], &[0x12; 18]); // kernel: GET_DESCRIPTOR
        s.mouse();
        s.control(0x00, 0x09, 1, 0, &[], &[]); // SET_CONFIGURATION 1
        s.control(0x40, 0x01, 0, 0, &[], &[]); // START
        s.control(0xc0, 0x02, 0, 0, &[], &[2, 0x11, 7, 0]); // VERSION
        s.bulk_out(&[0xa5, 0, 0, 1]);
        s.bulk_in(Ok(&[0x5a, 0, 0, 1]));
        s.mouse();
        s.bulk_out(&[0xa5, 1, 0, 1]);
        s.bulk_in(Ok(&[0x5a, 1, 0, 1]));
        s.t_us += 10_000;
        s.control(0x40, 0x05, 0x24, 0, &[], &[]); // CLIENT_STATE, cycle 0
        s.bulk_out(&[0xa5, 2, 0, 1]);
        s.t_us += 10_000;
        s.bulk_in(Err(-104)); // cycle 1: a read that timed out (libusb unlinks)
        s.bulk_out(&[0xa5, 3, 0, 1]);
        s.mouse();
        s.t_us += 10_000;
        s.bulk_in(Ok(&[0x5a, 3, 0, 1])); // cycle 2
        s.bulk_out(&[0xa5, 4, 0, 1]);
        s
    }
}
