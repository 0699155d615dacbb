//! Which RDMA port serves a session, and the rules its hello is bound by (issue 23, items 2
//! and 3).
//!
//! A session runs on the port that carries the address its client came in on. Choosing it
//! opens devices and reads GID tables (rxe: 1,024 slots a port), so it is done once per local
//! address and cached ([`Cache`]; a failure too, for [`FAILED_FOR`], so that clients on an
//! address no port carries do not make each session scan the devices), and only after the
//! hello is admitted: the handshake binds the hello in a step of its own
//! (`ServerHandshake::bind`), with the binding of the port just chosen, so a connection
//! without the token costs no device work at all. A cached port is
//! checked with two cheap queries (its state, the GID slot it uses) each time it is taken, and
//! chosen afresh when either changed (a port down, an address moved).
//!
//! The binding, and the rule that a bench session on InfiniBand needs the token, follow the
//! port the session really uses, not the one opened at start.

use crate::failure::Failure;
use crate::verbs::WriteVerbs;
use rdma_app::device::DeviceArgs;
use rdma_core_rs::{LinkLayer, LocalPort};
use rdma_proto::{ErrorCode, Gid, GidBinding};
use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The port that serves a session, with what its sessions are bound by.
#[derive(Debug)]
pub(crate) struct Served {
    /// The device, port and GID (a fake fabric's, in tests).
    pub verbs: Arc<dyn WriteVerbs>,
    /// On RoCE, this port's GIDs (a loopback peer's hello must name one of them); `None` on
    /// InfiniBand, where nothing can be bound.
    gids: Option<Vec<Gid>>,
}

impl Served {
    /// `local`, with its GID table read where the link is Ethernet (RoCE).
    #[must_use]
    pub fn new(local: Arc<LocalPort>) -> Self {
        let gids = (local.port.link_layer == LinkLayer::Ethernet).then(|| {
            local
                .ctx
                .gid_table(local.port.num)
                .map(|t| t.iter().map(|e| Gid(e.gid.0)).collect())
                .unwrap_or_else(|e| {
                    tracing::warn!(
                        "cannot read the GID table of {} port {} ({e}): loopback clients will be refused",
                        local.ctx.name(),
                        local.port.num
                    );
                    Vec::new()
                })
        });
        Served { verbs: local, gids }
    }

    /// A port of any fabric, with `gids` as [`Served::new`] reads them (the fake's, in tests).
    #[cfg(test)]
    #[must_use]
    pub fn with(verbs: Arc<dyn WriteVerbs>, gids: Option<Vec<Gid>>) -> Self {
        Served { verbs, gids }
    }

    /// What the hello of a connection from `peer` on this port must announce.
    #[must_use]
    pub fn binding(&self, peer: IpAddr) -> GidBinding {
        binding_for(self.gids.as_deref(), peer)
    }

    /// Whether the port is still as it was chosen (see [`WriteVerbs::still_fresh`]).
    fn still_fresh(&self) -> bool {
        self.verbs.still_fresh()
    }
}

/// The binding on a port with `gids` (RoCE) or none (InfiniBand), for a connection from `peer`.
fn binding_for(gids: Option<&[Gid]>, peer: IpAddr) -> GidBinding {
    match gids {
        Some(local) => GidBinding::Peer {
            peer,
            local: local.to_vec(),
        },
        None => GidBinding::Unbound,
    }
}

/// Where sessions get their port: [`Ports`] in the server, a fake in tests.
pub(crate) trait PortSource: Send + Sync + std::fmt::Debug {
    /// The port for a session whose client came in on `local` (`None`: unknown), and why it
    /// was chosen when it was chosen just now (said once, not at each reuse).
    ///
    /// # Errors
    /// No port carries the address (`rdma_setup`, told to the client).
    fn serve(&self, local: Option<IpAddr>) -> Result<(Arc<Served>, Option<String>), Failure>;
}

/// The server's ports: the one opened at start (where the flags fix it, or for loopback), and
/// those chosen by address, cached.
#[derive(Debug)]
pub(crate) struct Ports {
    device: DeviceArgs,
    start_port: Arc<LocalPort>,
    start: Arc<Served>,
    chosen: Cache<IpAddr, Served, String>,
}

impl Ports {
    /// `start` is the port the flags opened at start.
    #[must_use]
    pub fn new(device: DeviceArgs, start: LocalPort) -> Self {
        let start_port = Arc::new(start);
        Ports {
            device,
            start: Arc::new(Served::new(Arc::clone(&start_port))),
            start_port,
            chosen: Cache::default(),
        }
    }

    /// The port opened at start.
    #[must_use]
    pub fn start(&self) -> &Arc<LocalPort> {
        &self.start_port
    }
}

impl PortSource for Ports {
    fn serve(&self, local: Option<IpAddr>) -> Result<(Arc<Served>, Option<String>), Failure> {
        let Some(ip) = local.filter(|ip| self.device.chooses_by(*ip)) else {
            return Ok((Arc::clone(&self.start), None));
        };
        let mut why = None;
        let served = self
            .chosen
            .get(ip.to_canonical(), Served::still_fresh, || {
                let (local, said) = self.device.open_for(ip).map_err(|e| e.to_string())?;
                why = said;
                Ok(Served::new(Arc::new(local)))
            })
            .map_err(|e| {
                Failure::new(
                    ErrorCode::RdmaSetup,
                    format!(
                        "the server has no RDMA port for the address this client reached it at: {e}"
                    ),
                )
            })?;
        Ok((served, why))
    }
}

/// Most keys a [`Cache`] keeps (a host's own addresses: a few); past it, it starts over.
const CACHE_MAX: usize = 64;

/// How long a failed choice is kept: sessions that reach the server on an address no RDMA
/// port carries are refused without scanning the devices again (a scan is milliseconds of
/// device work), yet a port that comes up is found within this long.
pub(crate) const FAILED_FOR: Duration = Duration::from_secs(2);

/// What a [`Cache`] holds for a key: the value chosen, or why none could be, and since when.
#[derive(Debug)]
enum Entry<V, E> {
    Chosen(Arc<V>),
    Failed { error: E, at: Instant },
}

/// Values chosen once per key and kept while `fresh` says they still hold; a failure to
/// choose is kept for [`FAILED_FOR`].
#[derive(Debug)]
pub(crate) struct Cache<K, V, E> {
    map: Mutex<HashMap<K, Entry<V, E>>>,
}

impl<K, V, E> Default for Cache<K, V, E> {
    fn default() -> Self {
        Cache {
            map: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash + Copy, V, E: Clone> Cache<K, V, E> {
    /// The value for `key`: the cached one if `fresh` holds for it, the cached failure if it is
    /// younger than [`FAILED_FOR`], else `choose`'s (cached, value or failure). `choose` runs
    /// outside the lock (it may be slow), so two sessions that miss at once may both choose;
    /// the last one stays.
    pub(crate) fn get(
        &self,
        key: K,
        fresh: impl Fn(&V) -> bool,
        choose: impl FnOnce() -> Result<V, E>,
    ) -> Result<Arc<V>, E> {
        self.get_at(Instant::now(), key, fresh, choose)
    }

    /// [`Cache::get`] at `now`.
    fn get_at(
        &self,
        now: Instant,
        key: K,
        fresh: impl Fn(&V) -> bool,
        choose: impl FnOnce() -> Result<V, E>,
    ) -> Result<Arc<V>, E> {
        let cached = match self
            .map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
        {
            Some(Entry::Chosen(v)) => Some(Ok(Arc::clone(v))),
            Some(Entry::Failed { error, at })
                if now.saturating_duration_since(*at) < FAILED_FOR =>
            {
                Some(Err(error.clone()))
            }
            _ => None,
        };
        match cached {
            Some(Ok(v)) if fresh(&v) => return Ok(v),
            Some(Err(e)) => return Err(e),
            _ => {}
        }
        let (entry, result) = match choose() {
            Ok(v) => {
                let v = Arc::new(v);
                (Entry::Chosen(Arc::clone(&v)), Ok(v))
            }
            Err(error) => (
                Entry::Failed {
                    error: error.clone(),
                    at: now,
                },
                Err(error),
            ),
        };
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if map.len() >= CACHE_MAX && !map.contains_key(&key) {
            map.clear();
        }
        map.insert(key, entry);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// Issue 23, item 3: a port is chosen once per address and reused while it holds; chosen
    /// afresh when it changed; a failed choice is not cached.
    #[test]
    fn a_port_is_chosen_once_per_address_and_again_when_it_changed() {
        let cache: Cache<u8, u32, ()> = Cache::default();
        let chosen = Cell::new(0);
        let choose = |v: u32| {
            chosen.set(chosen.get() + 1);
            Ok::<_, ()>(v)
        };
        let fresh = |_: &u32| true;
        assert_eq!(*cache.get(1, fresh, || choose(10)).unwrap(), 10);
        for _ in 0..100 {
            assert_eq!(*cache.get(1, fresh, || choose(99)).unwrap(), 10);
        }
        assert_eq!(chosen.get(), 1, "one choice for a hundred sessions");
        assert_eq!(*cache.get(2, fresh, || choose(20)).unwrap(), 20);
        assert_eq!(chosen.get(), 2, "another address, another choice");
        // The port changed: chosen again, and the new choice is kept.
        assert_eq!(*cache.get(1, |v| *v != 10, || choose(11)).unwrap(), 11);
        assert_eq!(*cache.get(1, fresh, || choose(99)).unwrap(), 11);
        assert_eq!(chosen.get(), 3);
    }

    /// A failed choice (no port carries the address) is kept too, for [`FAILED_FOR`]: a
    /// hundred sessions on that address within it cost one scan of the devices, not a hundred;
    /// after it the port is looked for again (it may have come up), and found.
    #[test]
    fn a_failed_choice_is_kept_for_a_while_then_tried_again() {
        let cache: Cache<u8, u32, String> = Cache::default();
        let tries = Cell::new(0);
        let fail = || {
            tries.set(tries.get() + 1);
            Err::<u32, _>("no port carries 10.0.0.9".to_owned())
        };
        let fresh = |_: &u32| true;
        let t0 = Instant::now();
        for i in 0..100 {
            let at = t0 + FAILED_FOR * i / 200;
            assert_eq!(
                cache.get_at(at, 1, fresh, fail).unwrap_err(),
                "no port carries 10.0.0.9"
            );
        }
        assert_eq!(tries.get(), 1, "one scan for a hundred sessions");
        // Past the expiry the port is looked for again, and a port that came up is found.
        let later = t0 + FAILED_FOR + Duration::from_millis(1);
        assert_eq!(
            *cache
                .get_at(later, 1, fresh, || Ok::<_, String>(7))
                .unwrap(),
            7
        );
        assert_eq!(*cache.get_at(later, 1, fresh, fail).unwrap(), 7);
        assert_eq!(tries.get(), 1);
    }

    #[test]
    fn the_cache_stays_bounded() {
        let cache: Cache<usize, usize, ()> = Cache::default();
        for k in 0..1000 {
            cache.get(k, |_| true, || Ok::<_, ()>(k)).unwrap();
        }
        assert!(cache.map.lock().unwrap().len() <= CACHE_MAX);
    }

    /// Issue 23, item 2: the binding is the session's port's: RoCE binds to the peer (a
    /// loopback peer to the port's own GIDs); InfiniBand binds nothing.
    #[test]
    fn the_binding_is_the_sessions_ports() {
        let gids = ["::ffff:10.0.0.1".parse().unwrap()];
        let peer: IpAddr = "10.0.0.2".parse().unwrap();
        assert_eq!(
            binding_for(Some(&gids), peer),
            GidBinding::Peer {
                peer,
                local: gids.to_vec()
            }
        );
        assert_eq!(binding_for(None, peer), GidBinding::Unbound);
    }
}
