#!/usr/bin/env python3
"""The field's driver (docs/field.md), started by scripts/field.sh inside the
operator's network namespace once the namespaces exist.

It starts nao-rs-app and a headless Chromium (Selenium) first, then the five
robots (in their namespaces: nao-rs-sim at SCHED_FIFO 50 with a trace, the
guard, `nao-rs run --controller stand`, the beacon), and runs the checks. Each
check is judged by the robots' simulator traces (CLOCK_MONOTONIC `t_ns`, one
line per frame) and pages (`naoctl status --json`); the app's page is checked
for what it shows, never taken as the evidence. The stop datagrams' times come
from the wire: a packet socket on the operator's port of the bridge (kernel
receive timestamps, converted to CLOCK_MONOTONIC).

`field.py --sniff IFNAME` is that packet socket (run in the bridge's
namespace): one JSON line per UDP datagram to port 7701 or 7703 received on
IFNAME.
"""

import argparse
import hashlib
import hmac
import json
import os
import secrets
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request
from bisect import bisect_right
from pathlib import Path

N_ROBOTS = 5
OP_IP = "10.77.0.2"
BROADCAST = "10.77.0.255"
STOP_PORT, BEACON_PORT, WAKE_PORT = 7701, 7702, 7703
APP_ADDR = "127.0.0.1:8077"
STOP_PREFIX = b"NAO-RS STOP"
WAKE_PREFIX = b"NAO-RS WAKE 1\n"
WAKE_DOMAIN = b"nao-rs wake v1\0\0"
PAGE_NONCE_OFFSET = 112
# The bounds the checks assert (issue "The app", docs/field.md).
ARMED_SHOWN_S = 2.0
STOP_SHOWN_S = 1.0
STOP_LATENCY_MS = 25.0
OFFLINE_SHOWN_S = 5.0


def mono():
    return time.monotonic_ns()


def wait(pred, timeout, step=0.01):
    """pred() until it is truthy (returned) or `timeout` s passed (None)."""
    until = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= until:
            return None
        time.sleep(step)


def ms(ns):
    return ns / 1e6


# ---- the packet socket (bridge namespace) -------------------------------------
SO_TIMESTAMPNS = 35


def sniff(ifname):
    # ETH_P_ALL: on a bridge's port, a socket for one protocol sees nothing
    # (the bridge takes the frame before protocol handlers run; taps run first).
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    s.bind((ifname, 0))
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    print(json.dumps({"ready": True}), flush=True)
    while True:
        data, anc, _flags, addr = s.recvmsg(4096, socket.CMSG_SPACE(16))
        # Frames the bridge sends to the operator are not the operator's.
        if addr[2] == socket.PACKET_OUTGOING:
            continue
        kernel_rt = None
        for level, kind, d in anc:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                sec, nsec = struct.unpack("qq", d[:16])
                kernel_rt = sec * 1_000_000_000 + nsec
        rt1 = time.clock_gettime_ns(time.CLOCK_REALTIME)
        mo = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        rt2 = time.clock_gettime_ns(time.CLOCK_REALTIME)
        t = mo if kernel_rt is None else kernel_rt - ((rt1 + rt2) // 2 - mo)
        if data[12:14] != b"\x08\x00":
            continue
        ip = data[14:]
        if len(ip) < 28 or ip[0] >> 4 != 4 or ip[9] != 17:
            continue
        ihl = (ip[0] & 15) * 4
        total = struct.unpack("!H", ip[2:4])[0]
        udp = ip[ihl:total]
        if len(udp) < 8:
            continue
        sport, dport = struct.unpack("!HH", udp[:4])
        if dport not in (STOP_PORT, WAKE_PORT):
            continue
        print(
            json.dumps(
                {
                    "t": t,
                    "src": socket.inet_ntoa(ip[12:16]),
                    "dst": socket.inet_ntoa(ip[16:20]),
                    "sport": sport,
                    "dport": dport,
                    "payload": udp[8:].hex(),
                }
            ),
            flush=True,
        )


class Wire:
    """The datagrams the operator's namespace sent (port 7701 and 7703), as the
    bridge received them, in order."""

    def __init__(self, field):
        self.lock = threading.Lock()
        self.packets = []
        argv = ["ip", "netns", "exec", field.ns("br"), field.python, "-u", __file__, "--sniff", "op"]
        self.proc = field.procs.spawn("sniffer", argv, field.run_dir / "sniffer.log", stdout_pipe=True)
        first = self.proc.stdout.readline()
        if not first.startswith(b'{"ready"'):
            raise RigError(f"the packet sniffer did not start: {first!r}; see {field.run_dir}/sniffer.log")
        self.out = open(field.run_dir / "wire.jsonl", "ab")
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.out.write(line)
            self.out.flush()
            try:
                p = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                self.packets.append(p)

    def since(self, t, dport, dsts=None):
        with self.lock:
            return [
                p
                for p in self.packets
                if p["t"] >= t and p["dport"] == dport and (dsts is None or p["dst"] in dsts)
            ]

    def first_stop(self, t, dsts):
        """The first stop datagram since `t` to one of `dsts`, or None."""
        for p in self.since(t, STOP_PORT, dsts):
            if bytes.fromhex(p["payload"]).startswith(STOP_PREFIX):
                return p
        return None


# ---- processes ---------------------------------------------------------------------
class RigError(Exception):
    """The rig itself failed (a program did not start): every check after it fails."""


class Procs:
    def __init__(self):
        self.all = []

    def spawn(self, name, argv, log, env=None, stdout_pipe=False):
        out = open(log, "ab")
        e = dict(os.environ)
        e.update(env or {})
        p = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if stdout_pipe else out,
            stderr=out,
            env=e,
        )
        p.field_name = name
        self.all.append(p)
        return p

    def stop_all(self):
        for p in reversed(self.all):
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)
                    p.terminate()
                except ProcessLookupError:
                    pass
        until = time.monotonic() + 2
        for p in self.all:
            try:
                p.wait(max(0.01, until - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


# ---- a robot's simulator trace ---------------------------------------------------
class Trace:
    """The cycle frames of one simulator's trace, read as it grows."""

    def __init__(self, path):
        self.path = path
        self.off = 0
        self.rest = b""
        self.t = []  # t_ns, sorted (one simulator, CLOCK_MONOTONIC)
        self.f = []  # (t_ns, peer_pid, all_off, max_stiffness)

    def poll(self):
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.off)
                data = fh.read()
        except FileNotFoundError:
            return self
        self.off += len(data)
        data = self.rest + data
        lines = data.split(b"\n")
        self.rest = lines.pop()
        for line in lines:
            try:
                j = json.loads(line)
            except ValueError:
                continue
            if not j.get("stiffness_slots"):
                continue  # the start-up's frames carry no stiffness
            self.t.append(j["t_ns"])
            self.f.append((j["t_ns"], j.get("peer_pid", 0), bool(j["all_off"]), j["max_stiffness"]))
        return self

    def after(self, t):
        """Frames received after monotonic time `t` (ns)."""
        self.poll()
        return self.f[bisect_right(self.t, t):]

    def last_before(self, t):
        self.poll()
        i = bisect_right(self.t, t)
        return self.f[i - 1] if i else None

    def first_stiff_after(self, t):
        return next((x for x in self.after(t) if not x[2]), None)

    def first_all_off_after(self, t):
        return next((x for x in self.after(t) if x[2]), None)

    def stiff_between(self, t0, t1):
        return [x for x in self.after(t0) if x[0] <= t1 and not x[2]]


# ---- a robot ---------------------------------------------------------------------
class Robot:
    def __init__(self, field, i):
        self.field = field
        self.i = i
        self.name = f"robot{i}"
        self.ns = field.ns(f"r{i}")
        self.ip = f"10.77.0.1{i}"
        self.body = f"P0000074A05S94F0010{i}"
        self.dir = field.work_dir / self.name
        self.final = field.run_dir / self.name  # where scripts/field.sh copies it at the end
        self.dir.mkdir(parents=True)
        self.page = self.dir / "deathswitch"
        self.sock = self.dir / "sim.sock"
        self.wake_sock = self.dir / "wake.sock"
        self.status_file = self.dir / "status.json"
        self.key = self.dir / "team.key"
        self.trace = Trace(self.dir / "trace.jsonl")
        self.env = {
            "NAO_RS_DEATHSWITCH": str(self.page),
            "NAO_RS_WAKE_SOCKET": str(self.wake_sock),
            "NAO_RS_STATUS": str(self.status_file),
        }
        self.sim = self.guard = self.runtime = self.beacon = None
        self.wakes = []  # monotonic ns just before each wake sent (local or WAKE)
        self.trips = []  # monotonic ns of each trip the driver caused besides the wire's stops
        self.beacon_log = self.dir / "beacon.log"

    def argv(self, *argv):
        return ["ip", "netns", "exec", self.ns, *map(str, argv)]

    def bin(self, name):
        return str(self.field.bin_dir / name)

    def spawn(self, what, *argv, env=None):
        e = dict(self.env)
        e.update(env or {})
        return self.field.procs.spawn(f"{self.name} {what}", self.argv(*argv), self.dir / f"{what}.log", env=e)

    def run(self, *argv, timeout=10):
        e = dict(os.environ)
        e.update(self.env)
        return subprocess.run(self.argv(*argv), capture_output=True, env=e, timeout=timeout)

    def status(self):
        """`naoctl status --json` of the robot's page (a dict; {} when it cannot be read). It only
        reads a file: run without `ip netns exec`, which costs more than naoctl itself."""
        r = subprocess.run([self.bin("naoctl"), "--page", str(self.page), "status", "--json"], capture_output=True, timeout=10)
        try:
            return json.loads(r.stdout)
        except ValueError:
            return {}

    def rearm(self):
        r = self.run(self.bin("naoctl"), "--page", self.page, "rearm", "--yes")
        if r.returncode != 0:
            raise CheckError(f"{self.name}: naoctl rearm --yes failed: {r.stderr.decode(errors='replace').strip()}")

    def local_wake(self):
        self.wakes.append(mono())
        r = self.run(self.bin("nao-rs"), "wake", "--socket", self.wake_sock)
        if r.returncode != 0:
            raise CheckError(f"{self.name}: nao-rs wake failed: {r.stderr.decode(errors='replace').strip()}")

    def nonce(self):
        with open(self.page, "rb") as fh:
            fh.seek(PAGE_NONCE_OFFSET)
            return struct.unpack("<Q", fh.read(8))[0]

    def beacon_log_from(self, off):
        try:
            with open(self.beacon_log, "rb") as fh:
                fh.seek(off)
                return fh.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def beacon_log_len(self):
        try:
            return self.beacon_log.stat().st_size
        except FileNotFoundError:
            return 0


class CheckError(Exception):
    """A check's precondition or action failed: the check fails with this text."""


# ---- the wake datagram, for the refused ones (docs/app.md "The wake datagram") --
def wake_datagram(key, body, nonce, generation, key_id=None):
    m = WAKE_DOMAIN + struct.pack(">I", len(body)) + body.encode() + struct.pack(">QQ", nonce, generation)
    mac = hmac.new(key, m, hashlib.sha256).hexdigest()
    kid = key_id or hashlib.sha256(key).hexdigest()[:8]
    w = {"body": body, "key": kid, "generation": generation, "nonce": f"{nonce:016x}", "mac": mac}
    return WAKE_PREFIX + json.dumps(w, separators=(",", ":")).encode()


# ---- the app and the browser ------------------------------------------------------
# What the driver reads of the app's page (bins/nao-rs-app/src/page.html): a
# card per robot (`#cards .card`) with its body id (`data-body`, else the
# `.body` element's text), its state code (`data-state`: armed, limp, tripped,
# offline, ...), its link (`data-link`: good, late, offline), its words, its
# STOP (`.stop`) and WAKE (`.wake`) buttons; STOP ALL is `#stopall`.
CARD_BODY_JS = "(c.dataset.body || ((c.querySelector('.body') || {}).textContent || '').trim())"
CARDS_JS = (
    "return Array.from(document.querySelectorAll('#cards .card')).map(function (c) {"
    "  return {body: " + CARD_BODY_JS + ", state: c.dataset.state || '', link: c.dataset.link || '',"
    "          text: c.innerText};"
    "});"
)
CARD_BUTTON_JS = (
    "var body = arguments[0], css = arguments[1];"
    "var c = Array.from(document.querySelectorAll('#cards .card')).find(function (c) {"
    "  return " + CARD_BODY_JS + " === body; });"
    "return c ? c.querySelector(css) : null;"
)


class Browser:
    def __init__(self, field):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        o = webdriver.ChromeOptions()
        o.binary_location = field.chromium
        for a in [
            "--headless=new",
            "--no-sandbox",  # as root Chromium refuses to start without it
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-default-apps",
            "--window-size=1400,1100",
        ]:
            o.add_argument(a)
        svc = Service(executable_path=field.chromedriver, log_output=str(field.run_dir / "chromedriver.log"))
        self.d = webdriver.Chrome(options=o, service=svc)
        self.d.set_page_load_timeout(20)
        self.d.set_script_timeout(10)

    def open(self, url):
        self.d.get(url)

    def cards(self):
        return {c["body"]: c for c in self.d.execute_script(CARDS_JS)}

    def button(self, body, css):
        """The card's button (a WebElement), once it is shown; None after 3 s."""

        def shown():
            b = self.d.execute_script(CARD_BUTTON_JS, body, css)
            return b if b is not None and b.is_displayed() else None

        return wait(shown, 3, 0.02)

    def click_stop(self, body):
        b = self.button(body, ".stop")
        if b is None:
            raise CheckError(f"the card of {body} shows no STOP button")
        b.click()

    def click_wake(self, body):
        b = self.button(body, ".wake")
        if b is None:
            raise CheckError(f"the card of {body} shows no WAKE button within 3 s: {self.cards().get(body)}")
        b.click()

    def click_stop_all(self):
        from selenium.webdriver.common.by import By

        self.d.find_element(By.CSS_SELECTOR, "#stopall").click()

    def last_stop(self):
        """What the page says of the last stop it sent (#laststop)."""
        return self.d.execute_script("var e = document.getElementById('laststop'); return e ? e.innerText : '';")

    def press_space(self):
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.keys import Keys

        ActionChains(self.d).send_keys(Keys.SPACE).perform()

    def screenshot(self, path):
        try:
            self.d.save_screenshot(str(path))
            Path(str(path) + ".html").write_text(self.d.page_source)
        except Exception:  # noqa: BLE001 - best effort, for a failure's evidence
            pass

    def quit(self):
        try:
            self.d.quit()
        except Exception:  # noqa: BLE001
            pass


# ---- the field -------------------------------------------------------------------
class Field:
    def __init__(self, a):
        self.run_dir = Path(a.run_dir)
        self.work_dir = Path(a.work_dir or a.run_dir)
        self.bin_dir = Path(a.bin_dir)
        self.prefix = a.ns_prefix
        self.python = a.python
        self.chromium = a.chromium
        self.chromedriver = a.chromedriver
        self.with_app = not a.without_app
        self.procs = Procs()
        self.passed = 0
        self.failed = 0
        self.key = self.run_dir / "team.key"
        self.browser = None
        self.app = None
        self.wire = None
        self.robots = []
        self.stop_latencies = {}
        self.sigstop_at = None

    def ns(self, name):
        return f"{self.prefix}{name}"

    # -- results
    def ok(self, name, detail):
        print(f"PASS {name}: {detail}", flush=True)
        self.passed += 1

    def fail(self, name, detail):
        print(f"FAIL {name}: {detail}", flush=True)
        self.failed += 1
        if self.browser:
            self.browser.screenshot(self.run_dir / f"page-{name.split()[0]}.png")

    def info(self, detail):
        print(f"  info: {detail}", flush=True)

    # -- start-up
    def make_key(self):
        old = os.umask(0o077)
        try:
            self.key.write_bytes(secrets.token_bytes(32))
            for r in self.robots:
                r.key.write_bytes(self.key.read_bytes())
        finally:
            os.umask(old)

    def start_app(self):
        if not self.with_app:
            return
        argv = [str(self.bin_dir / "nao-rs-app"), "--listen", APP_ADDR, "--key", str(self.key)]
        self.app = self.procs.spawn("nao-rs-app", argv, self.run_dir / "app.log")
        if not wait(lambda: self.http_ok("/"), 10, 0.05):
            raise RigError(f"nao-rs-app did not serve http://{APP_ADDR}/ within 10 s; see {self.run_dir}/app.log")

    def http_ok(self, path):
        try:
            with urllib.request.urlopen(f"http://{APP_ADDR}{path}", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    def api(self, path, method="GET"):
        req = urllib.request.Request(f"http://{APP_ADDR}{path}", method=method, data=b"" if method == "POST" else None)
        with urllib.request.urlopen(req, timeout=3) as r:
            body = r.read()
        try:
            return json.loads(body)
        except ValueError:
            return body.decode(errors="replace")

    def start_browser(self):
        t = time.monotonic()
        self.browser = Browser(self)
        if self.with_app:
            self.browser.open(f"http://{APP_ADDR}/")
        self.info(f"Chromium (headless, Selenium) up in {time.monotonic() - t:.1f} s")

    def start_robots(self):
        t = time.monotonic()
        for r in self.robots:
            r.sim = r.spawn(
                "sim", "chrt", "-f", "50", r.bin("nao-rs-sim"), "--socket", r.sock, "--trace", r.trace.path,
                "--body-id", r.body,
            )
        for r in self.robots:
            if not wait(lambda: r.sock.exists(), 10, 0.02):
                raise RigError(f"{r.name}: nao-rs-sim made no socket {r.sock} within 10 s; see {r.final}/sim.log")
        # The guard first (as its unit: SCHED_FIFO 40), then the runtime.
        for r in self.robots:
            r.guard = r.spawn("guard", "chrt", "-f", "40", r.bin("nao-rs-guard"), "--page", r.page, "--link", f"sim:{r.sock}")
        for r in self.robots:
            if not wait(lambda: r.status().get("guard", {}).get("pid") == r.guard.pid, 10, 0.05):
                raise RigError(f"{r.name}: the guard did not publish itself in {r.page} within 10 s; see {r.final}/guard.log")
        for r in self.robots:
            r.runtime = r.spawn(
                "runtime", r.bin("nao-rs"), "run", "--page", r.page, "--link", f"sim:{r.sock}", "--controller", "stand",
                "--wake-socket", r.wake_sock, "--udp-port", STOP_PORT,
            )
        for r in self.robots:
            if not wait(lambda: any(f[1] == r.runtime.pid for f in r.trace.after(0)), 20, 0.05):
                raise RigError(f"{r.name}: the runtime sent no cycle frame within 20 s; see {r.final}/runtime.log")
        if self.with_app:
            for r in self.robots:
                r.beacon = r.spawn(
                    "beacon", r.bin("nao-rs-beacon"),
                    env={
                        # The subnet broadcast of the robot's one interface: 10.77.0.255:7702.
                        "NAO_RS_BEACON": "broadcast",
                        "NAO_RS_ROBOT_NAME": r.name,
                        "NAO_RS_BODY_ID": r.body,
                        "NAO_RS_TEAM_KEY": str(r.key),
                    },
                )
            # The page knows every robot (its first beacon arrived) before any check.
            bodies = {r.body for r in self.robots}
            if not wait(lambda: bodies <= set(self.browser.cards()), 10, 0.05):
                raise RigError(f"the page shows cards for {sorted(set(self.browser.cards()) & bodies)} only, 10 s after the "
                               f"beacons started; see {self.run_dir}/app.log and robotN/beacon.log")
        self.info(f"5 robots up in {time.monotonic() - t:.1f} s (sim, guard, runtime{', beacon, card on the page' if self.with_app else ''})")

    # -- actions: through the page, or (--without-app) the driver's own datagrams
    def send_stops(self, addrs):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        for _ in range(10):
            for a in addrs:
                s.sendto(STOP_PREFIX, (a, STOP_PORT))
            time.sleep(0.005)
        s.close()

    def stop_one(self, r):
        if self.with_app:
            self.browser.click_stop(r.body)
        else:
            threading.Thread(target=self.send_stops, args=([r.ip],)).start()

    def stop_all(self, how):
        if not self.with_app:
            threading.Thread(target=self.send_stops, args=([x.ip for x in self.robots] + [BROADCAST],)).start()
        elif how == "space":
            self.browser.press_space()
        else:
            self.browser.click_stop_all()

    def arm_and_wake(self, robots, timeout=5.0):
        """Re-arm and wake each robot locally (a person at the robot), then wait
        until each sends stiff frames again."""
        t = {}
        for r in robots:
            r.rearm()
            t[r.i] = mono()
            r.local_wake()
        for r in robots:
            if not wait(lambda: r.trace.first_stiff_after(t[r.i]), timeout, 0.02):
                s = r.status()
                raise CheckError(
                    f"{r.name} sent no stiff frame within {timeout} s of its re-arm and wake "
                    f"(page: {s.get('state')}, motion {s.get('motion')}; see {r.final}/runtime.log)"
                )
        return t

    def card(self, body):
        return self.browser.cards().get(body)

    def wait_card(self, body, pred, timeout):
        """Polls the page until the card of `body` satisfies pred: the
        monotonic time (ns) it was seen, or None after `timeout` s."""
        got = wait(lambda: (lambda c: c is not None and pred(c))(self.card(body)), timeout, 0.02)
        return mono() if got else None

    def judge_stop(self, robots, t_action, bound_ms=None):
        """For each robot, the first stop datagram to it (its address or the
        broadcast) after t_action, its first all-off frame after that, and
        stiff frames after that one. Returns ({i: latency_ms}, [problems])."""
        lat, problems = {}, []
        for r in robots:
            p = wait(lambda: self.wire.first_stop(t_action, {r.ip, BROADCAST}), 2)
            if not p:
                problems.append(f"{r.name}: no stop datagram to it on the wire within 2 s")
                continue
            before = r.trace.last_before(p["t"])
            if before is None or before[2]:
                problems.append(f"{r.name}: not stiff before the stop (last frame {before})")
            off = wait(lambda: r.trace.first_all_off_after(p["t"]), 2)
            if not off:
                problems.append(f"{r.name}: no all-off frame within 2 s of the stop")
                continue
            lat[r.i] = ms(off[0] - p["t"])
            if bound_ms is not None and lat[r.i] > bound_ms:
                problems.append(f"{r.name}: first all-off frame {lat[r.i]:.1f} ms after the stop (bound {bound_ms:.0f} ms)")
        time.sleep(0.3)  # frames after the first all-off one, to judge none stiff
        for r in robots:
            if r.i in lat:
                off = r.trace.first_all_off_after(self.wire.first_stop(t_action, {r.ip, BROADCAST})["t"])
                stiff = [f for f in r.trace.after(off[0]) if not f[2]]
                if stiff:
                    problems.append(f"{r.name}: {len(stiff)} stiff frames after its first all-off frame")
            s = r.status()
            if s.get("state") != "tripped" or s.get("reason") != "udp":
                problems.append(f"{r.name}: page {s.get('state')} ({s.get('reason')}), not tripped (udp)")
        return lat, problems

    # ---- the checks ------------------------------------------------------------
    def check_armed(self):
        name = "1 armed"
        self.arm_and_wake(self.robots)
        t_last = max(r.wakes[-1] for r in self.robots)
        firsts = [ms(r.trace.first_stiff_after(r.wakes[-1])[0] - r.wakes[-1]) for r in self.robots]
        pages = [r.status() for r in self.robots]
        bad = [f"{r.name}: {s.get('state')}, motion {s.get('motion')}" for r, s in zip(self.robots, pages)
               if s.get("state") != "armed"]
        if bad:
            return self.fail(name, "pages after the re-arm and wake: " + "; ".join(bad))
        if not self.with_app:
            return self.fail(name, f"robots armed and stiff ({min(firsts):.0f}-{max(firsts):.0f} ms after each wake); page not checked (--without-app)")
        armed_at = {}

        def all_armed():
            now = mono()
            for b, c in self.browser.cards().items():
                if c["state"] == "armed":
                    armed_at.setdefault(b, now)
            return len(armed_at) == N_ROBOTS

        shown = wait(all_armed, ARMED_SHOWN_S + 3, 0.02)
        dt = (mono() - t_last) / 1e9
        each = ", ".join(f"r{r.i} {(armed_at[r.body] - r.wakes[-1]) / 1e9:.2f}" if r.body in armed_at else f"r{r.i} never"
                         for r in self.robots)
        if not shown or dt > ARMED_SHOWN_S:
            cards = self.browser.cards()
            return self.fail(name, f"the page shows {sum(1 for c in cards.values() if c['state'] == 'armed')} of 5 armed "
                             f"{dt:.2f} s after the last wake (bound {ARMED_SHOWN_S} s): "
                             + ", ".join(f"{b[-3:]}={c['state']}" for b, c in sorted(cards.items()))
                             + f"; each card armed after its robot's wake: {each} s")
        self.ok(name, f"the page shows 5 robots armed {dt:.2f} s after the last wake (each card after its robot's wake: "
                f"{each} s); each robot stiff {min(firsts):.0f}-{max(firsts):.0f} ms after its wake, pages armed (motion "
                + "/".join(sorted({s.get('motion', '?') for s in pages})) + ")")

    def check_stop_one(self):
        name = "2 stop-one"
        r3 = self.robots[2]
        others = [r for r in self.robots if r is not r3]
        pre = [r for r in self.robots if r.status().get("state") != "armed"]
        if pre:
            self.arm_and_wake(pre)
        t0 = mono()
        self.stop_one(r3)
        t_click = mono()
        shown = None
        problems = []
        if self.with_app:
            # From the first datagram: the time Selenium's click takes is not the operator's.
            seen = self.wait_card(r3.body, lambda c: c["state"] == "tripped" and "tripped: udp" in c["text"], STOP_SHOWN_S + 2)
            first = self.wire.first_stop(t0, {r3.ip})
            if seen is None or first is None:
                problems.append(f"robot3's card does not say \"tripped: udp\" within {STOP_SHOWN_S + 2} s of the click: {self.card(r3.body)}")
            else:
                shown = (seen - first["t"]) / 1e9
                if shown > STOP_SHOWN_S:
                    problems.append(f"robot3's card said \"tripped: udp\" {shown:.2f} s after the first stop datagram (bound {STOP_SHOWN_S} s)")
        lat, more = self.judge_stop([r3], t0)
        problems += more
        # The others: still armed, still stiff, and no stop datagram went to them.
        time.sleep(0.2)
        t_now = mono()
        for r in others:
            s = r.status()
            if s.get("state") != "armed":
                problems.append(f"{r.name} was tripped too ({s.get('reason')})")
            last = r.trace.last_before(t_now)
            if last is None or last[2]:
                problems.append(f"{r.name} no longer stiff")
        stray = self.wire.since(t0, STOP_PORT, {r.ip for r in others} | {BROADCAST})
        if stray:
            problems.append(f"{len(stray)} stop datagrams went to other robots or the broadcast ({stray[0]['dst']})")
        n_sent = len(self.wire.since(t0, STOP_PORT, {r3.ip}))
        if problems:
            return self.fail(name, "; ".join(problems))
        if not self.with_app:
            return self.fail(name, f"robot3 tripped (udp), first all-off frame {lat[3]:.1f} ms after the first of its "
                             f"{n_sent} datagrams; card not checked (--without-app)")
        self.ok(name, f"robot3 tripped (udp), first all-off frame {lat[3]:.1f} ms after the first of its {n_sent} datagrams, "
                f"none stiff after; the card said \"tripped: udp\" {shown:.2f} s after the first datagram "
                f"(Selenium's click took {ms(t_click - t0):.0f} ms); the 4 others armed and stiff, no datagram to them")

    def check_stop_all(self, how):
        name = f"3 stop-all ({how})"
        pre = [r for r in self.robots if r.status().get("state") != "armed"]
        if pre:
            self.arm_and_wake(pre)
        time.sleep(0.1)
        t0 = mono()
        self.stop_all(how)
        t_click = mono()
        lat, problems = self.judge_stop(self.robots, t0, STOP_LATENCY_MS)
        first = self.wire.first_stop(t0, None)
        if self.with_app and first:
            self.info(f"{how}: the first datagram left {ms(first['t'] - t0):.1f} ms after the click began "
                      f"(the click returned after {ms(t_click - t0):.1f} ms)")
        self.stop_latencies[how] = lat
        if problems:
            return self.fail(name, "; ".join(problems))
        v = sorted(lat.values())
        self.ok(name, f"all 5 tripped (udp); first all-off frame after the first datagram to each: median "
                f"{statistics.median(v):.1f} ms, max {max(v):.1f} ms (bound {STOP_LATENCY_MS:.0f} ms; "
                + ", ".join(f"r{i} {x:.1f}" for i, x in sorted(lat.items())) + "); none stiff after")

    # Check 4: robot 2 re-armed by a person, woken from the page; the wrong
    # key and a replay refused. Each part makes its own starting state.
    def limp_waiting(self, r):
        """Trips (if armed) and re-arms `r`: armed, limp, waiting for a wake.
        Returns the monotonic time of the re-arm."""
        if r.status().get("state") == "armed":
            r.trips.append(mono())
            r.run(r.bin("naoctl"), "--page", r.page, "stop")
            if not wait(lambda: r.status().get("state") == "tripped", 2):
                raise CheckError(f"{r.name}: naoctl stop did not trip it: {r.status()}")
        r.rearm()
        t = mono()
        if not wait(lambda: r.status().get("motion") == "limp-waiting-for-wake", 2):
            s = r.status()
            raise CheckError(f"{r.name}'s page after the re-arm: {s.get('state')}, motion {s.get('motion')}, "
                             "not limp-waiting-for-wake within 2 s")
        return t

    def refusal(self, r, off, what):
        """The beacon's log line since `off` saying a wake was refused, or a CheckError."""
        line = wait(lambda: next((x for x in r.beacon_log_from(off).splitlines() if "refused" in x), None), 1)
        if not line:
            raise CheckError(f"{what}: the beacon's log says nothing of a refusal ({r.beacon_log_from(off).strip()[-200:]!r})")
        return line.strip()

    def send_wake(self, r, datagram):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(datagram, (r.ip, WAKE_PORT))
        s.close()

    def check_limp_card(self):
        name = "4a limp-card"
        r2 = self.robots[1]
        t = self.limp_waiting(r2)
        problems = []
        shown = None
        if self.with_app:
            seen = self.wait_card(r2.body, lambda c: c["state"] == "limp" and "limp, waiting for a wake" in c["text"], 3)
            shown = None if seen is None else (seen - t) / 1e9
            if shown is None:
                problems.append(f"robot2's card does not show \"limp, waiting for a wake\" within 3 s: {self.card(r2.body)}")
        time.sleep(0.3)
        if r2.trace.first_stiff_after(t):
            problems.append("robot2 stiff after the re-arm alone")
        if problems:
            return self.fail(name, "; ".join(problems))
        if not self.with_app:
            return self.fail(name, "page limp-waiting-for-wake, no stiff frame; card not checked (--without-app)")
        self.ok(name, f"naoctl rearm --yes in robot2's namespace: page limp-waiting-for-wake, the card says "
                f"\"limp, waiting for a wake\" {shown:.2f} s after; no stiff frame")

    def check_wrong_key(self):
        name = "4b wrong-key"
        r2 = self.robots[1]
        if r2.status().get("motion") != "limp-waiting-for-wake":
            self.limp_waiting(r2)
        gen = r2.status().get("wake_generation")
        if gen is None:
            raise CheckError(f"robot2 has no wake generation after its re-arm: {r2.status()}")
        nonce = r2.nonce()
        real_id = hashlib.sha256(self.key.read_bytes()).hexdigest()[:8]
        wrong = secrets.token_bytes(32)
        problems, why = [], []
        # Right body, nonce and generation: only the key is wrong.
        for label, d, expect in [
            ("another team's key", wake_datagram(wrong, r2.body, nonce, gen), "wrong-key-id"),
            ("a wrong key under our key's id", wake_datagram(wrong, r2.body, nonce, gen, key_id=real_id), "bad-mac"),
        ]:
            off = r2.beacon_log_len()
            t = mono()
            self.send_wake(r2, d)
            try:
                line = self.refusal(r2, off, label)
                why.append(f"{label}: {line[line.find('wake refused'):][:110] if 'wake refused' in line else line[-110:]}")
                if expect not in line:
                    problems.append(f"{label}: refused, but not as {expect}: {line}")
            except CheckError as e:
                problems.append(str(e))
            time.sleep(0.3)
            if r2.trace.first_stiff_after(t):
                problems.append(f"{label}: robot2 stiff after it")
        if r2.status().get("motion") != "limp-waiting-for-wake":
            problems.append(f"robot2's motion after the wrong keys: {r2.status().get('motion')}")
        if problems:
            return self.fail(name, "; ".join(problems))
        self.ok(name, "refused, no stiff frame, still limp-waiting-for-wake: " + "; ".join(why))

    def check_wake_button(self):
        name = "4c wake"
        r2 = self.robots[1]
        self.recorded_wake = None
        if r2.status().get("motion") != "limp-waiting-for-wake":
            self.limp_waiting(r2)
        if not self.with_app:
            r2.local_wake()
            return self.fail(name, "WAKE not clicked (--without-app); woken with nao-rs wake")
        gen = r2.status().get("wake_generation")
        t0 = mono()
        r2.wakes.append(t0)
        self.browser.click_wake(r2.body)
        problems = []
        stiff = wait(lambda: r2.trace.first_stiff_after(t0), 3)
        pk = wait(lambda: self.wire.since(t0, WAKE_PORT, {r2.ip}), 2)
        if pk:
            self.recorded_wake = (bytes.fromhex(pk[0]["payload"]), gen)
        if not stiff:
            problems.append(f"robot2 not stiff within 3 s of WAKE (page: {r2.status().get('motion')}; beacon log: "
                            f"{r2.beacon_log_from(0).strip()[-200:]!r})")
        if not pk:
            problems.append("no wake datagram to robot2 on the wire")
        if problems:
            return self.fail(name, "; ".join(problems))
        self.ok(name, f"robot2 stiff {ms(stiff[0] - pk[0]['t']):.0f} ms after the WAKE datagram "
                f"({ms(stiff[0] - t0):.0f} ms after the click; {len(pk[0]['payload']) // 2} bytes to {r2.ip}:{WAKE_PORT}, "
                f"generation {gen})")

    def check_replay(self):
        name = "4d replay"
        r2 = self.robots[1]
        if not getattr(self, "recorded_wake", None):
            return self.fail(name, "no recorded wake datagram to replay (4c sent none)")
        recorded, gen = self.recorded_wake
        self.limp_waiting(r2)  # another trip (naoctl stop) and re-arm
        now_gen = r2.status().get("wake_generation")
        off = r2.beacon_log_len()
        t = mono()
        self.send_wake(r2, recorded)
        problems = []
        line = ""
        try:
            line = self.refusal(r2, off, "the replayed wake")
            if "stale-generation" not in line:
                problems.append(f"refused, but not as stale-generation: {line}")
        except CheckError as e:
            problems.append(str(e))
        time.sleep(0.3)
        if r2.trace.first_stiff_after(t):
            problems.append("robot2 stiff after the replayed wake")
        if problems:
            return self.fail(name, "; ".join(problems))
        self.ok(name, f"the WAKE datagram of generation {gen}, replayed byte for byte at generation {now_gen}: refused, "
                f"no stiff frame ({line[line.find('wake refused'):][:110] if 'wake refused' in line else line[-110:]})")

    def check_spoofed_beacon(self):
        """Issue 27 point 2 on the field: a host copies robot2's body id, name
        and nonce and claims "limp, waiting for a wake" at another generation,
        its sequence number ahead, unsealed. The card must say DUPLICATE, keep
        showing robot2's verified state and offer no WAKE; the app must sign
        none (no wake datagram on the wire) and robot2 must stay limp."""
        name = "4e spoofed-beacon"
        r2 = self.robots[1]
        if not self.with_app:
            return self.fail(name, "no app to spoof (--without-app)")
        if r2.status().get("motion") != "limp-waiting-for-wake":
            self.limp_waiting(r2)
        # Positive control: the verified beacon alone gets the WAKE button.
        if self.browser.button(r2.body, ".wake") is None:
            raise CheckError(f"robot2's card offers no WAKE before the spoof: {self.card(r2.body)}")
        card = next((c for c in self.api("/api/robots")["robots"] if c["body"] == r2.body), None)
        if card is None or card["claimants"][0].get("trust") != "verified":
            raise CheckError(f"robot2's card is not verified before the spoof: {card}")
        real = card["claimants"][0]["beacon"]
        t0 = mono()
        done = threading.Event()

        def spoof():
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            for i in range(80):
                if done.is_set():
                    break
                lie = dict(real)
                lie["seq"] = real["seq"] + 1000 + i
                lie["motion"] = "limp-waiting-for-wake"
                lie["wake_generation"] = (real.get("wake_generation") or 0) ^ 1  # another generation, any value
                s.sendto(b"NAO-RS BEACON 1\n" + json.dumps(lie, separators=(",", ":")).encode(), ("127.0.0.1", BEACON_PORT))
                time.sleep(0.05)
            s.close()

        th = threading.Thread(target=spoof)
        th.start()
        problems = []
        try:
            seen = self.wait_card(r2.body, lambda c: "DUPLICATE" in c["text"], 3)
            if seen is None:
                problems.append(f"robot2's card does not say DUPLICATE within 3 s of the spoof: {self.card(r2.body)}")
            btn = self.browser.d.execute_script(CARD_BUTTON_JS, r2.body, ".wake")
            if btn is not None and btn.is_displayed():
                problems.append("robot2's card still offers WAKE")
            card = next((c for c in self.api("/api/robots")["robots"] if c["body"] == r2.body), {})
            c0 = (card.get("claimants") or [{}])[0]
            if not card.get("duplicate") or c0.get("trust") != "verified" or card.get("wake", {}).get("offered"):
                problems.append(f"the JSON: duplicate {card.get('duplicate')}, shown {c0.get('trust')}, wake {card.get('wake')}")
            req = urllib.request.Request(f"http://{APP_ADDR}/api/wake/{r2.body}", method="POST", data=b"",
                                         headers={"x-nao-rs-app": "1"})
            try:
                with urllib.request.urlopen(req, timeout=3) as resp:
                    problems.append(f"POST /api/wake answered {resp.status}, not 409")
            except urllib.error.HTTPError as e:
                if e.code != 409:
                    problems.append(f"POST /api/wake answered {e.code}, not 409")
        finally:
            done.set()
            th.join()
        time.sleep(0.3)
        if self.wire.since(t0, WAKE_PORT, {r2.ip}):
            problems.append("a wake datagram went to robot2")
        if r2.trace.first_stiff_after(t0):
            problems.append("robot2 stiff after the spoof")
        if problems:
            return self.fail(name, "; ".join(problems))
        self.ok(name, f"forged \"limp, waiting for a wake\" beacons for robot2 (unsealed, seq ahead): the card said DUPLICATE "
                f"{(seen - t0) / 1e9:.2f} s after the first, still showed robot2's verified state, offered no WAKE (409), "
                "no wake datagram on the wire, no stiff frame")

    def check_beacon_lost(self):
        r4 = self.robots[3]
        self.arm_and_wake([r4]) if r4.status().get("state") != "armed" or r4.status().get("motion") != "awake" else None
        name = "5a beacon-lost"
        if not self.with_app:
            self.fail(name, "no beacon to kill (--without-app)")
        else:
            t0 = mono()
            r4.beacon.kill()
            r4.beacon.wait()
            seen = {}

            def watch():
                c = self.card(r4.body)
                if c and c["link"] not in seen:
                    seen[c["link"]] = (mono() - t0) / 1e9
                return "offline" in seen

            wait(watch, OFFLINE_SHOWN_S + 2, 0.05)
            shown = ", ".join(f"{k} at {v:.1f} s" for k, v in seen.items())
            if "late" not in seen or "offline" not in seen:
                self.fail(name, f"robot4's card after its beacon was killed: {shown}")
            elif seen["offline"] > OFFLINE_SHOWN_S or seen["late"] > seen["offline"]:
                self.fail(name, f"robot4's card: {shown} (offline bound {OFFLINE_SHOWN_S:.0f} s)")
            else:
                self.ok(name, f"robot4's card after SIGKILL of its beacon: {shown}")
        name = "5b stop-all-unheard"
        t0 = mono()
        self.stop_all("button")
        lat, problems = self.judge_stop([r4], t0, STOP_LATENCY_MS)
        if problems:
            return self.fail(name, "; ".join(problems))
        self.ok(name, f"STOP ALL tripped robot4 (udp) with its beacon dead: first all-off frame {lat[4]:.1f} ms after the first datagram to it, none stiff after")

    def check_take_over(self):
        name = "6 take-over"
        r5 = self.robots[4]
        s = r5.status()
        if s.get("state") != "armed" or s.get("motion") != "awake":
            self.arm_and_wake([r5])
        t0 = mono()
        self.sigstop_at = t0
        r5.trips.append(t0)
        r5.runtime.send_signal(signal.SIGSTOP)
        problems = []
        held = wait(lambda: (lambda s: s if s.get("guard", {}).get("holding_board") else None)(r5.status()), 3, 0.02)
        gframes = wait(lambda: [f for f in r5.trace.after(t0) if f[1] == r5.guard.pid], 3)
        if not held:
            problems.append(f"the guard does not hold robot5's board 3 s after the runtime's SIGSTOP ({r5.status()})")
        if not gframes:
            problems.append("no frame from the guard")
        else:
            stiff = [f for f in r5.trace.after(gframes[0][0]) if not f[2]]
            if stiff:
                problems.append(f"{len(stiff)} stiff frames after the guard's first frame")
        shown = None
        if self.with_app:
            seen = self.wait_card(r5.body, lambda c: "guard holds the board" in c["text"], 3)
            shown = None if seen is None else (seen - t0) / 1e9
            if shown is None:
                problems.append(f"robot5's card does not show the guard's take-over within 3 s: {self.card(r5.body)}")
        if problems:
            return self.fail(name, "; ".join(problems))
        reason = held.get("reason")
        if not self.with_app:
            return self.fail(name, f"the guard took over ({reason}); card not checked (--without-app)")
        self.ok(name, f"the guard took over ({reason}, holds the board), its first frame {ms(gframes[0][0] - t0):.0f} ms "
                f"after the runtime's SIGSTOP, none stiff after; the card said \"guard holds the board\" "
                f"{shown:.2f} s after the SIGSTOP")

    # ---- the run -------------------------------------------------------------------
    CHECKS = [
        ("1 armed", "check_armed", ()),
        ("2 stop-one", "check_stop_one", ()),
        ("3 stop-all (button)", "check_stop_all", ("button",)),
        ("3 stop-all (space)", "check_stop_all", ("space",)),
        ("4a limp-card", "check_limp_card", ()),
        ("4b wrong-key", "check_wrong_key", ()),
        ("4c wake", "check_wake_button", ()),
        ("4d replay", "check_replay", ()),
        ("4e spoofed-beacon", "check_spoofed_beacon", ()),
        ("5 beacon-lost", "check_beacon_lost", ()),
        ("6 take-over", "check_take_over", ()),
    ]

    def run(self):
        t_start = time.monotonic()
        self.robots = [Robot(self, i) for i in range(1, N_ROBOTS + 1)]
        rig_ok = True
        try:
            self.make_key()
            self.start_app()
            self.start_browser()  # before the robots (docs/field.md)
            self.wire = Wire(self)
            self.start_robots()
        except Exception as e:  # noqa: BLE001 - the rig failed: say so loudly
            rig_ok = False
            self.fail("rig", f"{e}" if isinstance(e, RigError) else f"{type(e).__name__}: {e}")
            traceback.print_exc(file=sys.stderr)
        if not self.with_app:
            self.fail("rig", "--without-app: the driver sent the stops and wakes itself, the app's page was not checked")
        for label, meth, args in self.CHECKS:
            if not rig_ok:
                self.fail(label, "not run: the rig did not start")
                continue
            try:
                getattr(self, meth)(*args)
            except CheckError as e:
                self.fail(label, str(e))
            except Exception as e:  # noqa: BLE001 - a check that crashed fails, loudly
                self.fail(label, f"{type(e).__name__}: {e}")
                traceback.print_exc(file=sys.stderr)
            if any(r.sim and r.sim.poll() is not None for r in self.robots):
                self.fail("rig", "a simulator ended during the checks; see its sim.log")
                rig_ok = False
        if rig_ok:
            self.check_no_stray_take_over()
            self.check_audit()
        self.summary(time.monotonic() - t_start)

    def check_no_stray_take_over(self):
        """A guard sends frames only when it took the board over: apart from
        check 6's, a take-over means a runtime missed its beat (a loaded
        machine), and the checks around it are not to be trusted."""
        stray = []
        for r in self.robots:
            until = self.sigstop_at if r.i == 5 and self.sigstop_at else None
            g = [f for f in r.trace.after(0) if f[1] == r.guard.pid and (until is None or f[0] < until)]
            if g:
                stray.append(f"{r.name}: {len(g)} frames from its guard from t_ns {g[0][0]}")
        if stray:
            self.fail("rig", "the guard took a runtime over outside check 6 (a runtime missed its 60 ms beat: "
                      "the machine was too loaded): " + "; ".join(stray))

    def check_audit(self):
        """Over the whole run, per robot: after every trip (a stop datagram to
        it on the wire, naoctl stop, the SIGSTOP), from its first all-off frame
        until the next wake the driver sent, no stiff frame."""
        name = "7 audit"
        problems, n = [], 0
        for r in self.robots:
            trips = sorted([p["t"] for p in self.wire.since(0, STOP_PORT, {r.ip, BROADCAST})
                            if bytes.fromhex(p["payload"]).startswith(STOP_PREFIX)] + r.trips)
            frames = r.trace.after(0)
            last = None
            for t in trips:
                if last is not None and t < last:
                    continue  # inside a window already judged
                n += 1
                nxt = min([w for w in r.wakes if w > t], default=None)
                end = nxt if nxt is not None else (frames[-1][0] + 1 if frames else t + 1)
                off = r.trace.first_all_off_after(t)
                if off is None or off[0] > end:
                    # No all-off frame before the next wake: only no frame at all is right.
                    stiff = r.trace.stiff_between(t, end)
                    if stiff:
                        problems.append(f"{r.name}: stiff frames after the trip at t_ns {t} and no all-off one")
                    last = end
                    continue
                stiff = r.trace.stiff_between(off[0], end)
                if stiff:
                    problems.append(f"{r.name}: {len(stiff)} stiff frames after the trip at t_ns {t}, before any wake "
                                    f"(first at +{ms(stiff[0][0] - off[0]):.1f} ms)")
                last = end
        if problems:
            return self.fail(name, "; ".join(problems))
        frames = sum(len(r.trace.after(0)) for r in self.robots)
        self.ok(name, f"{n} trips on 5 robots, {frames} frames: after each trip's first all-off frame, no stiff "
                "frame before the next wake")

    def summary(self, wall):
        allv = [x for lat in self.stop_latencies.values() for x in lat.values()]
        for how, lat in self.stop_latencies.items():
            if lat:
                v = list(lat.values())
                self.info(f"STOP ALL ({how}): first all-off frame after the first datagram, over {len(v)} robots: "
                          f"median {statistics.median(v):.1f} ms, max {max(v):.1f} ms")
        if allv:
            self.info(f"STOP ALL, both presses: median {statistics.median(allv):.1f} ms, max {max(allv):.1f} ms")
        self.info(f"the driver ran {wall:.1f} s; logs, traces and the page's screenshots in {self.run_dir}")

    def close(self):
        if self.browser:
            self.browser.screenshot(self.run_dir / "page-last.png")
            self.browser.quit()
        self.procs.stop_all()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sniff", metavar="IFNAME")
    ap.add_argument("--run-dir")
    ap.add_argument("--work-dir", help="the robots' directories (tmpfs); default: --run-dir")
    ap.add_argument("--bin-dir")
    ap.add_argument("--ns-prefix", default="nrsf-")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--chromium", default="/usr/lib/chromium/chromium")
    ap.add_argument("--chromedriver", default="/usr/bin/chromedriver")
    ap.add_argument("--without-app", action="store_true")
    a = ap.parse_args()
    if a.sniff:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        return sniff(a.sniff)
    if not a.run_dir or not a.bin_dir:
        ap.error("--run-dir and --bin-dir are required")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    f = Field(a)
    try:
        f.run()
    finally:
        f.close()
    print(f"{f.passed} passed, {f.failed} failed", flush=True)
    return 0 if f.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
