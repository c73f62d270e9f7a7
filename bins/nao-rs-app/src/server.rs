//! The shell: the beacon receiver (a plain thread), the web page, the JSON
//! API and the server-sent events (axum on tokio).
//!
//! | route | what |
//! |---|---|
//! | `GET /` | the page (self-contained: inline CSS, JS, SVG) |
//! | `GET /api/robots` | every card as JSON (the page's model) |
//! | `GET /events` | the same as server-sent events (`event: fleet`), at most 10 a second, at least one a second |
//! | `POST /api/stop/{body}` | STOP one robot; answers with what was sent |
//! | `POST /api/stop-all` | STOP ALL; answers with what was sent and how long it took |
//! | `POST /api/wake/{body}` | WAKE, with the header `x-nao-rs-app: 1` |

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use nao_rs_beacon::auth::{open_beacon, sign, TeamKey};
use nao_rs_beacon::format::{decode, encode, joint_names, BeaconDecodeError, MAX_DATAGRAM, PREFIX};
use nao_rs_beacon::RefusalKind as _;
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::fleet::{claimant_state, link, wake_target, Card, FleetView, Proof, Taken, Trust};
use crate::stop::{Book, Scope, StopOutcome, Stopper};
use crate::AppOptions;

/// The page: one file, nothing from the internet.
pub const PAGE: &str = include_str!("page.html");

/// The page may load nothing from anywhere but this app.
const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                   connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'";

/// The header a WAKE must carry: a web page of another origin cannot set
/// it without the app's consent, so no other site can wake a robot.
pub const WAKE_HEADER: &str = "x-nao-rs-app";

/// How often a wake datagram is sent to each address, 5 ms apart.
const WAKE_COPIES: u32 = 3;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A line on stdout or stderr that never panics: a closed terminal or
/// pipe must not end the app (and with it the operator's STOP button).
pub fn say(err: bool, line: std::fmt::Arguments) {
    use std::io::Write;
    let _ = if err {
        writeln!(std::io::stderr(), "nao-rs-app: {line}")
    } else {
        writeln!(std::io::stdout(), "nao-rs-app: {line}").and_then(|_| std::io::stdout().flush())
    };
}

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Datagrams on the beacon port that were not beacons: the page shows them
/// (a second sender, a wrong version, a flood).
#[derive(Debug, Default)]
struct Bad {
    count: u64,
    by_kind: std::collections::BTreeMap<&'static str, u64>,
    last: Option<(u64, IpAddr, String)>,
}

/// `d` cut to at most 160 bytes at a character boundary.
fn clip(mut d: String) -> String {
    if d.len() > 160 {
        let mut cut = 160;
        while !d.is_char_boundary(cut) {
            cut -= 1;
        }
        d.truncate(cut);
    }
    d
}

impl Bad {
    fn record(&mut self, now_ms: u64, src: IpAddr, e: &BeaconDecodeError) {
        self.count += 1;
        *self.by_kind.entry(e.kind().name()).or_default() += 1;
        self.last = Some((now_ms, src, clip(e.to_string())));
    }
}

/// Everything the shell's threads and tasks share.
pub struct AppState {
    start: Instant,
    fleet: Mutex<FleetView>,
    book: Arc<Mutex<Book>>,
    bad: Mutex<Bad>,
    stopper: Stopper,
    key: Option<TeamKey>,
    wake_sock: UdpSocket,
    wake_port: u16,
    loopback_only: bool,
    changed: watch::Sender<u64>,
    beacon: SocketAddr,
    targets: Vec<SocketAddr>,
    broadcasts: Mutex<Result<Vec<Ipv4Addr>, String>>,
    last_stop: Mutex<Option<StopOutcome>>,
}

impl AppState {
    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn notify(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Takes one datagram heard on the beacon port from `src`.
    pub fn take(&self, datagram: &[u8], src: IpAddr) {
        // A v4-mapped source (beacons received on `::`) is the IPv4 address.
        let src = src.to_canonical();
        let now = self.now_ms();
        match decode(datagram) {
            Ok(b) => {
                let body = b.body_id.clone();
                // With a key only a sealed beacon is shown (docs/app.md
                // "What the app trusts"); without one, nothing can be.
                let proof = match &self.key {
                    None => Proof::NoKey,
                    Some(k) => match open_beacon(k, datagram) {
                        Ok(seal) => Proof::Verified { start: seal.start },
                        Err(e) => {
                            Proof::Refused(clip(format!("{}: {}", e.kind().name(), e.detail())))
                        }
                    },
                };
                let sealed = matches!(proof, Proof::Verified { .. });
                let taken = lock(&self.fleet).on_beacon(now, wall_ms(), src, b, proof);
                // Every robot heard stays reachable by STOP, also one whose
                // card could not be kept.
                let verified = match taken {
                    Taken::Updated { verified, .. } => verified,
                    Taken::Dropped => sealed,
                };
                lock(&self.book).add(&body, src, now, verified);
                self.notify();
            }
            Err(e) => lock(&self.bad).record(now, src, &e),
        }
    }

    /// The page's model: every card, the key, the stop's settings.
    pub fn view(&self) -> Value {
        let now = self.now_ms();
        let have_key = self.key.is_some();
        let (robots, dropped) = {
            let f = lock(&self.fleet);
            let r: Vec<Value> = f
                .cards()
                .map(|(id, c)| robot(id, c, now, have_key))
                .collect();
            (r, f.dropped())
        };
        let bad = {
            let b = lock(&self.bad);
            json!({
                "count": b.count,
                "by_kind": b.by_kind,
                "last": b.last.as_ref().map(|(at, src, d)| json!({
                    "age_ms": now.saturating_sub(*at), "from": src.to_string(), "detail": d,
                })),
            })
        };
        let (bcasts, berr) = match &*lock(&self.broadcasts) {
            Ok(b) => (b.iter().map(ToString::to_string).collect(), None),
            Err(e) => (Vec::new(), Some(e.clone())),
        };
        let (book_addrs, book_evicted, book_refused) = lock(&self.book).counts();
        json!({
            "now_ms": now,
            "wall_ms": wall_ms(),
            // False: no key, nothing shown could be verified.
            "authenticated": have_key,
            "robots": robots,
            "book": {"addresses": book_addrs, "evicted": book_evicted, "refused": book_refused},
            "dropped_ids": dropped,
            "bad": bad,
            "key": self.key.as_ref().map(|k| k.id().to_string()),
            "joints": joint_names(),
            "beacon": self.beacon.to_string(),
            "stop": {
                "broadcast": self.stopper.broadcasts(),
                "broadcasts": bcasts,
                "broadcast_error": berr,
                "targets": self.targets.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "last": *lock(&self.last_stop),
            },
        })
    }
}

fn robot(id: &str, c: &Card, now: u64, have_key: bool) -> Value {
    // The card's own claimant first (the verified one heard last), then
    // the others, newest first.
    let mut claimants: Vec<_> = c.claimants.iter().collect();
    claimants.sort_by_key(|cl| std::cmp::Reverse((cl.trust.rank(), cl.last_ms)));
    let claimants: Vec<Value> = claimants
        .iter()
        .map(|cl| {
            let age = now.saturating_sub(cl.last_ms);
            let l = link(age);
            // What did not verify is never shown: no name, no fields.
            let shown = cl.trust != Trust::Unverified;
            json!({
                "name": cl.label(),
                "trust": cl.trust,
                "why": cl.why,
                "start": cl.start.map(|s| format!("{s:016x}")),
                "addrs": cl.addrs.iter().map(|(a, _)| a.to_string()).collect::<Vec<_>>(),
                "age_ms": age,
                "link": l,
                "state": claimant_state(cl, l),
                "beacons": cl.beacons,
                // The fields as on the wire (0.8, not 0.800000011920929).
                "beacon": if shown {
                    serde_json::from_slice::<Value>(&encode(&cl.beacon)[PREFIX.len()..])
                        .unwrap_or(Value::Null)
                } else {
                    Value::Null
                },
            })
        })
        .collect();
    let wake = match wake_target(c, now, have_key) {
        Ok(_) => json!({"offered": true, "why_not": null}),
        Err(why) => json!({"offered": false, "why_not": why}),
    };
    json!({
        "body": id,
        "verified": c.verified(),
        "duplicate": c.duplicate,
        "addrs": c.addrs().iter().map(ToString::to_string).collect::<Vec<_>>(),
        "claimants": claimants,
        "events": c.events.iter().take(40).collect::<Vec<_>>(),
        "wake": wake,
    })
}

/// Only requests naming this machine by IP or `localhost` are served: a
/// web site whose name was re-pointed at 127.0.0.1 (DNS rebinding) gets
/// nothing.
fn host_ok(h: &HeaderMap) -> bool {
    let Some(host) = h.get(header::HOST).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(n, _)| n)
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<IpAddr>().is_ok()
}

fn refuse(code: StatusCode, why: impl Into<String>) -> Response {
    (code, Json(json!({ "error": why.into() }))).into_response()
}

const BAD_HOST: &str = "the app answers only to an IP address or localhost in the address bar";

async fn index(h: HeaderMap) -> Response {
    if !host_ok(&h) {
        return refuse(StatusCode::FORBIDDEN, BAD_HOST);
    }
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::CACHE_CONTROL, "no-store"),
        ],
        PAGE,
    )
        .into_response()
}

async fn robots(State(s): State<Arc<AppState>>, h: HeaderMap) -> Response {
    if !host_ok(&h) {
        return refuse(StatusCode::FORBIDDEN, BAD_HOST);
    }
    Json(s.view()).into_response()
}

async fn events(State(s): State<Arc<AppState>>, h: HeaderMap) -> Response {
    if !host_ok(&h) {
        return refuse(StatusCode::FORBIDDEN, BAD_HOST);
    }
    let rx = s.changed.subscribe();
    let stream = futures_util::stream::unfold((s, rx, true), |(s, mut rx, first)| async move {
        if !first {
            // A change, or a second for the ages; then at most 10 a second.
            let _ = tokio::time::timeout(Duration::from_secs(1), rx.changed()).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        rx.borrow_and_update();
        let ev = SseEvent::default()
            .event("fleet")
            .data(s.view().to_string());
        Some((Ok::<_, Infallible>(ev), (s, rx, false)))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

async fn stop(s: Arc<AppState>, scope: Scope, clicked: Instant) -> Response {
    let rx = match s.stopper.start(scope.clone(), clicked) {
        Ok(rx) => rx,
        Err(e) => return refuse(StatusCode::NOT_FOUND, e),
    };
    let Ok(o) = rx.await else {
        return refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the stop thread ended without a word",
        );
    };
    let (now, wall) = (s.now_ms(), wall_ms());
    let what = if o.scope == "all" { "STOP ALL" } else { "STOP" };
    // A stop of which no datagram left says so: on the card, on the page
    // (an error answer) and in the last stop's outcome.
    let failed = (o.sent == 0).then(|| {
        format!(
            "{what} NOT SENT: no datagram left ({}){}",
            if o.targets.is_empty() {
                "no address to send to".to_string()
            } else {
                format!("{} refused", o.failed)
            },
            o.last_error
                .as_ref()
                .map_or(String::new(), |e| format!("; last: {e}"))
        )
    });
    let (kind, text) = match &failed {
        Some(e) => ("stop-failed", e.clone()),
        None => (
            "stop-sent",
            format!(
                "{what} sent: {} datagrams to {}{}",
                o.sent,
                o.targets.join(", "),
                o.last_error.as_ref().map_or(String::new(), |e| format!(
                    "; {} refused, last: {e}",
                    o.failed
                ))
            ),
        ),
    };
    {
        let mut f = lock(&s.fleet);
        match &scope {
            Scope::One(b) => f.note(b, now, wall, kind, text),
            Scope::All => {
                let ids: Vec<String> = f.cards().map(|(id, _)| id.clone()).collect();
                for id in ids {
                    f.note(&id, now, wall, kind, text.clone());
                }
            }
        }
    }
    *lock(&s.last_stop) = Some(o.clone());
    s.notify();
    match failed {
        None => Json(o).into_response(),
        Some(e) => {
            let mut v = serde_json::to_value(&o).unwrap_or_else(|_| json!({}));
            v["error"] = Value::from(e);
            (StatusCode::BAD_GATEWAY, Json(v)).into_response()
        }
    }
}

async fn stop_one(
    State(s): State<Arc<AppState>>,
    Path(body): Path<String>,
    h: HeaderMap,
) -> Response {
    let clicked = Instant::now();
    if !host_ok(&h) {
        return refuse(StatusCode::FORBIDDEN, BAD_HOST);
    }
    stop(s, Scope::One(body), clicked).await
}

async fn stop_all(State(s): State<Arc<AppState>>, h: HeaderMap) -> Response {
    let clicked = Instant::now();
    if !host_ok(&h) {
        return refuse(StatusCode::FORBIDDEN, BAD_HOST);
    }
    stop(s, Scope::All, clicked).await
}

async fn wake(State(s): State<Arc<AppState>>, Path(body): Path<String>, h: HeaderMap) -> Response {
    if !host_ok(&h) {
        return refuse(StatusCode::FORBIDDEN, BAD_HOST);
    }
    if h.get(WAKE_HEADER).and_then(|v| v.to_str().ok()) != Some("1") {
        return refuse(
            StatusCode::FORBIDDEN,
            "a wake needs the header `x-nao-rs-app: 1` (the page sends it; other web sites cannot)",
        );
    }
    let now = s.now_ms();
    let t = match lock(&s.fleet).wake_target(&body, now, s.key.is_some()) {
        Ok(t) => t,
        Err(why) => return refuse(StatusCode::CONFLICT, why),
    };
    let Some(key) = &s.key else {
        return refuse(
            StatusCode::CONFLICT,
            "network wake needs a key: start the app with --key FILE",
        );
    };
    let bytes = sign(key, &t.body_id, t.nonce, t.generation).encode();
    let dests: Vec<SocketAddr> = t
        .addrs
        .iter()
        .map(|a| SocketAddr::new(*a, s.wake_port))
        .filter(|d| !s.loopback_only || d.ip().is_loopback())
        .collect();
    let mut sent = 0u32;
    let mut last_error = None;
    for copy in 0..WAKE_COPIES {
        if copy > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for d in &dests {
            match s.wake_sock.send_to(&bytes, d) {
                Ok(_) => sent += 1,
                Err(e) => last_error = Some(format!("{d}: {e}")),
            }
        }
    }
    let to: Vec<String> = dests.iter().map(ToString::to_string).collect();
    let (kind, text) = if sent > 0 {
        (
            "wake-sent",
            format!(
                "WAKE sent (key {}, generation {}, nonce {:016x}) to {}",
                key.id(),
                t.generation,
                t.nonce,
                to.join(", ")
            ),
        )
    } else {
        (
            "wake-failed",
            format!(
                "WAKE not sent: {}",
                last_error.clone().unwrap_or_else(|| "no address".into())
            ),
        )
    };
    lock(&s.fleet).note(&body, s.now_ms(), wall_ms(), kind, text);
    s.notify();
    let code = if sent > 0 {
        StatusCode::OK
    } else {
        StatusCode::BAD_GATEWAY
    };
    (
        code,
        Json(json!({
            "sent": sent, "to": to, "key": key.id(), "generation": t.generation,
            "nonce": format!("{:016x}", t.nonce), "last_error": last_error,
        })),
    )
        .into_response()
}

/// The routes over `s`.
pub fn router(s: Arc<AppState>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/api/robots", get(robots))
        .route("/events", get(events))
        .route("/api/stop/{body}", post(stop_one))
        .route("/api/stop-all", post(stop_all))
        .route("/api/wake/{body}", post(wake))
        .with_state(s)
}

fn receive(s: Arc<AppState>, sock: UdpSocket) {
    // One byte more than a beacon may have: a longer one is seen as
    // oversized, not cut to size.
    let mut buf = vec![0u8; MAX_DATAGRAM + 1];
    loop {
        match sock.recv_from(&mut buf) {
            Ok((n, src)) => s.take(&buf[..n], src.ip()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                say(true, format_args!("receiving beacons failed: {e}"));
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// Runs the app until the process ends; an error names what could not be
/// had and the option that changes it.
pub fn run(cfg: AppOptions) -> Result<(), String> {
    let key = match &cfg.key {
        Some(p) => Some(TeamKey::read(p).map_err(|e| e.to_string())?),
        None => None,
    };
    let beacon_sock = UdpSocket::bind(cfg.beacon).map_err(|e| {
        format!(
            "cannot listen for beacons on UDP {}: {e}; is another nao-rs-app running? \
             choose another with --beacon-port",
            cfg.beacon
        )
    })?;
    let beacon = beacon_sock.local_addr().map_err(|e| e.to_string())?;
    let wake_bind = if cfg.loopback_only {
        "127.0.0.1:0"
    } else {
        "0.0.0.0:0"
    };
    let wake_sock = UdpSocket::bind(wake_bind)
        .map_err(|e| format!("cannot open the wake's UDP socket on {wake_bind}: {e}"))?;
    let book = Arc::new(Mutex::new(Book::default()));
    let enumerate: Option<crate::stop::Enumerate> =
        cfg.broadcast.then_some(nao_rs_beacon::broadcast_addresses);
    let stopper = Stopper::new(
        cfg.stop_port,
        enumerate,
        cfg.targets.clone(),
        cfg.loopback_only,
        book.clone(),
    )?;
    let broadcasts = if cfg.broadcast {
        nao_rs_beacon::broadcast_addresses()
    } else {
        Ok(Vec::new())
    };
    let (changed, _) = watch::channel(0u64);
    let shared = Arc::new(AppState {
        start: Instant::now(),
        fleet: Mutex::new(FleetView::new()),
        book,
        bad: Mutex::new(Bad::default()),
        stopper,
        key,
        wake_sock,
        wake_port: cfg.wake_port,
        loopback_only: cfg.loopback_only,
        changed,
        beacon,
        targets: cfg.targets.clone(),
        broadcasts: Mutex::new(broadcasts),
        last_stop: Mutex::new(None),
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the web server's threads: {e}"))?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(cfg.listen).await.map_err(|e| {
            format!(
                "cannot serve the page on {}: {e}; choose another address with --listen",
                cfg.listen
            )
        })?;
        let http = listener.local_addr().map_err(|e| e.to_string())?;
        say(false, format_args!("page http://{http}/ beacons udp {beacon}"));
        match &shared.key {
            Some(k) => say(false, format_args!("team key {} (network wake on)", k.id())),
            None => say(false, format_args!("no --key: network wake off (STOP needs no key)")),
        }
        if !cfg.broadcast {
            say(false, format_args!("--no-broadcast: STOP ALL goes to robots heard and --target only"));
        }
        if !http.ip().is_loopback() {
            say(false, format_args!("the page is reachable from the network at {http}: anyone there can STOP and WAKE"));
        }
        let r = shared.clone();
        std::thread::Builder::new()
            .name("beacons".into())
            .spawn(move || receive(r, beacon_sock))
            .map_err(|e| format!("cannot start the beacon receiver thread: {e}"))?;
        let t = shared.clone();
        let do_broadcast = cfg.broadcast;
        tokio::spawn(async move {
            let mut n = 0u64;
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tick.tick().await;
                n += 1;
                if lock(&t.fleet).tick(t.now_ms(), wall_ms()) {
                    t.notify();
                }
                if do_broadcast && n % 8 == 0 {
                    *lock(&t.broadcasts) = nao_rs_beacon::broadcast_addresses();
                }
            }
        });
        axum::serve(listener, router(shared))
            .await
            .map_err(|e| format!("the web server stopped: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hm(host: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, host.parse().unwrap());
        h
    }

    #[test]
    fn only_ip_and_localhost_hosts_are_served() {
        assert!(host_ok(&hm("127.0.0.1:8077")));
        assert!(host_ok(&hm("localhost:8077")));
        assert!(host_ok(&hm("LOCALHOST")));
        assert!(host_ok(&hm("[::1]:8077")));
        assert!(host_ok(&hm("10.0.0.2:8077")));
        assert!(host_ok(&HeaderMap::new()));
        assert!(!host_ok(&hm("evil.example:8077")));
        assert!(!host_ok(&hm("localhost.evil.example")));
        assert!(!host_ok(&hm("[evil]:80")));
    }

    #[test]
    fn the_page_needs_nothing_from_the_internet() {
        for needle in ["http://", "https://", "src=\"//", "@import", "url("] {
            assert!(!PAGE.contains(needle), "the page refers to {needle}");
        }
        for needed in [
            "/api/stop-all",
            "/events",
            "EventSource",
            "x-nao-rs-app",
            "<svg",
        ] {
            assert!(PAGE.contains(needed), "the page lacks {needed}");
        }
    }
}
