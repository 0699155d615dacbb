//! Which RDMA port serves a session, and the rules its hello is bound by (issue 23, items 2
//! and 3).
//!
//! A session runs on the port that carries the address its client came in on. Choosing it
//! opens devices and reads GID tables (rxe: 1,024 slots a port), so it is done once per local
//! address and cached ([`Cache`]), and only after the hello is admitted: the handshake binds
//! the hello in a step of its own (`ServerHandshake::bind`), with the binding of the port just
//! chosen, so a connection without the token costs no device work at all. A cached port is
//! checked with two cheap queries (its state, the GID slot it uses) each time it is taken, and
//! chosen afresh when either changed (a port down, an address moved).
//!
//! The binding, and the rule that a bench session on InfiniBand needs the token, follow the
//! port the session really uses, not the one opened at start.

use crate::session::Failure;
use crate::verbs::WriteVerbs;
use rdma_app::device::DeviceArgs;
use rdma_core_rs::{LinkLayer, LocalPort};
use rdma_proto::{ErrorCode, Gid, GidBinding};
use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

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
    chosen: Cache<IpAddr, Served>,
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
                let (local, said) = self.device.open_for(ip)?;
                why = said;
                Ok(Served::new(Arc::new(local)))
            })
            .map_err(|e: rdma_core_rs::Error| {
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

/// Values chosen once per key and kept while `fresh` says they still hold.
#[derive(Debug)]
pub(crate) struct Cache<K, V> {
    map: Mutex<HashMap<K, Arc<V>>>,
}

impl<K, V> Default for Cache<K, V> {
    fn default() -> Self {
        Cache {
            map: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash + Copy, V> Cache<K, V> {
    /// The value for `key`: the cached one if `fresh` holds for it, else `choose`'s (cached).
    /// `choose` runs outside the lock (it may be slow), so two sessions that miss at once may
    /// both choose; the last one stays.
    pub(crate) fn get<E>(
        &self,
        key: K,
        fresh: impl Fn(&V) -> bool,
        choose: impl FnOnce() -> Result<V, E>,
    ) -> Result<Arc<V>, E> {
        let cached = self
            .map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .cloned();
        if let Some(v) = cached.filter(|v| fresh(v)) {
            return Ok(v);
        }
        let v = Arc::new(choose()?);
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if map.len() >= CACHE_MAX && !map.contains_key(&key) {
            map.clear();
        }
        map.insert(key, Arc::clone(&v));
        Ok(v)
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
        let cache: Cache<u8, u32> = Cache::default();
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
        // A failed choice leaves nothing behind.
        assert_eq!(cache.get(3, fresh, || Err::<u32, ()>(())), Err(()));
        assert_eq!(*cache.get(3, fresh, || choose(30)).unwrap(), 30);
    }

    #[test]
    fn the_cache_stays_bounded() {
        let cache: Cache<usize, usize> = Cache::default();
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
