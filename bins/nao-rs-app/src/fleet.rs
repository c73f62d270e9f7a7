//! The app's functional core: one card per body id, fed with beacons and
//! the time, no I/O. Times are passed in: `now_ms` is the app's monotonic
//! clock (ms since it started), `wall_ms` Unix ms for display only.
//!
//! A card holds one *claimant* per (robot name, page nonce) heard with
//! that body id. One robot heard on wifi and wired at once is one claimant
//! with two addresses. A robot whose page was made whole again (reboot,
//! repair) gets a new nonce: a new claimant follows the old one, whose
//! beacons stop, and the old one is dropped once it is offline. Two
//! claimants heard in overlapping spans are two robots claiming one body
//! id: both are shown, the card is flagged, and WAKE is refused.

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

/// A robot heard with a card's body id.
#[derive(Debug, Clone, PartialEq)]
pub struct Claimant {
    /// Its last beacon.
    pub beacon: Beacon,
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
}

impl Claimant {
    fn same_robot(&self, b: &Beacon) -> bool {
        self.beacon.name == b.name && self.beacon.nonce == b.nonce
    }
}

/// Everything known about one body id.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Card {
    /// Newest heard last.
    pub claimants: Vec<Claimant>,
    /// Newest first.
    pub events: VecDeque<CardEvent>,
    /// Two claimants heard in overlapping spans and not offline.
    pub duplicate: bool,
}

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

    /// The claimant heard last.
    pub fn primary(&self) -> Option<&Claimant> {
        self.claimants.iter().max_by_key(|c| c.last_ms)
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
}

/// What [`FleetView::on_beacon`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    /// The beacon updated a card.
    Updated {
        /// The source address was new to the card (the stop's address book
        /// needs it).
        new_addr: bool,
    },
    /// A new body id beyond [`MAX_CARDS`] with no offline card to replace.
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
    /// `offline`, `page-damaged`, `tripped`, `limp`, `bring-up`, `armed`,
    /// `armed-idle`: the page colours by it.
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

    /// Takes a beacon heard from `src`.
    pub fn on_beacon(&mut self, now_ms: u64, wall_ms: u64, src: IpAddr, b: Beacon) -> Taken {
        if !self.cards.contains_key(&b.body_id) && self.cards.len() >= MAX_CARDS {
            let oldest = self
                .cards
                .iter()
                .filter_map(|(id, c)| c.primary().map(|p| (p.last_ms, id)))
                .min()
                .filter(|(last, _)| link(now_ms.saturating_sub(*last)) == LinkQuality::Offline)
                .map(|(_, id)| id.clone());
            match oldest {
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
        let mut new_addr = !card.addrs().contains(&src);
        match card.claimants.iter().position(|c| c.same_robot(&b)) {
            Some(i) => {
                let events = {
                    let c = &mut card.claimants[i];
                    let mut ev = Vec::new();
                    if c.lost {
                        let gone = now_ms.saturating_sub(c.last_ms);
                        ev.push((
                            "back",
                            format!("beacon back after {:.1} s", gone as f64 / 1000.0),
                        ));
                        c.lost = false;
                    }
                    let prev_seq = c.beacon.seq;
                    let reordered = b.seq < prev_seq && prev_seq - b.seq <= REORDER_WINDOW;
                    if b.seq != prev_seq && !reordered {
                        ev.extend(changes(&c.beacon, &b));
                        c.beacon = b;
                        c.beacons += 1;
                    }
                    c.last_ms = c.last_ms.max(now_ms);
                    if let Some(a) = c.addrs.iter_mut().find(|(a, _)| *a == src) {
                        a.1 = now_ms;
                    } else {
                        ev.push(("address", format!("also heard at {src}")));
                        c.addrs.push((src, now_ms));
                        if c.addrs.len() > MAX_ADDRS {
                            c.addrs.remove(0);
                        }
                    }
                    ev
                };
                for (k, t) in events {
                    card.log(now_ms, wall_ms, k, t);
                }
            }
            None => {
                let first = card.claimants.is_empty();
                let (kind, text) = if first {
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
                card.claimants.push(Claimant {
                    beacon: b,
                    first_ms: now_ms,
                    last_ms: now_ms,
                    addrs: vec![(src, now_ms)],
                    beacons: 1,
                    lost: false,
                });
                if card.claimants.len() > MAX_CLAIMANTS {
                    // The one heard longest ago goes.
                    if let Some(i) =
                        (0..card.claimants.len()).min_by_key(|&i| card.claimants[i].last_ms)
                    {
                        card.claimants.remove(i);
                    }
                }
                new_addr = true;
            }
        }
        update_duplicate(card, now_ms, wall_ms);
        Taken::Updated { new_addr }
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
                        c.beacon.name,
                        age as f64 / 1000.0
                    ));
                }
            }
            // An offline claimant goes once another one is not offline.
            let any_alive = card
                .claimants
                .iter()
                .any(|c| link(now_ms.saturating_sub(c.last_ms)) != LinkQuality::Offline);
            if any_alive {
                card.claimants
                    .retain(|c| link(now_ms.saturating_sub(c.last_ms)) != LinkQuality::Offline);
            } else if card.claimants.len() > 1 {
                let newest = card.claimants.iter().map(|c| c.last_ms).max().unwrap_or(0);
                card.claimants.retain(|c| c.last_ms == newest);
                card.claimants.truncate(1);
            }
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
    /// one claimant's last beacon is good, armed, limp waiting for a wake,
    /// with a key on the robot and a sound page, and the app has a key.
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
    if card.duplicate {
        return Err("two robots claim this body id: wake refused until one is gone".into());
    }
    let c = card.primary().ok_or("no beacon heard")?;
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
    if !have_key {
        return Err("network wake needs a key: start the app with --key FILE".into());
    }
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
                    format!("{:?} at {}", c.beacon.name, a.join(", "))
                })
                .collect();
            format!("two robots claim this body id: {}", names.join("; "))
        } else {
            "only one robot claims this body id again".into()
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
        ev.push((
            "rearm",
            format!("re-armed by a person (generation {})", b.trip_count),
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

    /// A fleet fed, in order, beacons of body id B1 heard as `(ms, from,
    /// name, nonce, seq)` (the app's clock and the wall clock alike).
    fn fed(heard: &[(u64, &str, &str, u64, u64)]) -> FleetView {
        let mut f = FleetView::new();
        for &(ms, from, name, nonce, seq) in heard {
            f.on_beacon(ms, ms, ip(from), beacon("B1", name, nonce, seq));
        }
        f
    }

    fn kinds(c: &Card) -> Vec<&'static str> {
        c.events.iter().map(|e| e.kind).collect()
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
            f.on_beacon(0, 0, ip("10.0.0.5"), b.clone()),
            Taken::Updated { new_addr: true }
        );
        // The same datagram over the other link.
        assert_eq!(
            f.on_beacon(1, 1, ip("192.168.1.5"), b.clone()),
            Taken::Updated { new_addr: true }
        );
        assert_eq!(
            f.on_beacon(500, 500, ip("10.0.0.5"), beacon("B1", "nao1", 7, 2)),
            Taken::Updated { new_addr: false }
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
            .contains("two robots"));
        // nao2 goes quiet: offline after 4 s, then dropped, flag cleared.
        f.on_beacon(4_000, 4_000, ip("10.0.0.5"), beacon("B1", "nao1", 7, 3));
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
        f.on_beacon(0, 0, a, b.clone());
        b.seq = 2;
        b.switch = SwitchPosition::Tripped;
        b.reason = Some("udp".into());
        b.trip_count = 3;
        b.wake_generation = None;
        b.motion = Motion::LimpTripped;
        f.on_beacon(500, 500, a, b.clone());
        b.seq = 3;
        b.switch = SwitchPosition::Armed;
        b.reason = None;
        b.wake_generation = Some(3);
        b.motion = Motion::LimpWaitingForWake;
        f.on_beacon(1000, 1000, a, b.clone());
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
        f.on_beacon(1500, 1500, a, b.clone());
        b.seq = 5;
        b.guard.holding = true;
        b.switch = SwitchPosition::Tripped;
        b.reason = Some("guard-heartbeat-lost".into());
        b.trip_count = 4;
        f.on_beacon(2000, 2000, a, b.clone());
        b.seq = 6;
        b.page = PageHealth::Damaged("no-magic".into());
        f.on_beacon(2500, 2500, a, b.clone());
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
        f.on_beacon(500, 500, a, b);
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
        f.on_beacon(0, 0, a, tripped.clone());
        // An older armed beacon arriving late over the slower link.
        f.on_beacon(10, 10, ip("10.0.1.5"), beacon("B1", "nao1", 7, 9));
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
        f.on_beacon(7_000, 7_000, a, beacon("B1", "nao1", 7, 20));
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
        f.on_beacon(0, 0, a, b.clone());
        assert!(f
            .wake_target("B1", 0, true)
            .unwrap_err()
            .contains("motion awake"));
        assert!(f.wake_target("B9", 0, true).unwrap_err().contains("B9"));
        b.seq = 2;
        b.motion = Motion::LimpWaitingForWake;
        f.on_beacon(100, 100, a, b.clone());
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
        f.on_beacon(200, 200, a, b.clone());
        assert!(f
            .wake_target("B1", 200, true)
            .unwrap_err()
            .contains("no team key"));
        b.seq = 4;
        b.net_wake = true;
        b.switch = SwitchPosition::Tripped;
        b.wake_generation = None;
        f.on_beacon(300, 300, a, b);
        assert!(f
            .wake_target("B1", 300, true)
            .unwrap_err()
            .contains("re-arm"));
    }

    #[test]
    fn cards_are_bounded_and_an_offline_card_makes_room() {
        let mut f = FleetView::new();
        for i in 0..MAX_CARDS {
            let t = f.on_beacon(0, 0, ip("10.0.0.5"), beacon(&format!("B{i}"), "n", 1, 1));
            assert_eq!(t, Taken::Updated { new_addr: true });
        }
        assert_eq!(
            f.on_beacon(100, 100, ip("10.0.0.5"), beacon("new", "n", 1, 1)),
            Taken::Dropped
        );
        assert_eq!(f.dropped(), 1);
        // Everyone but B0 speaks again; B0 goes offline and makes room.
        for i in 1..MAX_CARDS {
            f.on_beacon(
                3_000,
                3_000,
                ip("10.0.0.5"),
                beacon(&format!("B{i}"), "n", 1, 2),
            );
        }
        assert!(matches!(
            f.on_beacon(4_500, 4_500, ip("10.0.0.5"), beacon("new", "n", 1, 1)),
            Taken::Updated { .. }
        ));
        assert!(f.card("B0").is_none());
        assert!(f.card("new").is_some());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { failure_persistence: None, ..Default::default() })]

        /// Any sequence of beacons and ticks (few ids, names, nonces and
        /// addresses, so that they collide): no panic, every bound holds,
        /// a flagged card has two claimants, the log is newest first.
        #[test]
        fn any_beacon_sequence_keeps_the_bounds(steps in proptest::collection::vec(
            (0u64..3_000, 0u8..5, 0u8..3, 0u64..3, 0u8..12, 0u64..40, proptest::bool::ANY, proptest::bool::ANY),
            1..200,
        )) {
            let mut f = FleetView::new();
            let mut now = 0u64;
            for (dt, body, name, nonce, src, seq, tick, tripped) in steps {
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
                f.on_beacon(now, now, IpAddr::from([10, 0, 0, src]), b);
                for (_, c) in f.cards() {
                    proptest::prop_assert!(!c.claimants.is_empty());
                    proptest::prop_assert!(c.claimants.len() <= MAX_CLAIMANTS);
                    proptest::prop_assert!(c.claimants.iter().all(|cl| cl.addrs.len() <= MAX_ADDRS));
                    proptest::prop_assert!(c.events.len() <= MAX_EVENTS);
                    proptest::prop_assert!(!c.duplicate || c.claimants.len() >= 2);
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
            f.on_beacon(i, i, src, beacon("B1", "nao1", 7, i + 1));
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
            );
        }
        assert!(f.card("B1").unwrap().claimants.len() <= MAX_CLAIMANTS);
        for i in 0..200 {
            f.note("B1", 200 + i, 0, "stop-sent", "x".into());
        }
        assert_eq!(f.card("B1").unwrap().events.len(), MAX_EVENTS);
    }
}
