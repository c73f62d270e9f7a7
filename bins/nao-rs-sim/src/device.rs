//! The virtual chest board as a USB device: the calls of the socket's wire
//! encoding (see `nao_wire::link::sim`), the exclusive claim of interface 0,
//! plugging, the transport faults (drop, corrupt, stall) and the pending
//! answer. Pure: time is passed in, no I/O; the server owns the sockets.
//!
//! Kernel rules it follows (Linux usbfs):
//! - one connection holds interface 0 at a time; another's claim, its
//!   `set_configuration` and its bulk transfers fail with busy;
//! - a bulk transfer on an unclaimed interface claims it implicitly;
//! - control transfers to the device need no claim;
//! - closing the connection (also by the holder's death) releases the claim.
//!
//! Unplug makes every open connection stale: all its calls fail with no
//! device, also after replug, until it opens again.

use nao_wire::link::codec;
use nao_wire::link::{Call, LinkError, PRODUCT_ID, VENDOR_ID};
use nao_wire::protocol::frame::{Frame, MAX_FRAME_LEN};
use nao_wire::protocol::tables::{
    prefs_chunk_len, VendorRequest, CONFIGURATION, EP_IN, EP_OUT, INTERFACE, PREFS_LEN, SYNC_FRAME,
};

use crate::body::{BodyConfig, JointFault, Posture, StiffnessSummary, VirtualBody};
use crate::ctl::CtlCommand;

/// How long a `bulk_in` with no answer pending waits before it times out
/// (the protocol's bulk timeout), ms.
pub const BULK_TIMEOUT_MS: u64 = 20;

/// The chest board's firmware version (VERSION answer).
pub const CHEST_VERSION: [u8; 4] = [2, 17, 7, 0];
/// The bootloader ids (BOOT_ID answers, wValue 0, 1, 2).
pub const BOOT_ID: [[u8; 8]; 3] = [*b"BLCH2.1a", *b"BLMA1.07", *b"BLMB1.07"];

/// One connection's device handle.
#[derive(Debug)]
pub struct Conn {
    /// The connection's number (unique in this simulator).
    pub id: u64,
    /// The peer's pid (SO_PEERCRED), 0 if unknown.
    pub pid: i32,
    open_gen: Option<u64>,
    pending: Option<usize>,
    answer: [u8; MAX_FRAME_LEN],
}

impl Conn {
    /// A new connection, not open yet.
    pub fn new(id: u64, pid: i32) -> Self {
        Conn {
            id,
            pid,
            open_gen: None,
            pending: None,
            answer: [0; MAX_FRAME_LEN],
        }
    }
}

/// One trace line's facts: a valid frame received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameSeen {
    /// When (CLOCK_MONOTONIC ns).
    pub t_ns: u64,
    /// Who sent it (SO_PEERCRED pid).
    pub peer_pid: i32,
    /// Its seq.
    pub seq: u16,
    /// Its stiffness.
    pub stiffness: StiffnessSummary,
    /// The body's state its answer reports: posture, toe bumpers, shaking,
    /// joint faults.
    pub state: BodyState,
}

/// What the body's answer to a frame reports beyond the physics (for the
/// trace).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BodyState {
    /// The posture.
    pub posture: Posture,
    /// The toe bumpers held, `[left foot, right foot]` (bit 0 left contact,
    /// bit 1 right contact).
    pub bumpers: [u8; 2],
    /// The gyroscope's shake amplitude, mrad/s (0 at rest).
    pub imu_shake_mrad_s: u16,
    /// Per joint: its injected faults.
    pub joint_faults: [JointFault; nao_wire::JOINTS],
    /// Per joint, as the frame left it: its stiffness (per mille), target
    /// and reported position (counts, offsets included), current (mA) and
    /// zero position (counts, to turn counts into radians).
    pub joints: JointsSeen,
}

/// Every joint as a frame left it (for the trace).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JointsSeen {
    /// The commanded stiffness, per mille.
    pub stiffness: [u16; nao_wire::JOINTS],
    /// The commanded position, counts.
    pub target: [u16; nao_wire::JOINTS],
    /// The position the answer reports, counts (an injected offset included).
    pub position: [u16; nao_wire::JOINTS],
    /// The current the answer reports, mA.
    pub current_ma: [u16; nao_wire::JOINTS],
    /// The zero positions of the preference block, counts.
    pub zero: [u16; nao_wire::JOINTS],
}

impl BodyState {
    /// The state of `body` at `now_ns`.
    pub fn of(body: &VirtualBody, now_ns: u64) -> Self {
        BodyState {
            posture: body.world.posture,
            bumpers: body.world.bumpers,
            imu_shake_mrad_s: body.world.shake_at(now_ns),
            joint_faults: body.faults.joint,
            joints: JointsSeen {
                stiffness: std::array::from_fn(|j| body.stiffness(j).unwrap_or(0)),
                target: std::array::from_fn(|j| body.target(j).unwrap_or(0)),
                position: std::array::from_fn(|j| body.position(j).unwrap_or(0)),
                current_ma: std::array::from_fn(|j| {
                    body.current(j).unwrap_or(0).clamp(0, i64::from(u16::MAX)) as u16
                }),
                zero: body.config().zeros,
            },
        }
    }
}

/// What the server does after a request: send the reply in the buffer,
/// after waiting `delay_ms` (a bulk timeout), and trace `frame`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Outcome {
    /// Wait this long before sending the reply, ms.
    pub delay_ms: u64,
    /// A valid frame was received (one trace line).
    pub frame: Option<FrameSeen>,
}

/// Counters for `status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Valid frames received.
    pub frames: u64,
    /// Bulk writes that were no valid frame.
    pub invalid_frames: u64,
    /// Answers read by bulk_in.
    pub answers_read: u64,
    /// Answers dropped by the drop fault.
    pub dropped: u64,
    /// Answers corrupted by the corrupt fault.
    pub corrupted: u64,
    /// Frames not answered because of a stall.
    pub stalled: u64,
    /// bulk_in calls that timed out.
    pub bulk_in_timeouts: u64,
    /// Answers the host did not take within its bulk timeout, withdrawn
    /// (the FunctionFS front end only).
    pub withdrawn: u64,
    /// Claims granted.
    pub claims: u64,
    /// Claims refused (busy).
    pub busy: u64,
    /// The last valid frame's seq.
    pub last_seq: Option<u16>,
}

/// What a USB call returned, as [`nao_wire::Link::call`]: the length an OUT
/// call transferred or an IN call read, or the error and its message (empty
/// for most kinds).
pub type Reply = Result<usize, (LinkError, String)>;

/// The device in the caller's own process as a [`nao_wire::Link`] (for
/// tests and benches): each call is the device's [`Device::call`] from one
/// connection at [`InProcessLink::now_ns`], the caller's clock.
pub struct InProcessLink {
    /// The device.
    pub device: Device,
    /// The one connection the calls come from.
    pub conn: Conn,
    /// The time the calls are performed at, ns.
    pub now_ns: u64,
    /// The last valid frame the device received (each one sets it; the
    /// caller may clear it).
    pub last_frame: Option<FrameSeen>,
    read: Vec<u8>,
}

impl InProcessLink {
    /// `device`, its connection not open yet, at time 0.
    pub fn new(device: Device) -> Self {
        InProcessLink {
            device,
            conn: Conn::new(1, 1),
            now_ns: 0,
            last_frame: None,
            read: Vec::with_capacity(PREFS_LEN),
        }
    }
}

impl nao_wire::Link for InProcessLink {
    fn call(&mut self, call: Call<'_>, answer: &mut [u8]) -> Result<usize, LinkError> {
        let (reply, outcome) = self
            .device
            .call(&mut self.conn, &call, self.now_ns, &mut self.read);
        if outcome.frame.is_some() {
            self.last_frame = outcome.frame;
        }
        let n = reply.map_err(|(e, _)| e)?;
        let to = answer.get_mut(..self.read.len()).ok_or(LinkError::Other)?;
        to.copy_from_slice(&self.read);
        Ok(n)
    }
}

/// The virtual chest board: the USB device, its boards and its faults.
pub struct Device {
    /// The boards.
    pub body: VirtualBody,
    prefs: Box<[u8; PREFS_LEN]>,
    /// The bytes an IN call read, kept between [`Device::request`]s.
    answer: Vec<u8>,
    plugged: bool,
    generation: u64,
    holder: Option<(u64, i32)>,
    drop_left: u32,
    corrupt_left: u32,
    stall_until_ns: u64,
    connections: u64,
    /// Counters.
    pub stats: DeviceStats,
}

impl Device {
    /// A plugged-in board with `config` and preference block `prefs`.
    pub fn new(config: BodyConfig, prefs: Box<[u8; PREFS_LEN]>) -> Self {
        Device {
            body: VirtualBody::new(config),
            prefs,
            answer: Vec::with_capacity(MAX_FRAME_LEN),
            plugged: true,
            generation: 0,
            holder: None,
            drop_left: 0,
            corrupt_left: 0,
            stall_until_ns: 0,
            connections: 0,
            stats: DeviceStats::default(),
        }
    }

    /// Whether the board is plugged in.
    pub fn plugged(&self) -> bool {
        self.plugged
    }

    /// The pid of the connection holding interface 0.
    pub fn holder_pid(&self) -> Option<i32> {
        self.holder.map(|(_, pid)| pid)
    }

    /// A connection arrived.
    pub fn connected(&mut self) {
        self.connections += 1;
    }

    /// A connection ended (closed, or its process died): its claim is
    /// released at once.
    pub fn disconnected(&mut self, conn: &mut Conn) {
        self.connections = self.connections.saturating_sub(1);
        self.close(conn);
    }

    fn close(&mut self, conn: &mut Conn) {
        if self.holder.is_some_and(|(id, _)| id == conn.id) {
            self.holder = None;
            self.body
                .set_client_state(nao_wire::protocol::tables::CLIENT_DISCONNECTED);
        }
        conn.open_gen = None;
        conn.pending = None;
    }

    fn is_open(&self, conn: &Conn) -> bool {
        self.plugged && conn.open_gen == Some(self.generation)
    }

    /// Claims interface 0 for `conn` (explicitly or by a bulk transfer).
    /// A bulk transfer on endpoint `ep` where the transfer needs `want`:
    /// another endpoint is a pipe error; else the interface is claimed
    /// implicitly, as usbfs does.
    fn bulk(&mut self, conn: &Conn, ep: u8, want: u8) -> Result<(), LinkError> {
        if ep != want {
            return Err(LinkError::Pipe);
        }
        self.claim(conn)
    }

    fn claim(&mut self, conn: &Conn) -> Result<(), LinkError> {
        match self.holder {
            Some((id, _)) if id == conn.id => Ok(()),
            Some(_) => {
                self.stats.busy += 1;
                Err(LinkError::Busy)
            }
            None => {
                self.holder = Some((conn.id, conn.pid));
                self.stats.claims += 1;
                self.body.reset_session();
                Ok(())
            }
        }
    }

    /// Whether the board acknowledges the vendor control OUT request
    /// (bmRequestType, bRequest); any other is stalled. The FunctionFS
    /// front end asks before it acknowledges the data stage.
    pub fn knows_control_out(request_type: u8, request: u8) -> bool {
        matches!(
            VendorRequest::try_from(request),
            Ok(r @ (VendorRequest::Start | VendorRequest::ClientState)) if r.request_type() == request_type
        )
    }

    /// Handles one request body (op and fields, the socket's wire
    /// encoding) from `conn` at `now_ns` and appends the reply body (status
    /// and data) to `out`. Never panics on any bytes; a malformed request is
    /// answered `Other` with why.
    pub fn request(
        &mut self,
        conn: &mut Conn,
        req: &[u8],
        now_ns: u64,
        out: &mut Vec<u8>,
    ) -> Outcome {
        let call = match codec::decode_request(req) {
            Ok(call) => call,
            Err(why) => {
                codec::encode_reply(&Call::Close, Err((LinkError::Other, &why)), &[], out);
                return Outcome::default();
            }
        };
        let mut answer = std::mem::take(&mut self.answer);
        let (reply, outcome) = self.call(conn, &call, now_ns, &mut answer);
        let reply = reply
            .as_ref()
            .map(|&n| n)
            .map_err(|(e, why)| (*e, why.as_str()));
        codec::encode_reply(&call, reply, &answer, out);
        self.answer = answer;
        outcome
    }

    /// Performs one USB call from `conn` at `now_ns`, as [`nao_wire::Link`]
    /// does: `Ok(n)` is the length an OUT call transferred, or the `n`
    /// bytes an IN call read (put in `answer`); an error comes with its
    /// message (empty for most kinds).
    pub fn call(
        &mut self,
        conn: &mut Conn,
        call: &Call<'_>,
        now_ns: u64,
        answer: &mut Vec<u8>,
    ) -> (Reply, Outcome) {
        let mut outcome = Outcome::default();
        answer.clear();
        let fail = |e: LinkError| Err((e, String::new()));
        let reply = match *call {
            Call::Close => {
                self.close(conn);
                Ok(0)
            }
            Call::Open { vendor, product } => {
                self.close(conn);
                if !self.plugged || vendor != VENDOR_ID || product != PRODUCT_ID {
                    fail(LinkError::NoDevice)
                } else {
                    conn.open_gen = Some(self.generation);
                    Ok(0)
                }
            }
            _ if !self.is_open(conn) => fail(LinkError::NoDevice),
            Call::SetConfiguration(config) => {
                if self.holder.is_some_and(|(id, _)| id != conn.id) {
                    self.stats.busy += 1;
                    fail(LinkError::Busy)
                } else if config != CONFIGURATION {
                    Err((LinkError::Other, format!(
                        "set_configuration {config}: the chest board has only configuration {CONFIGURATION}"
                    )))
                } else {
                    Ok(0)
                }
            }
            Call::ClaimInterface(iface) => {
                if iface != INTERFACE {
                    Err((
                        LinkError::Other,
                        format!(
                        "claim_interface {iface}: the chest board has only interface {INTERFACE}"
                    ),
                    ))
                } else {
                    self.claim(conn).map(|()| 0).or_else(fail)
                }
            }
            Call::ControlOut { setup, data } => {
                if !Self::knows_control_out(setup.request_type, setup.request) {
                    fail(LinkError::Pipe)
                } else {
                    if setup.request == u8::from(VendorRequest::ClientState) {
                        self.body.set_client_state(setup.value as u8);
                    }
                    Ok(data.len())
                }
            }
            Call::ControlIn { setup, length } => {
                let index = usize::from(setup.index);
                let value = usize::from(setup.value);
                let request = VendorRequest::try_from(setup.request)
                    .ok()
                    .filter(|r| r.request_type() == setup.request_type);
                let data: Option<&[u8]> = match request {
                    Some(VendorRequest::Version) => Some(&CHEST_VERSION),
                    Some(VendorRequest::Prefs) => Some(
                        self.prefs
                            .get(index..index + prefs_chunk_len(index))
                            .unwrap_or(&[]),
                    ),
                    Some(VendorRequest::BootId) => BOOT_ID.get(value).map(|id| &id[..]),
                    _ => None,
                };
                match data {
                    Some(data) => {
                        let n = data.len().min(usize::from(length));
                        answer.extend_from_slice(&data[..n]);
                        Ok(n)
                    }
                    None => fail(LinkError::Pipe),
                }
            }
            Call::BulkOut { endpoint, data } => match self.bulk(conn, endpoint, EP_OUT) {
                Err(e) => fail(e),
                Ok(()) => {
                    outcome.frame = self.frame(conn, data, now_ns);
                    Ok(data.len())
                }
            },
            Call::BulkIn { endpoint, length } => match self.bulk(conn, endpoint, EP_IN) {
                Err(e) => fail(e),
                Ok(()) => match conn.pending.take() {
                    Some(n) if n > length => Err((
                        LinkError::Other,
                        format!("bulk_in overflow: the answer has {n} bytes, the buffer {length}"),
                    )),
                    Some(n) => {
                        self.stats.answers_read += 1;
                        answer.extend_from_slice(&conn.answer[..n]);
                        Ok(n)
                    }
                    None => {
                        self.stats.bulk_in_timeouts += 1;
                        outcome.delay_ms = BULK_TIMEOUT_MS;
                        fail(LinkError::Timeout)
                    }
                },
            },
        };
        (reply, outcome)
    }

    /// A bulk write: parse, step the body, apply the transport faults.
    fn frame(&mut self, conn: &mut Conn, data: &[u8], now_ns: u64) -> Option<FrameSeen> {
        conn.pending = None;
        let Ok(frame) = Frame::parse(data, SYNC_FRAME) else {
            self.stats.invalid_frames += 1;
            return None;
        };
        let step = self.body.step(&frame, now_ns, &mut conn.answer);
        self.stats.frames += 1;
        self.stats.last_seq = Some(step.seq);
        if now_ns < self.stall_until_ns {
            self.stats.stalled += 1;
        } else if self.drop_left > 0 {
            self.drop_left -= 1;
            self.stats.dropped += 1;
        } else if step.answer_len > 0 {
            if self.corrupt_left > 0 {
                self.corrupt_left -= 1;
                self.stats.corrupted += 1;
                conn.answer[step.answer_len - 1] ^= 0xff;
            }
            conn.pending = Some(step.answer_len);
        }
        Some(FrameSeen {
            t_ns: now_ns,
            peer_pid: conn.pid,
            seq: step.seq,
            stiffness: step.stiffness,
            state: BodyState::of(&self.body, now_ns),
        })
    }

    /// Applies a control command at `now_ns`; returns the answer line.
    pub fn control(&mut self, cmd: CtlCommand, now_ns: u64) -> String {
        let ms = |ms: u64| now_ns.saturating_add(ms.saturating_mul(1_000_000));
        match cmd {
            CtlCommand::Drop(n) => self.drop_left = n,
            CtlCommand::Corrupt(n) => self.corrupt_left = n,
            CtlCommand::Stall(t) => self.stall_until_ns = ms(t),
            CtlCommand::Unplug => {
                self.plugged = false;
                self.generation += 1;
                self.holder = None;
            }
            CtlCommand::Replug => {
                if !self.plugged {
                    self.plugged = true;
                    self.body.reset_session();
                }
            }
            CtlCommand::Button(None) => self.body.faults.button_once = true,
            CtlCommand::Button(Some(t)) => self.body.faults.button_until_ns = ms(t),
            CtlCommand::Heat(j, deg) => self.body.faults.heat[j] = deg,
            CtlCommand::Fault(j) => self.body.faults.fault[j] = true,
            CtlCommand::Overcurrent(ma, t) => {
                self.body.faults.overcurrent_ma = Some(ma);
                self.body.faults.overcurrent_until_ns = t.map_or(0, ms);
            }
            CtlCommand::Clear => {
                self.drop_left = 0;
                self.corrupt_left = 0;
                self.stall_until_ns = 0;
                self.body.faults = Default::default();
            }
            CtlCommand::Status => return self.status_json(now_ns).to_string(),
            CtlCommand::Posture(p) => self.body.world.posture = p,
            CtlCommand::Bumper(b) => self.body.world.bumpers = b,
            CtlCommand::ImuShake(mrad, t) => {
                self.body.world.shake_mrad_s = mrad;
                self.body.world.shake_until_ns = t.map_or(0, ms);
            }
            CtlCommand::JointFault(j, kind) => {
                if let Some(f) = self.body.faults.joint.get_mut(j) {
                    f.apply(kind);
                }
            }
        }
        "ok".to_string()
    }

    /// The state as JSON (the `status` command).
    pub fn status_json(&self, now_ns: u64) -> serde_json::Value {
        let b = &self.body;
        let hs: Vec<serde_json::Value> = b
            .handshake()
            .iter()
            .zip(nao_wire::protocol::tables::HANDSHAKE_BOARDS)
            .map(|(h, a)| {
                serde_json::json!({"address": format!("{a:#04x}"), "requests": h.requests, "version": h.answered})
            })
            .collect();
        let positions: Vec<u16> = (0..nao_wire::JOINTS)
            .filter_map(|j| b.position(j))
            .collect();
        let temps: Vec<i8> = (0..nao_wire::JOINTS)
            .filter_map(|j| b.temperature(j))
            .collect();
        let stiff: Vec<u16> = (0..nao_wire::JOINTS)
            .filter_map(|j| b.stiffness(j))
            .collect();
        let currents: Vec<i64> = (0..nao_wire::JOINTS).filter_map(|j| b.current(j)).collect();
        let s = &self.stats;
        let f = &b.faults;
        serde_json::json!({
            "t_ns": now_ns,
            "plugged": self.plugged,
            "connections": self.connections,
            "holder_pid": self.holder_pid(),
            "client_state": b.client_state(),
            "frames": s.frames,
            "invalid_frames": s.invalid_frames,
            "answers_read": s.answers_read,
            "dropped": s.dropped,
            "corrupted": s.corrupted,
            "stalled": s.stalled,
            "bulk_in_timeouts": s.bulk_in_timeouts,
            "withdrawn": s.withdrawn,
            "claims": s.claims,
            "busy": s.busy,
            "last_seq": s.last_seq,
            "faults": {
                "drop_left": self.drop_left,
                "corrupt_left": self.corrupt_left,
                "stalled": now_ns < self.stall_until_ns,
                "button": f.button_once || now_ns < f.button_until_ns,
                "heat": f.heat.to_vec(),
                "fault": f.fault.to_vec(),
                "overcurrent_ma": f.overcurrent_ma,
                "joints": joint_faults_json(&f.joint),
            },
            "posture": b.world.posture.name(),
            "bumpers": b.world.bumpers.to_vec(),
            "imu_shake_mrad_s": b.world.shake_at(now_ns),
            "battery": {"charge": b.charge(), "current_ma": b.battery_current(now_ns)},
            "handshake": hs,
            "positions": positions,
            "stiffness": stiff,
            "currents": currents,
            "temperatures": temps,
            "leds": {"chest": b.leds().0.to_vec(), "left_foot": b.leds().1.to_vec(), "right_foot": b.leds().2.to_vec()},
            "sonar_mode": b.sonar_mode(),
        })
    }
}

/// The faulted joints as JSON objects (`joint`, `reversed`,
/// `offset_counts`, `offset_rad`, `stuck`, `high_current_ma`), in joint order;
/// joints without a fault are left out.
pub fn joint_faults_json(faults: &[JointFault; nao_wire::JOINTS]) -> serde_json::Value {
    faults
        .iter()
        .enumerate()
        .filter(|(_, f)| !f.is_none())
        .map(|(j, f)| {
            serde_json::json!({
                "joint": nao_wire::protocol::tables::JOINT_NAMES[j],
                "reversed": f.reversed,
                "offset_counts": f.offset_counts,
                "offset_rad": crate::body::rad_of_counts(f.offset_counts),
                "stuck": f.stuck,
                "high_current_ma": f.high_current_ma,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nao_wire::link::Setup;
    use nao_wire::protocol::frame::FrameWriter;

    /// The sync byte of an answer (`docs/protocol.md` section 5).
    const SYNC_ANSWER: u8 = 0x5a;

    fn dev() -> Device {
        let cfg = BodyConfig::default();
        let prefs = crate::prefs::build(crate::prefs::DEFAULT_BODY_ID, &cfg.zeros);
        Device::new(cfg, prefs)
    }

    /// A device with one connection (id 1, pid 100) that opened it.
    fn opened() -> (Device, Conn) {
        let mut d = dev();
        let mut a = Conn::new(1, 100);
        open(&mut d, &mut a).unwrap();
        (d, a)
    }

    /// The call's result at t = 1000 ns: the bytes an IN call read (none
    /// for an OUT call), or the error kind.
    fn call(d: &mut Device, c: &mut Conn, call: Call<'_>) -> (Result<Vec<u8>, LinkError>, Outcome) {
        let mut answer = Vec::new();
        let (reply, o) = d.call(c, &call, 1_000, &mut answer);
        (reply.map(|_| answer).map_err(|(e, _)| e), o)
    }

    fn open(d: &mut Device, c: &mut Conn) -> Result<Vec<u8>, LinkError> {
        let open = Call::Open {
            vendor: 0xffff,
            product: 0x0006,
        };
        call(d, c, open).0
    }

    const OK: Result<Vec<u8>, LinkError> = Ok(Vec::new());
    const CLAIM: Call<'static> = Call::ClaimInterface(0);

    fn frame(seq: u16) -> Vec<u8> {
        let mut buf = [0u8; 64];
        let mut w = FrameWriter::frame(&mut buf, seq).unwrap();
        w.push(0x04, 0x01, &[]).unwrap();
        let n = w.finish();
        buf[..n].to_vec()
    }

    fn bulk_out(data: &[u8]) -> Call<'_> {
        Call::BulkOut {
            endpoint: EP_OUT,
            data,
        }
    }

    const BULK_IN: Call<'static> = Call::BulkIn {
        endpoint: EP_IN,
        length: 512,
    };

    #[test]
    fn claim_is_exclusive_and_released_when_the_holder_disconnects() {
        let mut d = dev();
        let (mut a, mut b) = (Conn::new(1, 100), Conn::new(2, 200));
        assert_eq!(open(&mut d, &mut a), OK);
        assert_eq!(open(&mut d, &mut b), OK);
        assert_eq!(call(&mut d, &mut a, CLAIM).0, OK);
        assert_eq!(call(&mut d, &mut b, CLAIM).0, Err(LinkError::Busy));
        assert_eq!(
            call(&mut d, &mut b, Call::SetConfiguration(1)).0,
            Err(LinkError::Busy)
        );
        assert_eq!(
            call(&mut d, &mut b, bulk_out(&frame(2))).0,
            Err(LinkError::Busy),
            "bulk needs the claim"
        );
        assert_eq!(d.holder_pid(), Some(100));
        d.disconnected(&mut a);
        assert_eq!(d.holder_pid(), None);
        assert_eq!(call(&mut d, &mut b, CLAIM).0, OK);
    }

    #[test]
    fn bulk_transfer_claims_the_interface_implicitly_like_usbfs() {
        let mut d = dev();
        let (mut a, mut b) = (Conn::new(1, 100), Conn::new(2, 200));
        open(&mut d, &mut a).unwrap();
        open(&mut d, &mut b).unwrap();
        assert_eq!(call(&mut d, &mut a, bulk_out(&frame(2))).0, OK);
        assert_eq!(d.holder_pid(), Some(100));
        assert_eq!(call(&mut d, &mut b, CLAIM).0, Err(LinkError::Busy));
    }

    #[test]
    fn bulk_in_returns_the_answer_to_the_last_frame_else_times_out_after_20_ms() {
        let (mut d, mut a) = opened();
        let (out, o) = call(&mut d, &mut a, BULK_IN);
        assert_eq!((out, o.delay_ms), (Err(LinkError::Timeout), 20));
        call(&mut d, &mut a, bulk_out(&frame(7))).0.unwrap();
        let (_, o) = call(&mut d, &mut a, bulk_out(&frame(8)));
        assert_eq!(o.frame.unwrap().seq, 8);
        let (out, o) = call(&mut d, &mut a, BULK_IN);
        assert_eq!(o.delay_ms, 0);
        let out = out.unwrap();
        let ans = Frame::parse(&out, SYNC_ANSWER).unwrap();
        assert_eq!(
            (ans.sync, ans.seq),
            (SYNC_ANSWER, 8),
            "the answer to frame 8"
        );
        assert_eq!(
            call(&mut d, &mut a, BULK_IN).0,
            Err(LinkError::Timeout),
            "an answer is read once"
        );
    }

    #[test]
    fn drop_corrupt_and_stall_faults_cost_answers() {
        let (mut d, mut a) = opened();
        d.control(CtlCommand::Drop(2), 0);
        for seq in 0..2 {
            call(&mut d, &mut a, bulk_out(&frame(seq))).0.unwrap();
            assert_eq!(call(&mut d, &mut a, BULK_IN).0, Err(LinkError::Timeout));
        }
        d.control(CtlCommand::Corrupt(1), 0);
        call(&mut d, &mut a, bulk_out(&frame(5))).0.unwrap();
        let out = call(&mut d, &mut a, BULK_IN).0.unwrap();
        assert!(matches!(
            Frame::parse(&out, SYNC_ANSWER),
            Err(nao_wire::protocol::frame::FrameError::BadCrc { .. })
        ));
        call(&mut d, &mut a, bulk_out(&frame(6))).0.unwrap();
        let out = call(&mut d, &mut a, BULK_IN).0.unwrap();
        assert_eq!(Frame::parse(&out, SYNC_ANSWER).map(|f| f.seq), Ok(6));
        // Stall: the requests run at t = 1000 ns, the stall lasts 1 ms from 0.
        d.control(CtlCommand::Stall(1), 0);
        call(&mut d, &mut a, bulk_out(&frame(7))).0.unwrap();
        assert_eq!(call(&mut d, &mut a, BULK_IN).0, Err(LinkError::Timeout));
        assert_eq!(
            (d.stats.dropped, d.stats.corrupted, d.stats.stalled),
            (2, 1, 1)
        );
    }

    #[test]
    fn unplug_fails_every_call_with_no_device_until_replug_and_reopen() {
        let (mut d, mut a) = opened();
        call(&mut d, &mut a, CLAIM).0.unwrap();
        d.control(CtlCommand::Unplug, 0);
        let f = frame(2);
        assert_eq!(
            call(&mut d, &mut a, bulk_out(&f)).0,
            Err(LinkError::NoDevice)
        );
        assert_eq!(open(&mut d, &mut a), Err(LinkError::NoDevice));
        d.control(CtlCommand::Replug, 0);
        assert_eq!(
            call(&mut d, &mut a, bulk_out(&f)).0,
            Err(LinkError::NoDevice),
            "the old handle is stale"
        );
        assert_eq!(open(&mut d, &mut a), OK);
        assert_eq!(call(&mut d, &mut a, CLAIM).0, OK);
    }

    #[test]
    fn control_requests_answer_version_prefs_in_chunks_and_boot_ids() {
        let (mut d, mut a) = opened();
        let setup = |request_type: u8, request: u8, value: u16, index: u16| Setup {
            request_type,
            request,
            value,
            index,
        };
        let ci = |d: &mut Device, a: &mut Conn, rq: u8, v: u16, i: u16, l: u16| {
            let setup = setup(0xc0, rq, v, i);
            call(d, a, Call::ControlIn { setup, length: l }).0
        };
        assert_eq!(ci(&mut d, &mut a, 0x02, 0, 0, 4), Ok(vec![2, 17, 7, 0]));
        let mut block = Vec::new();
        for off in [0u16, 1024, 2048, 3072, 4096] {
            block.extend_from_slice(&ci(&mut d, &mut a, 0x03, 0, off, 1024).unwrap());
        }
        assert_eq!(block.len(), 4635);
        assert!(nao_wire::protocol::prefs::Prefs::parse(&block).is_ok());
        assert_eq!(ci(&mut d, &mut a, 0x03, 0, 5000, 1024), OK, "past the end");
        assert_eq!(ci(&mut d, &mut a, 0x04, 2, 0, 8), Ok(b"BLMB1.07".to_vec()));
        assert_eq!(ci(&mut d, &mut a, 0x04, 3, 0, 8), Err(LinkError::Pipe));
        let co = |d: &mut Device, a: &mut Conn, rq: u8| {
            let setup = setup(0x40, rq, 0x24, 0);
            call(d, a, Call::ControlOut { setup, data: &[] }).0
        };
        assert_eq!(co(&mut d, &mut a, 0x05), OK);
        assert_eq!(d.body.client_state(), 0x24);
        assert_eq!(co(&mut d, &mut a, 0x09), Err(LinkError::Pipe));
    }

    #[test]
    fn request_bytes_are_the_socket_encoding_of_the_calls() {
        let (mut d, mut a) = opened();
        let mut out = Vec::new();
        // claim_interface 0: ok, no data.
        d.request(&mut a, &[3, 0], 1_000, &mut out);
        assert_eq!(out, [0]);
        // control_in VERSION: ok and the 4 bytes.
        out.clear();
        d.request(&mut a, &[6, 0xc0, 0x02, 0, 0, 0, 0, 4, 0], 1_000, &mut out);
        assert_eq!(out, [0, 2, 17, 7, 0]);
        // bulk_in with nothing pending: timeout, after 20 ms.
        out.clear();
        let o = d.request(&mut a, &[8, 0x81, 0x00, 0x02], 1_000, &mut out);
        assert_eq!((&out[..], o.delay_ms), (&[1][..], 20));
        // A malformed request: other, and why.
        out.clear();
        d.request(&mut a, &[9], 1_000, &mut out);
        assert_eq!(out[0], 5);
        assert_eq!(&out[1..], b"unknown op 9 (expected 1..=8)");
    }

    #[test]
    fn posture_bumper_shake_and_joint_fault_commands_reach_the_body_status_and_trace_facts() {
        use crate::body::JointFaultKind;
        let (mut d, mut a) = opened();
        assert_eq!(d.control(CtlCommand::Posture(Posture::LyingBack), 0), "ok");
        d.control(CtlCommand::Bumper([3, 0]), 0);
        d.control(CtlCommand::ImuShake(250, None), 0);
        d.control(CtlCommand::JointFault(2, JointFaultKind::Reversed), 0);
        d.control(CtlCommand::JointFault(2, JointFaultKind::Offset(65)), 0);
        let (_, o) = call(&mut d, &mut a, bulk_out(&frame(4)));
        let st = o.frame.unwrap().state;
        assert_eq!(
            (st.posture, st.bumpers, st.imu_shake_mrad_s),
            (Posture::LyingBack, [3, 0], 250)
        );
        assert!(st.joint_faults[2].reversed && st.joint_faults[2].offset_counts == 65);
        let v = d.status_json(5);
        assert_eq!(v["posture"], "lying-back");
        assert_eq!(v["bumpers"], serde_json::json!([3, 0]));
        assert_eq!(v["imu_shake_mrad_s"], 250);
        assert_eq!(v["faults"]["joints"][0]["joint"], "LShoulderPitch");
        assert_eq!(v["faults"]["joints"][0]["reversed"], true);
        assert_eq!(v["faults"]["joints"][0]["offset_counts"], 65);
        assert_eq!(v["currents"].as_array().unwrap().len(), 25);
        // clear ends the joint faults; posture, bumpers and shaking stay.
        d.control(CtlCommand::Clear, 0);
        let (_, o) = call(&mut d, &mut a, bulk_out(&frame(5)));
        let st = o.frame.unwrap().state;
        assert_eq!(
            (st.posture, st.bumpers, st.imu_shake_mrad_s),
            (Posture::LyingBack, [3, 0], 250)
        );
        assert!(st.joint_faults.iter().all(|f| f.is_none()));
        assert_eq!(d.status_json(5)["faults"]["joints"], serde_json::json!([]));
        // A timed shake ends by itself.
        d.control(CtlCommand::ImuShake(250, Some(1)), 0);
        assert_eq!(BodyState::of(&d.body, 999_999).imu_shake_mrad_s, 250);
        assert_eq!(BodyState::of(&d.body, 1_000_000).imu_shake_mrad_s, 0);
        d.control(CtlCommand::JointFault(2, JointFaultKind::Stuck), 0);
        d.control(CtlCommand::JointFault(2, JointFaultKind::Clear), 0);
        assert!(d.body.faults.joint[2].is_none());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(
            std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).map_or(256, |n: u32| n.min(2000))
        ))]
        #[test]
        fn device_never_panics_on_any_request_bytes(
            reqs in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600), 1..8)
        ) {
            let mut d = dev();
            let mut a = Conn::new(1, 1);
            open(&mut d, &mut a).unwrap();
            for r in &reqs {
                let mut out = Vec::new();
                d.request(&mut a, r, 5, &mut out);
                proptest::prop_assert!(!out.is_empty());
                // The same bytes as a frame.
                let mut answer = Vec::new();
                let _ = d.call(&mut a, &bulk_out(r), 6, &mut answer);
            }
        }
    }
}
