//! `nao-rs wake`: a person wakes the robot (after every start of the
//! runtime, and after a re-arm). Never re-arms. It reads the page (read
//! only: `deathswitch::inspect`) and sends the wake generation it finds
//! (`wake <generation>`: a mix of the last re-arm's random nonce and the
//! running runtime's); while the switch is tripped, the page lost or no
//! runtime registered there is none, and it refuses with the fix and a
//! non-zero exit (an armed page naming no live runtime is looked at again
//! for up to 3 s: a runtime serves its wake socket just before it
//! registers). The runtime counts the wake only if the page still reads
//! that generation when its cycle reads it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nao_runtime::wake;

/// Options of `nao-rs wake`.
#[derive(clap::Args, Debug)]
pub struct WakeArgs {
    /// The wake socket (default: $NAO_RS_WAKE_SOCKET, or wake.sock next to
    /// the death switch page).
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// The death switch page (default: $NAO_RS_DEATHSWITCH or
    /// /run/nao-rs/deathswitch).
    #[arg(long)]
    pub page: Option<PathBuf>,
}

/// What one read-only look at the page says (pure): the generation to
/// wake in, or why not.
pub fn generation_of(i: &deathswitch::Inspection, page: &Path) -> Result<u64, String> {
    if let Some(d) = i.damage {
        return Err(format!(
            "the death switch page {} is damaged ({d}): it counts as tripped (page-lost). \
             Re-arm first with `naoctl rearm` (it makes the page whole), then wake",
            page.display()
        ));
    }
    let s = &i.snapshot;
    s.wake_generation().ok_or_else(|| {
        if s.armed {
            return format!(
                "no runtime is registered in the death switch page {}: start `nao-rs run`, \
                 then wake",
                page.display()
            );
        }
        let r = s.reason.map_or("tripped", deathswitch::Reason::name);
        format!("tripped ({r}); re-arm first with `naoctl rearm`, then wake")
    })
}

/// How long `nao-rs wake` waits for a runtime to register in an armed
/// page (a runtime serves its wake socket a moment before it registers,
/// and a restarted one replaces a dead predecessor's registration).
const REGISTRATION_WAIT: Duration = Duration::from_secs(3);

/// One look: the generation, `Ok(None)` while the page is armed but names
/// no live runtime (none registered yet, or a dead one: its generation is
/// not the next runtime's), or why there is no wake to send.
fn look(page: &Path) -> Result<Option<u64>, String> {
    let i = deathswitch::inspect(page)
        .map_err(|e| format!("cannot read the death switch page: {e}"))?;
    let s = &i.snapshot;
    if i.damage.is_none() && s.armed {
        let live = s.driver_pid.is_some_and(|pid| {
            deathswitch::process::ProcessIdentity {
                pid,
                start: s.driver_start,
            }
            .is_alive()
        });
        if !live {
            return Ok(None);
        }
    }
    generation_of(&i, page).map(Some)
}

/// The page's wake generation, read twice: both looks must agree (a trip
/// between them, or within one look, is not taken for an armed switch). An
/// armed page naming no live runtime is looked at again, every 10 ms, for
/// up to [`REGISTRATION_WAIT`].
fn read_generation(page: &Path) -> Result<u64, String> {
    let t0 = Instant::now();
    let mut changed = 0;
    loop {
        match (look(page)?, look(page)?) {
            (Some(a), Some(b)) if a == b => return Ok(a),
            (Some(_), Some(_)) => changed += 1,
            _ if t0.elapsed() >= REGISTRATION_WAIT => {
                return Err(format!(
                    "no running runtime is registered in the death switch page {} \
                     (waited {} s): start `nao-rs run`, then wake",
                    page.display(),
                    REGISTRATION_WAIT.as_secs()
                ))
            }
            _ => std::thread::sleep(Duration::from_millis(10)),
        }
        if changed >= 5 {
            return Err(format!(
                "the death switch page {} changed at every look (trips in a row?); try again",
                page.display()
            ));
        }
    }
}

/// Runs `nao-rs wake`.
pub fn main(args: WakeArgs) -> Result<(), String> {
    let page = args.page.unwrap_or_else(deathswitch::default_path);
    let path = args.socket.unwrap_or_else(|| wake::socket_path(&page));
    let g = read_generation(&page)?;
    wake::send(&path, g).map_err(|e| e.to_string())?;
    println!(
        "sent a wake in generation {g} through {} (counts while the page stays armed in it)",
        path.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inspection(
        armed: bool,
        count: u64,
        damage: Option<deathswitch::Damage>,
    ) -> deathswitch::Inspection {
        deathswitch::Inspection {
            snapshot: deathswitch::Snapshot {
                armed,
                reason: (!armed).then_some(deathswitch::Reason::Naoctl),
                trip_count: count,
                driver_pid: Some(7),
                arm_nonce: 0xa1,
                driver_nonce: 0xd1,
                ..Default::default()
            },
            damage,
            len: 144,
        }
    }

    #[test]
    fn a_wake_is_sent_only_in_an_armed_generation_of_a_sound_page() {
        let p = Path::new("/run/nao-rs/deathswitch");
        let i = inspection(true, 4, None);
        let g = generation_of(&i, p).unwrap();
        assert_eq!(Some(g), i.snapshot.wake_generation());
        assert_ne!(g, 4, "not the trip count");
        let e = generation_of(&inspection(false, 4, None), p).unwrap_err();
        assert_eq!(
            e,
            "tripped (naoctl); re-arm first with `naoctl rearm`, then wake"
        );
        let e =
            generation_of(&inspection(true, 4, Some(deathswitch::Damage::NoMagic)), p).unwrap_err();
        assert!(e.contains("damaged") && e.contains("naoctl rearm"), "{e}");
        let mut none = inspection(true, 4, None);
        none.snapshot.driver_pid = None;
        let e = generation_of(&none, p).unwrap_err();
        assert!(e.contains("no runtime") && e.contains("nao-rs run"), "{e}");
    }
}
