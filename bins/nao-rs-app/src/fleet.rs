//! The app's functional core: one card per body id, fed with beacons and
//! the time, no I/O. Times are passed in: `now_ms` is the app's monotonic
//! clock (ms since it started), `wall_ms` Unix ms for display only.
//!
//! With a team key (docs/app.md "What the app trusts") the shell checks
//! each beacon's seal and passes what it proved ([`Proof`]). A card holds
//! one verified *claimant* per beacon service start nonce whose seal
//! verified, taking only beacons newer than the last of that start, and at
//! most one unverified claimant for everything else heard with that body
//! id (no seal, another key, a bad MAC, a replayed copy): its beacons are
//! never shown, only that they exist. A new start that verifies follows
//! the old one (a restart) and the old start is retired once offline;
//! its beacons are replays from then on. Two claimants heard in
//! overlapping spans, verified or not, are two senders for one body id:
//! the card is flagged DUPLICATE and WAKE is refused. WAKE is offered only
//! on a verified claimant.
//!
//! Without a key nothing can be verified: a claimant is (robot name, page
//! nonce), one robot heard on wifi and wired at once is one claimant with
//! two addresses, a new nonce (reboot, repair) follows the old one, and
//! no WAKE is offered.

use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;

use nao_rs_beacon::format::{Beacon, Motion, PageHealth, SwitchPosition};
use serde::Serialize;

/// A beacon at most this old is good.
pub const GOOD_MS: u64 = 2_000;
/// A beacon at most this old is late; older: offline.
pub const LATE_MS: u64 = 4_000;
/// The most cards kept; a new body id beyond it replaces the card heard
/// longest ago if that one is offline, else it is dropped (and counted).
pub const MAX_CARDS: usize = 64;
/// The most claimants a card keeps.
pub const MAX_CLAIMANTS: usize = 4;
/// The most addresses a claimant keeps (the oldest goes).
pub const MAX_ADDRS: usize = 8;
/// The most events a card keeps (the oldest goes).
pub const MAX_EVENTS: usize = 100;
/// A beacon whose sequence number is at most this much below the last
/// one is a reordered old one: its contents are not taken.
const REORDER_WINDOW: u64 = 16;

/// The link as the laptop measures it, from the last beacon's age.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LinkQuality {
    /// <= 2 s.
    Good,
    /// <= 4 s.
    Late,
    /// Older.
    Offline,
}

/// The link of a beacon `age_ms` old.
pub fn link(age_ms: u64) -> LinkQuality {
    if age_ms <= GOOD_MS {
        LinkQuality::Good
    } else if age_ms <= LATE_MS {
        LinkQuality::Late
    } else {
        LinkQuality::Offline
    }
}

/// One line of a card's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CardEvent {
    /// The app's clock, ms.
    pub at_ms: u64,
    /// Unix ms, for display.
    pub wall_ms: u64,
    /// `first`, `trip`, `rearm`, `wake`, `takeover`, `release`, `damage`,
    /// `whole`, `new-page`, `claimant`, `lost`, `back`, `address`, `duplicate`,
    /// `stop-sent`, `wake-sent`, `wake-failed`.
    pub kind: &'static str,
    /// The sentence shown.
    pub text: String,
}

/// How far the app could check a beacon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Trust {
    /// Sealed with the app's team key, newer than the last of its start.
    Verified,
    /// The app has a key and this beacon did not verify (no seal, another
    /// key, a bad MAC, a replayed copy): its contents are never shown.
    Unverified,
    /// The app has no key: nothing can be verified, the whole view is
    /// unauthenticated.
    Unauthenticated,
}

impl Trust {
    /// Which claimant a card shows first: verified, then unauthenticated
    /// (no key), never an unverified one while another is there.
    pub fn rank(self) -> u8 {
        match self {
            Trust::Verified => 2,
            Trust::Unauthenticated => 1,
            Trust::Unverified => 0,
        }
    }
}

/// What the shell found out about a beacon's seal (`auth::open_beacon`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proof {
    /// The seal verifies under the app's key; the beacon service's start
    /// nonce.
    Verified {
        /// `auth::BeaconSeal::start`.
        start: u64,
    },
    /// The app has a key and the seal does not verify: why (the refusal).
    Refused(String),
    /// The app has no key.
    NoKey,
}

/// A robot heard with a card's body id (with a key: one per beacon
/// service start nonce that verified, and at most one for every beacon
/// that did not).
#[derive(Debug, Clone, PartialEq)]
pub struct Claimant {
    /// Its last beacon (never shown for an unverified claimant).
    pub beacon: Beacon,
    /// Verified, unverified or unauthenticated.
    pub trust: Trust,
    /// The beacon service's start nonce (verified claimants).
    pub start: Option<u64>,
    /// Why its beacons did not verify (unverified claimants), the last.
    pub why: Option<String>,
    /// When first and last heard (app clock, ms).
    pub first_ms: u64,
    /// When last heard.
    pub last_ms: u64,
    /// Where heard from, with when last heard there; oldest first.
    pub addrs: Vec<(IpAddr, u64)>,
    /// Beacons taken.
    pub beacons: u64,
    /// Offline was logged and no beacon came since.
    lost: bool,
    /// Unauthenticated: where the newest beacon taken came from.
    newest_from: Option<IpAddr>,
    /// Unauthenticated: beacons with a lower `seq` than the newest, from
    /// another address than the newest's, within [`LATE_MS`] of each
    /// other, and when the last came: two senders interleaving one
    /// sequence (a copy with its `seq` ahead).
    interleaved: (u32, u64),
}

/// That many interleaved beacons ([`Claimant`]) within [`LATE_MS`] of each
/// other flag a card without a key: one is a beacon reordered over a
/// second link, three are a second sender.
const INTERLEAVED: u32 = 3;

impl Claimant {
    fn new(b: Beacon, trust: Trust, now_ms: u64, src: IpAddr) -> Claimant {
        Claimant {
            beacon: b,
            trust,
            start: None,
            why: None,
            first_ms: now_ms,
            last_ms: now_ms,
            addrs: vec![(src, now_ms)],
            beacons: 1,
            lost: false,
            newest_from: Some(src),
            interleaved: (0, 0),
        }
    }

    /// Its name as the page and the log may show it: an unverified
    /// claimant's (anyone's words) never.
    pub fn label(&self) -> &str {
        match self.trust {
            Trust::Unverified => "(not verified)",
            _ => &self.beacon.name,
        }
    }

    fn same_robot(&self, b: &Beacon) -> bool {
        self.trust == Trust::Unauthenticated
            && self.beacon.name == b.name
            && self.beacon.nonce == b.nonce
    }

    fn heard_at(&mut self, src: IpAddr, now_ms: u64) -> Option<(&'static str, String)> {
        if let Some(a) = self.addrs.iter_mut().find(|(a, _)| *a == src) {
            a.1 = now_ms;
            return None;
        }
        self.addrs.push((src, now_ms));
        if self.addrs.len() > MAX_ADDRS {
            self.addrs.remove(0);
        }
        Some(("address", format!("also heard at {src}")))
    }

    fn back(&mut self, now_ms: u64) -> Option<(&'static str, String)> {
        if !self.lost {
            return None;
        }
        self.lost = false;
        let gone = now_ms.saturating_sub(self.last_ms);
        Some((
            "back",
            format!("beacon back after {:.1} s", gone as f64 / 1000.0),
        ))
    }
}

/// Everything known about one body id.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Card {
    /// Newest heard last.
    pub claimants: Vec<Claimant>,
    /// Newest first.
    pub events: VecDeque<CardEvent>,
    /// Two senders heard in overlapping spans and not offline: two
    /// verified starts (two robots with one id and the key, or a replayed
    /// start), or beacons that do not verify beside verified ones (a
    /// spoofer, a replay from another address, a robot with another key).
    pub duplicate: bool,
    /// Start nonces of verified claimants that were followed by another
    /// start and dropped: their beacons are replays from now on.
    retired: VecDeque<u64>,
}

/// How many superseded start nonces a card remembers.
const MAX_RETIRED: usize = 8;

/// A verified beacon with the sequence number of the last one is a copy
/// over a second link if it comes within this long of the first copy;
/// later it is a replay (it never makes an old beacon look fresh).
pub const COPY_MS: u64 = 1_000;

impl Card {
    fn log(&mut self, now_ms: u64, wall_ms: u64, kind: &'static str, text: String) {
        self.events.push_front(CardEvent {
            at_ms: now_ms,
            wall_ms,
            kind,
            text,
        });
        self.events.truncate(MAX_EVENTS);
    }

    /// The claimant whose state the card shows: the verified one heard
    /// last, else (no key, or nothing verified) the one heard last.
    pub fn primary(&self) -> Option<&Claimant> {
        self.claimants
            .iter()
            .max_by_key(|c| (c.trust.rank(), c.last_ms))
    }

    /// A claimant whose beacons verified.
    pub fn verified(&self) -> bool {
        self.claimants.iter().any(|c| c.trust == Trust::Verified)
    }

    /// Every address of every claimant, each once.
    pub fn addrs(&self) -> Vec<IpAddr> {
        let mut out = Vec::new();
        for c in &self.claimants {
            for (a, _) in &c.addrs {
                if !out.contains(a) {
                    out.push(*a);
                }
            }
        }
        out
    }

    fn conflict(&self, now_ms: u64) -> bool {
        let interleaved = self.claimants.iter().any(|c| {
            c.interleaved.0 >= INTERLEAVED && now_ms.saturating_sub(c.interleaved.1) <= LATE_MS
        });
        if interleaved {
            return true;
        }
        let alive: Vec<&Claimant> = self
            .claimants
            .iter()
            .filter(|c| link(now_ms.saturating_sub(c.last_ms)) != LinkQuality::Offline)
            .collect();
        alive.iter().enumerate().any(|(i, a)| {
            alive[i + 1..]
                .iter()
                .any(|b| a.first_ms <= b.last_ms && b.first_ms <= a.last_ms)
        })
    }

    /// Adds a claimant; beyond [`MAX_CLAIMANTS`] one goes: an unverified
    /// one first, then the one heard longest ago (never the new one).
    fn push(&mut self, c: Claimant) {
        self.claimants.push(c);
        if self.claimants.len() > MAX_CLAIMANTS {
            let last = self.claimants.len() - 1;
            if let Some(i) = (0..last).min_by_key(|&i| {
                (
                    self.claimants[i].trust != Trust::Unverified,
                    self.claimants[i].last_ms,
                )
            }) {
                self.claimants.remove(i);
            }
        }
    }

    /// A beacon that did not verify (`why`): merged into the card's one
    /// unverified claimant, never shown.
    fn unverified(&mut self, now_ms: u64, wall_ms: u64, src: IpAddr, b: Beacon, why: String) {
        if let Some(c) = self
            .claimants
            .iter_mut()
            .find(|c| c.trust == Trust::Unverified)
        {
            let mut ev: Vec<(&'static str, String)> = c.back(now_ms).into_iter().collect();
            c.last_ms = c.last_ms.max(now_ms);
            c.beacons += 1;
            c.beacon = b;
            if c.heard_at(src, now_ms).is_some() {
                ev.push((
                    "unverified",
                    format!("beacons that do not verify also from {src} ({why})"),
                ));
            }
            c.why = Some(why);
            for (k, t) in ev {
                self.log(now_ms, wall_ms, k, t);
            }
            return;
        }
        self.log(
            now_ms,
            wall_ms,
            "unverified",
            format!("beacons for this body id from {src} do not verify ({why}): not shown"),
        );
        let mut c = Claimant::new(b, Trust::Unverified, now_ms, src);
        c.why = Some(why);
        self.push(c);
    }
}

/// What [`FleetView::on_beacon`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    /// The beacon updated a card.
    Updated {
        /// The source address was new to the card.
        new_addr: bool,
        /// The beacon verified and was taken: the address is a verified
        /// robot's (the stop's address book keeps those above the rest).
        verified: bool,
    },
    /// A new body id beyond [`MAX_CARDS`] with no card to replace.
    Dropped,
}

/// Every card, by body id.
#[derive(Debug, Clone, Default)]
pub struct FleetView {
    cards: BTreeMap<String, Card>,
    dropped: u64,
}

/// The words and colour of a robot's state, for the page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StateLabel {
    /// `offline`, `unverified`, `page-damaged`, `tripped`, `limp`,
    /// `bring-up`, `armed`, `armed-idle`: the page colours by it.
    pub code: &'static str,
    /// In words.
    pub words: String,
}

/// The state shown for `b` with link `l`; `since` words are the caller's
/// (the page formats times in the operator's time zone).
pub fn state(b: &Beacon, l: LinkQuality) -> StateLabel {
    let (code, words) = if let PageHealth::Damaged(d) = &b.page {
        ("page-damaged", format!("page damaged ({d}): tripped"))
    } else if b.switch == SwitchPosition::Tripped {
        let r = b.reason.as_deref().unwrap_or("unknown reason");
        ("tripped", format!("tripped: {r}"))
    } else {
        match b.motion {
            Motion::LimpWaitingForWake => ("limp", "limp, waiting for a wake".to_string()),
            Motion::Awake => ("armed", "armed and moving".to_string()),
            Motion::BringUp => ("bring-up", "armed: bring-up check".to_string()),
            Motion::LimpTripped => ("limp", "armed, limp (runtime still limp)".to_string()),
            Motion::None => ("armed-idle", "armed, no runtime".to_string()),
        }
    };
    if l == LinkQuality::Offline {
        return StateLabel {
            code: "offline",
            words: format!("offline: no beacon for more than 4 s (last heard: {words})"),
        };
    }
    StateLabel { code, words }
}

/// The state shown for claimant `c` with link `l`: its beacon's
/// ([`state`]) unless it did not verify; then only that.
pub fn claimant_state(c: &Claimant, l: LinkQuality) -> StateLabel {
    if c.trust != Trust::Unverified {
        return state(&c.beacon, l);
    }
    let why = c.why.as_deref().unwrap_or("not verified");
    StateLabel {
        code: if l == LinkQuality::Offline {
            "offline"
        } else {
            "unverified"
        },
        words: format!("beacons that do not verify under the app's key ({why}): state not shown"),
    }
}

impl FleetView {
    /// An empty fleet.
    pub fn new() -> FleetView {
        FleetView::default()
    }

    /// The card of `body_id`.
    pub fn card(&self, body_id: &str) -> Option<&Card> {
        self.cards.get(body_id)
    }

    /// Every card, by body id.
    pub fn cards(&self) -> impl Iterator<Item = (&String, &Card)> {
        self.cards.iter()
    }

    /// New body ids dropped because [`MAX_CARDS`] cards were live.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Room for one more card: the card to replace when [`MAX_CARDS`] are
    /// there, by rank: an offline card heard longest ago, else a card with
    /// nothing verified heard longest ago; a verified robot's card that is
    /// not offline is never replaced. `None`: no room.
    fn victim(&self, now_ms: u64) -> Option<String> {
        self.cards
            .iter()
            .filter_map(|(id, c)| {
                let p = c.primary()?;
                let offline = link(now_ms.saturating_sub(p.last_ms)) == LinkQuality::Offline;
                (offline || !c.verified()).then_some(((!offline, p.last_ms), id))
            })
            .min()
            .map(|(_, id)| id.clone())
    }

    /// Takes a beacon heard from `src`, with what its seal proved.
    pub fn on_beacon(
        &mut self,
        now_ms: u64,
        wall_ms: u64,
        src: IpAddr,
        b: Beacon,
        proof: Proof,
    ) -> Taken {
        if !self.cards.contains_key(&b.body_id) && self.cards.len() >= MAX_CARDS {
            match self.victim(now_ms) {
                Some(id) => {
                    self.cards.remove(&id);
                }
                None => {
                    self.dropped += 1;
                    return Taken::Dropped;
                }
            }
        }
        let card = self.cards.entry(b.body_id.clone()).or_default();
        let new_addr = !card.addrs().contains(&src);
        let verified = match proof {
            Proof::NoKey => {
                unauthenticated(card, now_ms, wall_ms, src, b);
                false
            }
            Proof::Refused(why) => {
                card.unverified(now_ms, wall_ms, src, b, why);
                false
            }
            Proof::Verified { start } => verified(card, now_ms, wall_ms, src, b, start),
        };
        update_duplicate(card, now_ms, wall_ms);
        Taken::Updated { new_addr, verified }
    }

    /// Advances the clock: logs beacons lost, drops claimants superseded
    /// and offline, clears the duplicate flag when one of two went quiet.
    /// True when anything changed beyond ages.
    pub fn tick(&mut self, now_ms: u64, wall_ms: u64) -> bool {
        let mut changed = false;
        for card in self.cards.values_mut() {
            let before = (card.claimants.len(), card.events.front().cloned());
            let mut lost = Vec::new();
            for c in &mut card.claimants {
                let age = now_ms.saturating_sub(c.last_ms);
                if !c.lost && link(age) == LinkQuality::Offline {
                    c.lost = true;
                    lost.push(format!(
                        "beacon lost: {:?} not heard for {:.1} s",
                        c.label(),
                        age as f64 / 1000.0
                    ));
                }
            }
            // An offline claimant goes once another one at least as
            // trusted is not offline (an unverified sender never pushes a
            // verified robot out); of the offline ones left, the newest of
            // each trust stays. A verified start that goes is retired: its
            // beacons are replays from then on (it was followed by another
            // verified start).
            let offline =
                |c: &Claimant| link(now_ms.saturating_sub(c.last_ms)) == LinkQuality::Offline;
            let alive_rank = card
                .claimants
                .iter()
                .filter(|c| !offline(c))
                .map(|c| c.trust.rank())
                .max();
            let mut all = std::mem::take(&mut card.claimants);
            all.sort_by_key(|c| std::cmp::Reverse(c.last_ms));
            let mut kept: Vec<Claimant> = Vec::with_capacity(all.len());
            for c in all {
                let keep = !offline(&c)
                    || (alive_rank.map_or(true, |r| r < c.trust.rank())
                        && !kept.iter().any(|k| offline(k) && k.trust == c.trust));
                if keep {
                    kept.push(c);
                } else if let (Some(s), Trust::Verified) = (c.start, c.trust) {
                    if alive_rank == Some(Trust::Verified.rank()) {
                        card.retired.push_front(s);
                        card.retired.truncate(MAX_RETIRED);
                    }
                }
            }
            // Heard order again: newest heard last.
            kept.reverse();
            card.claimants = kept;
            for t in lost {
                card.log(now_ms, wall_ms, "lost", t);
            }
            update_duplicate(card, now_ms, wall_ms);
            changed |= before != (card.claimants.len(), card.events.front().cloned());
        }
        changed
    }

    /// Logs an action of the operator's (a stop or wake sent) on a card.
    pub fn note(
        &mut self,
        body_id: &str,
        now_ms: u64,
        wall_ms: u64,
        kind: &'static str,
        text: String,
    ) {
        if let Some(c) = self.cards.get_mut(body_id) {
            c.log(now_ms, wall_ms, kind, text);
        }
    }

    /// Whether WAKE may be offered for `body_id` now, and if not why: the
    /// app has a key, the card is not flagged, its claimant's last beacon
    /// verified, is good, armed, limp waiting for a wake, with a key on the
    /// robot and a sound page.
    pub fn wake_target(
        &self,
        body_id: &str,
        now_ms: u64,
        have_key: bool,
    ) -> Result<WakeTarget, String> {
        let card = self
            .cards
            .get(body_id)
            .ok_or_else(|| format!("no robot with body id {body_id:?} was heard"))?;
        wake_target(card, now_ms, have_key)
    }
}

/// A beacon with no key to check it (the app has none): one claimant per
/// (robot name, page nonce), a beacon up to [`REORDER_WINDOW`] below the
/// last one is reordered and not taken.
fn unauthenticated(card: &mut Card, now_ms: u64, wall_ms: u64, src: IpAddr, b: Beacon) {
    if let Some(i) = card.claimants.iter().position(|c| c.same_robot(&b)) {
        let c = &mut card.claimants[i];
        let mut ev: Vec<(&'static str, String)> = c.back(now_ms).into_iter().collect();
        let prev_seq = c.beacon.seq;
        let reordered = b.seq < prev_seq && prev_seq - b.seq <= REORDER_WINDOW;
        if b.seq < prev_seq && c.newest_from != Some(src) {
            // Below the newest, from elsewhere: a slow link, or a second
            // sender whose sequence runs ahead.
            let (n, at) = c.interleaved;
            let n = if now_ms.saturating_sub(at) <= LATE_MS {
                n
            } else {
                0
            };
            c.interleaved = (n.saturating_add(1), now_ms);
        }
        if b.seq != prev_seq && !reordered {
            ev.extend(changes(&c.beacon, &b));
            c.beacon = b;
            c.beacons += 1;
            c.newest_from = Some(src);
        }
        c.last_ms = c.last_ms.max(now_ms);
        ev.extend(c.heard_at(src, now_ms));
        for (k, t) in ev {
            card.log(now_ms, wall_ms, k, t);
        }
        return;
    }
    let (kind, text) = if card.claimants.is_empty() {
        (
            "first",
            format!(
                "first heard: {:?} at {src}, {}",
                b.name,
                state(&b, LinkQuality::Good).words
            ),
        )
    } else if let Some(old) = card.claimants.iter().find(|c| c.beacon.name == b.name) {
        (
            "new-page",
            format!(
                "new page nonce {:016x} (was {:016x}): rebooted or the page was made whole again; {}",
                b.nonce,
                old.beacon.nonce,
                state(&b, LinkQuality::Good).words
            ),
        )
    } else {
        (
            "claimant",
            format!("{:?} at {src} also claims this body id", b.name),
        )
    };
    card.log(now_ms, wall_ms, kind, text);
    card.push(Claimant::new(b, Trust::Unauthenticated, now_ms, src));
}

/// A beacon whose seal verified, of the beacon service's start `start`.
/// Only a beacon newer than the last of its start is taken; the same one
/// again within [`COPY_MS`] is a copy over another link (its address is
/// kept); any other repeat, and any beacon of a retired start, is a
/// replay: it goes to the unverified claimant (shown as a second sender),
/// never into the state. A new start beside a known one is a restart,
/// accepted because its seal verified. True when taken.
fn verified(
    card: &mut Card,
    now_ms: u64,
    wall_ms: u64,
    src: IpAddr,
    b: Beacon,
    start: u64,
) -> bool {
    if card.retired.contains(&start) {
        let why = format!("replayed: start {start:016x} was followed by a restart");
        card.unverified(now_ms, wall_ms, src, b, why);
        return false;
    }
    let Some(i) = card
        .claimants
        .iter()
        .position(|c| c.trust == Trust::Verified && c.start == Some(start))
    else {
        let text = match card
            .claimants
            .iter()
            .filter(|c| c.trust == Trust::Verified)
            .max_by_key(|c| c.last_ms)
        {
            None => format!(
                "first heard: {:?} at {src}, {} (verified: key, start {start:016x})",
                b.name,
                state(&b, LinkQuality::Good).words
            ),
            Some(old) => format!(
                "beacon service restarted (start {start:016x}, was {:016x}): its seal verifies; {}",
                old.start.unwrap_or(0),
                state(&b, LinkQuality::Good).words
            ),
        };
        let kind = if card.verified() { "restart" } else { "first" };
        card.log(now_ms, wall_ms, kind, text);
        let mut c = Claimant::new(b, Trust::Verified, now_ms, src);
        c.start = Some(start);
        card.push(c);
        return true;
    };
    let c = &mut card.claimants[i];
    let prev = c.beacon.seq;
    let known_addr = c.addrs.iter().any(|(a, _)| *a == src);
    if b.seq > prev {
        let mut ev: Vec<(&'static str, String)> = c.back(now_ms).into_iter().collect();
        ev.extend(changes(&c.beacon, &b));
        c.beacon = b;
        c.beacons += 1;
        c.last_ms = c.last_ms.max(now_ms);
        ev.extend(c.heard_at(src, now_ms));
        for (k, t) in ev {
            card.log(now_ms, wall_ms, k, t);
        }
        return true;
    }
    if b.seq == prev && now_ms.saturating_sub(c.last_ms) <= COPY_MS {
        // The same beacon over a second link: its address, not its age.
        if let Some(ev) = c.heard_at(src, now_ms) {
            card.log(now_ms, wall_ms, ev.0, ev.1);
        }
        return true;
    }
    if known_addr {
        // Reordered on its own link: nothing new.
        return false;
    }
    let why = format!(
        "replayed: seq {} of start {start:016x}, the last taken is {prev}",
        b.seq
    );
    card.unverified(now_ms, wall_ms, src, b, why);
    false
}

/// What a wake is signed over and sent to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WakeTarget {
    /// The body id.
    pub body_id: String,
    /// The page nonce of the last beacon.
    pub nonce: u64,
    /// The wake generation of the last beacon.
    pub generation: u64,
    /// Where the robot was heard.
    pub addrs: Vec<IpAddr>,
}

/// See [`FleetView::wake_target`].
pub fn wake_target(card: &Card, now_ms: u64, have_key: bool) -> Result<WakeTarget, String> {
    if !have_key {
        return Err("network wake needs a key: start the app with --key FILE".into());
    }
    if card.duplicate {
        return Err(
            "DUPLICATE: a second sender claims this body id: wake refused until one is gone".into(),
        );
    }
    let c = card.primary().ok_or("no beacon heard")?;
    if c.trust != Trust::Verified {
        return Err(
            "no verified beacon: WAKE is offered only on a beacon sealed with the team key".into(),
        );
    }
    let b = &c.beacon;
    if link(now_ms.saturating_sub(c.last_ms)) != LinkQuality::Good {
        return Err("the beacon is not fresh (late or offline): no wake on old news".into());
    }
    if b.switch != SwitchPosition::Armed {
        return Err("tripped: a person re-arms on the robot first (naoctl rearm)".into());
    }
    if b.motion != Motion::LimpWaitingForWake {
        return Err(format!(
            "not limp waiting for a wake (motion {})",
            b.motion.name()
        ));
    }
    if b.page != PageHealth::Ok {
        return Err("the page is damaged".into());
    }
    if !b.net_wake {
        return Err("the robot has no team key: network wake is off on it".into());
    }
    let Some(generation) = b.wake_generation else {
        return Err("the beacon gives no wake generation".into());
    };
    Ok(WakeTarget {
        body_id: b.body_id.clone(),
        nonce: b.nonce,
        generation,
        addrs: c.addrs.iter().map(|(a, _)| *a).collect(),
    })
}

fn update_duplicate(card: &mut Card, now_ms: u64, wall_ms: u64) {
    let d = card.conflict(now_ms);
    if d != card.duplicate {
        card.duplicate = d;
        let text = if d {
            let names: Vec<String> = card
                .claimants
                .iter()
                .map(|c| {
                    let a: Vec<String> = c.addrs.iter().map(|(a, _)| a.to_string()).collect();
                    format!("{:?} at {}", c.label(), a.join(", "))
                })
                .collect();
            format!("a second sender claims this body id: {}", names.join("; "))
        } else {
            "only one sender claims this body id again".into()
        };
        card.log(now_ms, wall_ms, "duplicate", text);
    }
}

/// The events between two beacons of one robot.
fn changes(a: &Beacon, b: &Beacon) -> Vec<(&'static str, String)> {
    let mut ev = Vec::new();
    let reason = b.reason.as_deref().unwrap_or("unknown reason");
    if b.trip_count > a.trip_count {
        let n = b.trip_count - a.trip_count;
        let text = match (b.switch, n) {
            (SwitchPosition::Tripped, 1) => format!("tripped: {reason} (trip {})", b.trip_count),
            (SwitchPosition::Tripped, _) => {
                format!("tripped {n} times; now: {reason} (trip {})", b.trip_count)
            }
            (SwitchPosition::Armed, _) => format!(
                "tripped {n} time(s) and re-armed between two beacons (trip {})",
                b.trip_count
            ),
        };
        ev.push(("trip", text));
    } else if a.switch == SwitchPosition::Armed && b.switch == SwitchPosition::Tripped {
        ev.push(("trip", format!("tripped: {reason}")));
    }
    if a.switch == SwitchPosition::Tripped && b.switch == SwitchPosition::Armed {
        let g = b
            .wake_generation
            .map_or_else(|| "none".to_string(), |g| g.to_string());
        ev.push((
            "rearm",
            format!("re-armed by a person (wake generation {g})"),
        ));
    }
    if a.nonce != b.nonce {
        ev.push((
            "new-page",
            format!(
                "new page nonce {:016x} (was {:016x}): the page was made whole again",
                b.nonce, a.nonce
            ),
        ));
    }
    if a.motion != Motion::Awake && b.motion == Motion::Awake && b.switch == SwitchPosition::Armed {
        ev.push(("wake", "woken: moving".to_string()));
    }
    if !a.guard.holding && b.guard.holding {
        ev.push((
            "takeover",
            "take-over: the guard holds the board".to_string(),
        ));
    }
    if a.guard.holding && !b.guard.holding {
        ev.push(("release", "the guard released the board".to_string()));
    }
    match (&a.page, &b.page) {
        (PageHealth::Ok, PageHealth::Damaged(d)) => {
            ev.push(("damage", format!("page damaged: {d}")))
        }
        (PageHealth::Damaged(_), PageHealth::Ok) => {
            ev.push(("whole", "page whole again".to_string()))
        }
        _ => {}
    }
    ev
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sample beacon as robot `name` with body id `body`, page nonce
    /// `nonce`, sequence number `seq`, armed at trip count 2.
    fn beacon(body: &str, name: &str, nonce: u64, seq: u64) -> Beacon {
        Beacon {
            seq,
            name: name.into(),
            body_id: body.into(),
            nonce,
            trip_count: 2,
            wake_generation: Some(2),
            ..nao_rs_beacon::testing::sample()
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// No key in the app: unauthenticated.
    const N: Proof = Proof::NoKey;

    /// Sealed with the app's key by the beacon service's start `start`.
    fn v(start: u64) -> Proof {
        Proof::Verified { start }
    }

    /// A fleet fed, in order, beacons of body id B1 heard as `(ms, from,
    /// name, nonce, seq)` (the app's clock and the wall clock alike).
    fn fed(heard: &[(u64, &str, &str, u64, u64)]) -> FleetView {
        let mut f = FleetView::new();
        for &(ms, from, name, nonce, seq) in heard {
            f.on_beacon(ms, ms, ip(from), beacon("B1", name, nonce, seq), N);
        }
        f
    }

    fn kinds(c: &Card) -> Vec<&'static str> {
        c.events.iter().map(|e| e.kind).collect()
    }

    fn limp(mut b: Beacon) -> Beacon {
        b.motion = Motion::LimpWaitingForWake;
        b
    }

    /// The spoofer: the robot's body id, name and nonce copied,
    /// "limp, waiting for a wake", its sequence number ahead; its beacons
    /// do not verify.
    #[test]
    fn a_beacon_that_does_not_verify_is_never_shown_and_flags_a_second_sender() {
        let mut f = FleetView::new();
        let (robot, spoofer) = (ip("10.0.0.5"), ip("10.0.0.66"));
        let bad = || Proof::Refused("bad-mac: forged".into());
        for (t, seq) in [(0, 1), (500, 2), (1000, 3)] {
            f.on_beacon(t, t, robot, beacon("B1", "nao1", 7, seq), v(1));
            f.on_beacon(
                t + 1,
                t,
                spoofer,
                limp(beacon("B1", "nao1", 7, seq + 100)),
                bad(),
            );
            // The same from the robot's own address: still a second sender.
            f.on_beacon(
                t + 2,
                t,
                robot,
                limp(beacon("B1", "nao1", 7, seq + 200)),
                bad(),
            );
        }
        let c = f.card("B1").unwrap();
        let p = c.primary().unwrap();
        assert_eq!(
            (p.trust, p.beacon.seq, p.beacon.motion),
            (Trust::Verified, 3, Motion::Awake)
        );
        assert_eq!(
            state(&p.beacon, LinkQuality::Good).code,
            "armed",
            "shown as moving"
        );
        assert!(c.duplicate, "a second sender is flagged");
        assert_eq!(c.claimants.len(), 2);
        let u = c
            .claimants
            .iter()
            .find(|c| c.trust == Trust::Unverified)
            .unwrap();
        assert_eq!(claimant_state(u, LinkQuality::Good).code, "unverified");
        assert!(kinds(c).contains(&"unverified") && kinds(c).contains(&"duplicate"));
        assert!(f
            .wake_target("B1", 1000, true)
            .unwrap_err()
            .contains("DUPLICATE"));
        // The spoofer alone (the robot quiet): nothing verified, no WAKE,
        // and its state is not shown.
        let mut g = FleetView::new();
        g.on_beacon(0, 0, spoofer, limp(beacon("B2", "nao2", 7, 1)), bad());
        let c = g.card("B2").unwrap();
        assert!(!c.duplicate && !c.verified());
        assert_eq!(
            claimant_state(c.primary().unwrap(), LinkQuality::Good).code,
            "unverified"
        );
        assert!(g
            .wake_target("B2", 0, true)
            .unwrap_err()
            .contains("no verified beacon"));
        // Without a key in the app: no WAKE at all.
        assert!(g
            .wake_target("B2", 0, false)
            .unwrap_err()
            .contains("needs a key"));
        // Its words are never shown, in the log either.
        g.tick(5_000, 5_000);
        let c = g.card("B2").unwrap();
        assert_eq!(c.primary().unwrap().label(), "(not verified)");
        assert!(kinds(c).contains(&"lost"));
        assert!(
            c.events.iter().all(|e| !e.text.contains("nao2")),
            "{:?}",
            c.events
        );
    }

    #[test]
    fn a_replayed_verified_beacon_is_not_taken_and_never_looks_fresh() {
        let mut f = FleetView::new();
        let (robot, other) = (ip("10.0.0.5"), ip("10.0.0.66"));
        let old_limp = limp(beacon("B1", "nao1", 7, 5));
        f.on_beacon(0, 0, robot, old_limp.clone(), v(1));
        f.on_beacon(500, 500, robot, beacon("B1", "nao1", 7, 6), v(1));
        // From the robot's address: reordered or replayed, nothing new.
        let t = f.on_beacon(600, 600, robot, old_limp.clone(), v(1));
        assert_eq!(
            t,
            Taken::Updated {
                new_addr: false,
                verified: false
            }
        );
        assert_eq!(
            f.card("B1").unwrap().primary().unwrap().beacon.motion,
            Motion::Awake
        );
        assert!(!f.card("B1").unwrap().duplicate);
        // From another address: a second sender.
        f.on_beacon(700, 700, other, old_limp, v(1));
        // Flagged once both are heard in overlapping spans: the robot's
        // next beacon.
        f.on_beacon(1_000, 1_000, robot, beacon("B1", "nao1", 7, 7), v(1));
        let c = f.card("B1").unwrap();
        assert_eq!(c.primary().unwrap().beacon.motion, Motion::Awake);
        assert!(c.duplicate);
        assert!(
            c.events.iter().any(|e| e.text.contains("replayed")),
            "{:?}",
            c.events
        );
        // The last beacon again and again, after the robot went quiet,
        // from its own address: it never makes the card fresh again.
        let last = beacon("B1", "nao1", 7, 7);
        f.on_beacon(1_100, 1_100, ip("10.0.0.6"), last.clone(), v(1));
        assert!(
            f.card("B1").unwrap().addrs().contains(&ip("10.0.0.6")),
            "a copy over a second link"
        );
        for t in (2_000..9_000).step_by(500) {
            f.on_beacon(t, t, robot, last.clone(), v(1));
            f.tick(t, t);
        }
        let p = f.card("B1").unwrap().primary().unwrap().clone();
        assert_eq!(p.last_ms, 1_000);
        assert_eq!(link(9_000 - p.last_ms), LinkQuality::Offline);
    }

    /// A spoofer heard while the robot's beacons are lost (a network
    /// outage) does not push the verified robot out: its card stays
    /// offline, not the spoofer's, and the robot's own start is taken again
    /// when it is heard again.
    #[test]
    fn an_unverified_sender_never_pushes_a_quiet_verified_robot_out() {
        let mut f = FleetView::new();
        let (robot, spoofer) = (ip("10.0.0.5"), ip("10.0.0.66"));
        f.on_beacon(0, 0, robot, beacon("B1", "nao1", 7, 1), v(1));
        for t in (500..10_000).step_by(500) {
            let lie = limp(beacon("B1", "nao1", 7, 100 + t));
            f.on_beacon(t, t, spoofer, lie, Proof::Refused("unsealed".into()));
            f.tick(t, t);
        }
        let c = f.card("B1").unwrap();
        let p = c.primary().unwrap();
        assert_eq!((p.trust, p.start), (Trust::Verified, Some(1)));
        assert_eq!(claimant_state(p, link(10_000 - p.last_ms)).code, "offline");
        assert!(f.wake_target("B1", 10_000, true).is_err());
        // The robot back: its start is no replay, it is shown again.
        f.on_beacon(10_000, 0, robot, beacon("B1", "nao1", 7, 20), v(1));
        let c = f.card("B1").unwrap();
        assert_eq!(c.primary().unwrap().beacon.seq, 20);
        assert!(c.duplicate, "the spoofer is still heard");
    }

    #[test]
    fn a_restart_is_accepted_only_verified_and_its_old_start_is_then_a_replay() {
        let mut f = FleetView::new();
        let robot = ip("10.0.0.5");
        for seq in 1..=10u64 {
            f.on_beacon(seq * 500, 0, robot, beacon("B1", "nao1", 7, seq), v(1));
        }
        // The beacon service restarts: a new start nonce, seq from 0.
        let mut b = limp(beacon("B1", "nao1", 7, 0));
        f.on_beacon(6_000, 0, robot, b.clone(), v(2));
        let c = f.card("B1").unwrap();
        assert_eq!(c.events[0].kind, "restart");
        assert!(!c.duplicate, "a restart follows the old start");
        assert_eq!(c.primary().unwrap().start, Some(2));
        for seq in 1..10u64 {
            b.seq = seq;
            f.on_beacon(6_000 + seq * 500, 0, robot, b.clone(), v(2));
            f.tick(6_000 + seq * 500, 0);
        }
        assert_eq!(
            f.card("B1").unwrap().claimants.len(),
            1,
            "the old start went"
        );
        // A recorded beacon of the old start (any seq): a replay, flagged,
        // not shown.
        f.on_beacon(
            11_000,
            0,
            ip("10.0.0.66"),
            beacon("B1", "nao1", 7, 11),
            v(1),
        );
        b.seq = 10;
        f.on_beacon(11_000, 0, robot, b.clone(), v(2));
        let c = f.card("B1").unwrap();
        assert!(c.duplicate);
        let p = c.primary().unwrap();
        assert_eq!(
            (p.start, p.beacon.motion),
            (Some(2), Motion::LimpWaitingForWake)
        );
        assert!(f.wake_target("B1", 11_000, true).is_err());
        // A new start whose seal did not verify is no restart.
        let mut g = FleetView::new();
        g.on_beacon(0, 0, robot, beacon("B1", "nao1", 7, 1), v(1));
        g.on_beacon(
            9_000,
            0,
            robot,
            limp(beacon("B1", "nao1", 7, 0)),
            Proof::Refused("bad-mac".into()),
        );
        let c = g.card("B1").unwrap();
        assert_eq!(c.primary().unwrap().start, Some(1));
        assert_eq!(c.primary().unwrap().beacon.motion, Motion::Awake);
    }

    /// Without a key, the spoofer (the robot's body id, name and
    /// nonce, its seq ahead) merges with the robot's claimant; its
    /// interleaving with the robot's own sequence flags the card; one
    /// beacon reordered over a slow link does not.
    #[test]
    fn without_a_key_a_copy_with_its_seq_ahead_is_flagged_as_a_second_sender() {
        let mut f = FleetView::new();
        let (robot, spoofer) = (ip("10.0.0.5"), ip("10.0.0.66"));
        f.on_beacon(0, 0, robot, beacon("B1", "nao1", 7, 10), N);
        // A slow second link delivers one older beacon: no flag.
        f.on_beacon(10, 10, ip("10.0.1.5"), beacon("B1", "nao1", 7, 9), N);
        assert!(!f.card("B1").unwrap().duplicate);
        for (t, seq) in [(500, 11), (1000, 12), (1500, 13)] {
            f.on_beacon(t, t, spoofer, beacon("B1", "nao1", 7, seq + 5), N);
            f.on_beacon(t + 1, t, robot, beacon("B1", "nao1", 7, seq), N);
        }
        let c = f.card("B1").unwrap();
        assert!(c.duplicate, "{:?}", c.events);
        assert!(
            c.events[0].text.contains("second sender"),
            "{:?}",
            c.events[0]
        );
        // The spoofer quiet for 4 s: the flag clears.
        for t in (2_000..7_000).step_by(500) {
            f.on_beacon(t, t, robot, beacon("B1", "nao1", 7, 100 + t), N);
        }
        assert!(!f.card("B1").unwrap().duplicate);
    }

    #[test]
    fn link_is_good_to_2_s_late_to_4_s_then_offline() {
        assert_eq!(link(0), LinkQuality::Good);
        assert_eq!(link(2_000), LinkQuality::Good);
        assert_eq!(link(2_001), LinkQuality::Late);
        assert_eq!(link(4_000), LinkQuality::Late);
        assert_eq!(link(4_001), LinkQuality::Offline);
    }

    #[test]
    fn one_robot_on_wifi_and_wired_is_one_card_with_both_addresses() {
        let mut f = FleetView::new();
        let b = beacon("B1", "nao1", 7, 1);
        assert_eq!(
            f.on_beacon(0, 0, ip("10.0.0.5"), b.clone(), N),
            Taken::Updated {
                new_addr: true,
                verified: false
            }
        );
        // The same datagram over the other link.
        assert_eq!(
            f.on_beacon(1, 1, ip("192.168.1.5"), b.clone(), N),
            Taken::Updated {
                new_addr: true,
                verified: false
            }
        );
        assert_eq!(
            f.on_beacon(500, 500, ip("10.0.0.5"), beacon("B1", "nao1", 7, 2), N),
            Taken::Updated {
                new_addr: false,
                verified: false
            }
        );
        let c = f.card("B1").unwrap();
        assert_eq!(c.claimants.len(), 1);
        assert_eq!(c.addrs(), [ip("10.0.0.5"), ip("192.168.1.5")]);
        assert_eq!(
            c.claimants[0].beacons, 2,
            "the copy over the second link is not a new beacon"
        );
        assert!(!c.duplicate);
        assert_eq!(kinds(c), ["address", "first"]);
        assert_eq!(f.cards().count(), 1);
    }

    #[test]
    fn two_robots_claiming_one_id_are_both_kept_and_flagged_until_one_goes() {
        let mut f = fed(&[
            (0, "10.0.0.5", "nao1", 7, 1),
            (100, "10.0.0.6", "nao2", 9, 1),
            (500, "10.0.0.5", "nao1", 7, 2),
        ]);
        let c = f.card("B1").unwrap();
        assert_eq!(c.claimants.len(), 2);
        assert!(c.duplicate);
        assert_eq!(kinds(c)[0], "duplicate");
        assert!(c.events[0].text.contains("nao2"), "{:?}", c.events[0]);
        assert!(wake_target(c, 500, true)
            .unwrap_err()
            .contains("second sender"));
        // nao2 goes quiet: offline after 4 s, then dropped, flag cleared.
        f.on_beacon(4_000, 4_000, ip("10.0.0.5"), beacon("B1", "nao1", 7, 3), N);
        f.tick(4_200, 4_200);
        let c = f.card("B1").unwrap();
        assert_eq!(c.claimants.len(), 1);
        assert_eq!(c.claimants[0].beacon.name, "nao1");
        assert!(!c.duplicate);
        assert_eq!(kinds(c)[0], "duplicate");
        assert!(kinds(c).contains(&"lost"));
    }

    #[test]
    fn a_new_page_nonce_follows_the_old_one_without_a_duplicate_flag() {
        let mut f = fed(&[
            (0, "10.0.0.5", "nao1", 7, 1),
            (500, "10.0.0.5", "nao1", 7, 2),
            // Rebooted: new nonce, sequence restarted.
            (9_000, "10.0.0.5", "nao1", 8, 0),
        ]);
        let c = f.card("B1").unwrap();
        assert!(!c.duplicate);
        assert_eq!(c.events[0].kind, "new-page");
        f.tick(9_100, 9_100);
        let c = f.card("B1").unwrap();
        assert_eq!(c.claimants.len(), 1);
        assert_eq!(c.claimants[0].beacon.nonce, 8);
    }

    #[test]
    fn trips_rearms_wakes_and_take_overs_are_logged_newest_first() {
        let mut f = FleetView::new();
        let a = ip("10.0.0.5");
        let mut b = beacon("B1", "nao1", 7, 1);
        f.on_beacon(0, 0, a, b.clone(), v(1));
        b.seq = 2;
        b.switch = SwitchPosition::Tripped;
        b.reason = Some("udp".into());
        b.trip_count = 3;
        b.wake_generation = None;
        b.motion = Motion::LimpTripped;
        f.on_beacon(500, 500, a, b.clone(), v(1));
        b.seq = 3;
        b.switch = SwitchPosition::Armed;
        b.reason = None;
        b.wake_generation = Some(3);
        b.motion = Motion::LimpWaitingForWake;
        f.on_beacon(1000, 1000, a, b.clone(), v(1));
        assert_eq!(
            f.wake_target("B1", 1000, true),
            Ok(WakeTarget {
                body_id: "B1".into(),
                nonce: 7,
                generation: 3,
                addrs: vec![a]
            })
        );
        b.seq = 4;
        b.motion = Motion::Awake;
        f.on_beacon(1500, 1500, a, b.clone(), v(1));
        b.seq = 5;
        b.guard.holding = true;
        b.switch = SwitchPosition::Tripped;
        b.reason = Some("guard-heartbeat-lost".into());
        b.trip_count = 4;
        f.on_beacon(2000, 2000, a, b.clone(), v(1));
        b.seq = 6;
        b.page = PageHealth::Damaged("no-magic".into());
        f.on_beacon(2500, 2500, a, b.clone(), v(1));
        let c = f.card("B1").unwrap();
        assert_eq!(
            kinds(c),
            ["damage", "takeover", "trip", "wake", "rearm", "trip", "first"]
        );
        assert_eq!(c.events[5].text, "tripped: udp (trip 3)");
        assert!(c.events[2].text.contains("guard-heartbeat-lost"));
        assert_eq!(c.events[0].at_ms, 2500);
    }

    #[test]
    fn a_trip_and_re_arm_between_two_beacons_is_still_logged() {
        let mut f = fed(&[(0, "10.0.0.5", "nao1", 7, 1)]);
        let a = ip("10.0.0.5");
        let mut b = beacon("B1", "nao1", 7, 2);
        b.trip_count = 3;
        b.wake_generation = Some(3);
        f.on_beacon(500, 500, a, b, N);
        let c = f.card("B1").unwrap();
        assert_eq!(c.events[0].kind, "trip");
        assert!(c.events[0].text.contains("re-armed between two beacons"));
    }

    #[test]
    fn old_reordered_and_repeated_beacons_do_not_roll_the_state_back() {
        let mut f = FleetView::new();
        let a = ip("10.0.0.5");
        let mut tripped = beacon("B1", "nao1", 7, 10);
        tripped.switch = SwitchPosition::Tripped;
        tripped.trip_count = 3;
        f.on_beacon(0, 0, a, tripped.clone(), N);
        // An older armed beacon arriving late over the slower link.
        f.on_beacon(10, 10, ip("10.0.1.5"), beacon("B1", "nao1", 7, 9), N);
        let c = f.card("B1").unwrap();
        assert_eq!(c.claimants[0].beacon.switch, SwitchPosition::Tripped);
        assert_eq!(c.claimants[0].last_ms, 10, "still heard");
        assert_eq!(c.addrs().len(), 2);
    }

    #[test]
    fn beacon_lost_then_back_is_logged_once_each() {
        let mut f = fed(&[(0, "10.0.0.5", "nao1", 7, 1)]);
        let a = ip("10.0.0.5");
        assert!(!f.tick(3_000, 3_000));
        let c = f.card("B1").unwrap();
        assert_eq!(kinds(c), ["first"], "late is not lost");
        assert!(f.tick(4_001, 4_001));
        assert!(!f.tick(6_000, 6_000));
        let c = f.card("B1").unwrap();
        assert_eq!(kinds(c), ["lost", "first"]);
        assert_eq!(c.claimants.len(), 1, "the only claimant stays, offline");
        f.on_beacon(7_000, 7_000, a, beacon("B1", "nao1", 7, 20), N);
        let c = f.card("B1").unwrap();
        assert_eq!(kinds(c), ["back", "lost", "first"]);
        assert_eq!(c.events[0].text, "beacon back after 7.0 s");
    }

    #[test]
    fn state_words_in_priority_order() {
        let mut b = beacon("B1", "n", 1, 1);
        assert_eq!(state(&b, LinkQuality::Good).code, "armed");
        assert_eq!(state(&b, LinkQuality::Late).words, "armed and moving");
        b.motion = Motion::LimpWaitingForWake;
        assert_eq!(
            state(&b, LinkQuality::Good).words,
            "limp, waiting for a wake"
        );
        b.switch = SwitchPosition::Tripped;
        b.reason = Some("chest-button".into());
        assert_eq!(state(&b, LinkQuality::Good).words, "tripped: chest-button");
        b.page = PageHealth::Damaged("no-magic".into());
        assert_eq!(state(&b, LinkQuality::Good).code, "page-damaged");
        let off = state(&b, LinkQuality::Offline);
        assert_eq!(off.code, "offline");
        assert!(
            off.words
                .ends_with("(last heard: page damaged (no-magic): tripped)"),
            "{off:?}"
        );
    }

    #[test]
    fn wake_is_refused_with_a_reason_in_each_wrong_state() {
        let mut f = FleetView::new();
        let a = ip("10.0.0.5");
        let mut b = beacon("B1", "nao1", 7, 1);
        f.on_beacon(0, 0, a, b.clone(), v(1));
        assert!(f
            .wake_target("B1", 0, true)
            .unwrap_err()
            .contains("motion awake"));
        assert!(f.wake_target("B9", 0, true).unwrap_err().contains("B9"));
        b.seq = 2;
        b.motion = Motion::LimpWaitingForWake;
        f.on_beacon(100, 100, a, b.clone(), v(1));
        assert!(f.wake_target("B1", 100, true).is_ok());
        assert_eq!(
            f.wake_target("B1", 100, false).unwrap_err(),
            "network wake needs a key: start the app with --key FILE"
        );
        assert!(f
            .wake_target("B1", 2_101, true)
            .unwrap_err()
            .contains("not fresh"));
        b.seq = 3;
        b.net_wake = false;
        f.on_beacon(200, 200, a, b.clone(), v(1));
        assert!(f
            .wake_target("B1", 200, true)
            .unwrap_err()
            .contains("no team key"));
        b.seq = 4;
        b.net_wake = true;
        b.switch = SwitchPosition::Tripped;
        b.wake_generation = None;
        f.on_beacon(300, 300, a, b, v(1));
        assert!(f
            .wake_target("B1", 300, true)
            .unwrap_err()
            .contains("re-arm"));
    }

    #[test]
    fn cards_are_bounded_and_an_offline_card_makes_room() {
        let mut f = FleetView::new();
        for i in 0..MAX_CARDS {
            let t = f.on_beacon(
                0,
                0,
                ip("10.0.0.5"),
                beacon(&format!("B{i}"), "n", 1, 1),
                v(i as u64),
            );
            assert_eq!(
                t,
                Taken::Updated {
                    new_addr: true,
                    verified: true
                }
            );
        }
        // Every card a verified robot's, none offline: no room, neither
        // for an unverified nor for a verified newcomer.
        let bad = Proof::Refused("bad-mac".into());
        assert_eq!(
            f.on_beacon(
                100,
                100,
                ip("10.0.0.6"),
                beacon("new", "n", 1, 1),
                bad.clone()
            ),
            Taken::Dropped
        );
        assert_eq!(
            f.on_beacon(100, 100, ip("10.0.0.6"), beacon("new", "n", 1, 1), v(99)),
            Taken::Dropped
        );
        assert_eq!(f.dropped(), 2);
        // Everyone but B0 speaks again; B0 goes offline and makes room.
        for i in 1..MAX_CARDS {
            f.on_beacon(
                3_000,
                3_000,
                ip("10.0.0.5"),
                beacon(&format!("B{i}"), "n", 1, 2),
                v(i as u64),
            );
        }
        assert!(matches!(
            f.on_beacon(
                4_500,
                4_500,
                ip("10.0.0.5"),
                beacon("new", "n", 1, 1),
                v(99)
            ),
            Taken::Updated { .. }
        ));
        assert!(f.card("B0").is_none());
        assert!(f.card("new").is_some());
        // A flood of made-up ids that do not verify replaces offline cards
        // and cards with nothing verified, the one heard longest ago
        // first; never the verified robot that is still heard.
        for i in 0..200u64 {
            f.on_beacon(
                7_001 + i,
                0,
                ip("10.0.0.5"),
                beacon("new", "n", 1, 2 + i),
                v(99),
            );
            let t = f.on_beacon(
                7_001 + i,
                0,
                ip("10.0.0.7"),
                beacon(&format!("F{i}"), "n", 1, 1),
                bad.clone(),
            );
            assert!(matches!(t, Taken::Updated { .. }), "{i}: {t:?}");
        }
        assert_eq!(f.cards().count(), MAX_CARDS);
        assert!(f.card("F199").is_some() && f.card("F0").is_none());
        assert!(
            f.card("new").is_some(),
            "the verified robot's card was replaced"
        );
        assert!(f.card("B1").is_none(), "offline cards go first");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { failure_persistence: None, ..Default::default() })]

        /// Any sequence of beacons and ticks (few ids, names, nonces and
        /// addresses, so that they collide): no panic, every bound holds,
        /// a flagged card has two claimants or one whose sequence two
        /// senders interleave (a copied nonce), the log is newest first.
        #[test]
        fn any_beacon_sequence_keeps_the_bounds(steps in proptest::collection::vec(
            (0u64..3_000, 0u8..5, 0u8..3, 0u64..3, 0u8..12, 0u64..40, proptest::bool::ANY, proptest::bool::ANY, 0u8..4),
            1..200,
        )) {
            let mut f = FleetView::new();
            let mut now = 0u64;
            for (dt, body, name, nonce, src, seq, tick, tripped, proof) in steps {
                now += dt;
                if tick {
                    f.tick(now, now);
                    continue;
                }
                let mut b = beacon(&format!("B{body}"), &format!("n{name}"), nonce, seq);
                if tripped {
                    b.switch = SwitchPosition::Tripped;
                    b.trip_count += seq;
                    b.wake_generation = None;
                }
                // No key, sealed by one of two starts, or not verifying.
                let proof = match proof {
                    0 => N,
                    1 | 2 => v(u64::from(proof)),
                    _ => Proof::Refused("bad-mac".into()),
                };
                f.on_beacon(now, now, IpAddr::from([10, 0, 0, src]), b, proof);
                for (_, c) in f.cards() {
                    proptest::prop_assert!(!c.claimants.is_empty());
                    proptest::prop_assert!(c.claimants.len() <= MAX_CLAIMANTS);
                    proptest::prop_assert!(c.claimants.iter().all(|cl| cl.addrs.len() <= MAX_ADDRS));
                    proptest::prop_assert!(c.events.len() <= MAX_EVENTS);
                    proptest::prop_assert!(
                        !c.duplicate
                            || c.claimants.len() >= 2
                            || c.claimants.iter().any(|cl| cl.interleaved.0 >= INTERLEAVED)
                    );
                    proptest::prop_assert!(c.claimants.iter().filter(|c| c.trust == Trust::Unverified).count() <= 1);
                    // What is shown is verified whenever anything is.
                    proptest::prop_assert!(!c.verified() || c.primary().unwrap().trust == Trust::Verified);
                    proptest::prop_assert!(wake_target(c, now, true).is_err() || c.primary().unwrap().trust == Trust::Verified);
                    proptest::prop_assert!(c.events.iter().zip(c.events.iter().skip(1)).all(|(a, b)| a.at_ms >= b.at_ms));
                }
            }
            proptest::prop_assert!(f.cards().count() <= 5);
        }
    }

    #[test]
    fn addresses_claimants_and_events_are_bounded() {
        let mut f = FleetView::new();
        for i in 0..20u64 {
            let src = IpAddr::from([10, 0, 0, i as u8]);
            f.on_beacon(i, i, src, beacon("B1", "nao1", 7, i + 1), N);
        }
        let c = f.card("B1").unwrap();
        assert_eq!(c.claimants[0].addrs.len(), MAX_ADDRS);
        assert_eq!(c.claimants[0].addrs[0].0, IpAddr::from([10, 0, 0, 12]));
        for i in 0..10u64 {
            f.on_beacon(
                100 + i,
                0,
                ip("10.0.0.5"),
                beacon("B1", &format!("x{i}"), i, 1),
                N,
            );
        }
        assert!(f.card("B1").unwrap().claimants.len() <= MAX_CLAIMANTS);
        for i in 0..200 {
            f.note("B1", 200 + i, 0, "stop-sent", "x".into());
        }
        assert_eq!(f.card("B1").unwrap().events.len(), MAX_EVENTS);
    }
}
