//! The round trip of one probe, split into the network's part and the hosts' part where the
//! devices stamp their completions (R-Pingmesh's arithmetic), or the wall time alone where they
//! do not.
//!
//! # The timestamps
//!
//! A completion queue created with `ibv_create_cq_ex` and `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`
//! gives each work completion a raw stamp of the device's free-running clock
//! (`ibv_wc_read_completion_ts`). Its unit is one tick of the device's core clock, whose
//! frequency `ibv_query_device_ex` reports as `hca_core_clock`, **in kHz**; only the bits of
//! `completion_timestamp_mask` are valid, so the counter wraps at that width. A span between two
//! stamps of **the same device** is therefore `((later - earlier) & mask)` ticks, i.e.
//! `ticks * 1_000_000 / hca_core_clock` nanoseconds ([`DeviceClock::span`]). Stamps of two
//! devices are never compared with each other: their clocks are neither synchronised nor equal.
//! A span longer than one turn of the counter cannot be told from a shorter one; the checks below
//! (a span never exceeds the wall time around it) catch most such cases.
//!
//! # The exchange
//!
//! The prober stamps `send` (the completion of its ping) and `recv` (the completion of the
//! responder's pong); the responder stamps `recv` (its ping) and `send` (its pong) and hands its
//! two stamps back (on the probe's TCP line, or a later message). The prober also measures the
//! **wall RTT**: from posting the ping to seeing the pong, on its monotonic clock.
//!
//! What a send completion's stamp marks depends on the transport ([`SendStamp`]):
//!
//! - [`SendStamp::OnWire`] (UD, as R-Pingmesh uses: the completion comes as the packet leaves).
//!   R-Pingmesh's formula: `network = (prober.recv - prober.send) - (responder.send -
//!   responder.recv)`: the prober's span holds the round trip and the responder's processing,
//!   which the responder's own span measures.
//! - [`SendStamp::Acked`] (RC: a send completes only when the peer's ACK comes back). Then the
//!   prober's send stamp is the ACK of the ping, one way after the responder's `recv`, and its
//!   `recv` stamp comes one way after the pong left: `prober.recv - prober.send` is the
//!   responder's processing; the responder's send stamp is the ACK of the pong, one way after the
//!   prober's `recv`, so its span holds the processing and the round trip. The roles of the two
//!   spans swap: `network = (responder.send - responder.recv) - (prober.recv - prober.send)`
//!   (to within the time a NIC takes to turn a received packet into its ACK).
//!
//! On RC the side that receives needs a receive completion: the exchange is a write with
//! immediate (or a send) each way, a plain RDMA Write completes nothing at its target.
//!
//! In both cases `network = outer span - inner span`, the inner span being the responder's
//! processing, and `host_delay = wall - network`: the time the two hosts spent (the prober's
//! posting and polling, the responder's turn-around). Neither can be negative; a negative one
//! means the inputs do not fit together (stamps of another probe, a wrapped counter, a wrong
//! clock frequency) and is an error ([`RttError`]), never a negative or clamped duration.
//!
//! Without timestamps (Soft-RoCE, Soft-iWARP) there is only the wall time: [`Rtt::wall_only`]
//! says so, and the caller says it once.

use serde::Serialize;
use std::time::Duration;

/// A device's timestamp clock: its frequency and the width of its raw counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceClock {
    khz: u64,
    mask: u64,
}

impl DeviceClock {
    /// `hca_core_clock` (kHz) and `completion_timestamp_mask` as `ibv_query_device_ex` reports
    /// them.
    ///
    /// # Errors
    /// A zero frequency, or a mask that is not a run of low bits (`2^w - 1`, `w ≥ 1`).
    pub fn new(hca_core_clock_khz: u64, timestamp_mask: u64) -> Result<Self, RttError> {
        if hca_core_clock_khz == 0 {
            return Err(RttError::NoClock);
        }
        if timestamp_mask == 0 || timestamp_mask & timestamp_mask.wrapping_add(1) != 0 {
            return Err(RttError::BadMask(timestamp_mask));
        }
        Ok(DeviceClock {
            khz: hca_core_clock_khz,
            mask: timestamp_mask,
        })
    }

    /// The time from raw stamp `from` to raw stamp `to` of this device, across at most one wrap
    /// of the counter (bits outside the mask are ignored).
    #[must_use]
    pub fn span(&self, from: u64, to: u64) -> Duration {
        let ticks = to.wrapping_sub(from) & self.mask;
        let nanos = u128::from(ticks) * 1_000_000 / u128::from(self.khz);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// What a send completion's timestamp marks, by transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendStamp {
    /// The packet left (UD): R-Pingmesh's case.
    OnWire,
    /// The peer's ACK came back (RC).
    Acked,
}

/// One side's two raw completion stamps, on its own device clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamps {
    pub clock: DeviceClock,
    /// The completion of the message this side sent (the prober's ping, the responder's pong).
    pub send: u64,
    /// The completion of the message this side received (the responder's ping, the prober's
    /// pong).
    pub recv: u64,
}

/// The stamps of one probe's exchange, both sides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exchange {
    pub transport: SendStamp,
    pub prober: Stamps,
    pub responder: Stamps,
}

/// A round trip split by the devices' stamps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Split {
    /// On the network: the RTT with both hosts' time taken out.
    #[serde(rename = "network_ns", serialize_with = "nanos")]
    pub network: Duration,
    /// `wall - network`: the time spent in the two hosts.
    #[serde(rename = "host_delay_ns", serialize_with = "nanos")]
    pub host_delay: Duration,
    /// The responder's part of `host_delay` (its processing between its two completions).
    #[serde(rename = "responder_ns", serialize_with = "nanos")]
    pub responder: Duration,
}

impl Split {
    /// The prober's part of `host_delay` (posting the ping, polling the pong).
    #[must_use]
    pub fn prober(&self) -> Duration {
        self.host_delay.saturating_sub(self.responder)
    }
}

/// One probe's round trip: the wall time, and its split where the devices stamp completions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Rtt {
    /// From posting the ping to seeing the pong, on the prober's monotonic clock.
    #[serde(rename = "wall_ns", serialize_with = "nanos")]
    pub wall: Duration,
    /// `None`: no completion timestamps on this path, the wall time is all there is.
    #[serde(flatten)]
    pub split: Option<Split>,
}

impl Rtt {
    /// A round trip without timestamps.
    #[must_use]
    pub fn wall(wall: Duration) -> Self {
        Rtt { wall, split: None }
    }

    /// Splits `wall` by the stamps of `exchange`.
    ///
    /// # Errors
    /// The stamps do not fit together or with `wall` (see the module docs): the inner span
    /// (the responder's processing) is longer than the outer one, or the network's part is
    /// longer than the wall time.
    pub fn split(wall: Duration, exchange: &Exchange) -> Result<Self, RttError> {
        let prober = exchange
            .prober
            .clock
            .span(exchange.prober.send, exchange.prober.recv);
        let responder = exchange
            .responder
            .clock
            .span(exchange.responder.recv, exchange.responder.send);
        let (outer, inner) = match exchange.transport {
            SendStamp::OnWire => (prober, responder),
            SendStamp::Acked => (responder, prober),
        };
        let network = outer
            .checked_sub(inner)
            .ok_or(RttError::InnerLonger { outer, inner })?;
        let host_delay = wall
            .checked_sub(network)
            .ok_or(RttError::NetworkLonger { network, wall })?;
        if prober > wall {
            // The prober's two completions lie between its post and its poll.
            return Err(RttError::ProberOutsideWall { span: prober, wall });
        }
        Ok(Rtt {
            wall,
            split: Some(Split {
                network,
                host_delay,
                responder: inner,
            }),
        })
    }

    /// `wall`, split where `exchange` has the stamps.
    ///
    /// # Errors
    /// As [`split`](Self::split).
    pub fn measure(wall: Duration, exchange: Option<&Exchange>) -> Result<Self, RttError> {
        exchange.map_or(Ok(Self::wall(wall)), |e| Self::split(wall, e))
    }

    /// Whether only the wall time is known (no completion timestamps).
    #[must_use]
    pub fn wall_only(&self) -> bool {
        self.split.is_none()
    }

    /// The figure a pair's baseline follows: the network's part where known, else the wall time.
    #[must_use]
    pub fn judged(&self) -> Duration {
        self.split.map_or(self.wall, |s| s.network)
    }
}

/// Stamps that cannot be turned into a round trip.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RttError {
    #[error("the device reports no core clock (hca_core_clock 0 kHz): its stamps cannot be timed")]
    NoClock,
    #[error("timestamp mask {0:#x} is not a run of low bits")]
    BadMask(u64),
    #[error(
        "inconsistent completion stamps: the responder's processing ({inner:?}) is longer than the span around it ({outer:?})"
    )]
    InnerLonger { outer: Duration, inner: Duration },
    #[error(
        "inconsistent completion stamps: the network's part ({network:?}) is longer than the wall-clock round trip ({wall:?})"
    )]
    NetworkLonger { network: Duration, wall: Duration },
    #[error(
        "inconsistent completion stamps: the prober's completions span {span:?}, more than the wall-clock round trip around them ({wall:?})"
    )]
    ProberOutsideWall { span: Duration, wall: Duration },
}

fn nanos<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);
    /// 1 GHz: one tick a nanosecond, 48-bit counter.
    fn ghz() -> DeviceClock {
        DeviceClock::new(1_000_000, (1 << 48) - 1).expect("valid clock")
    }

    fn stamps(clock: DeviceClock, send: u64, recv: u64) -> Stamps {
        Stamps { clock, send, recv }
    }

    #[test]
    fn ticks_become_nanoseconds_by_the_core_clock_in_khz() {
        // 156.25 MHz (a ConnectX-4's 156250 kHz): one tick is 6.4 ns; 1000 ticks, 6.4 µs.
        let c = DeviceClock::new(156_250, u64::MAX).expect("valid");
        assert_eq!(c.span(5_000, 6_000), Duration::from_nanos(6_400));
        assert_eq!(ghz().span(10, 10), Duration::ZERO);
    }

    #[test]
    fn a_span_across_the_counters_wrap_is_its_length_not_a_negative() {
        let c = DeviceClock::new(1_000_000, 0xFFFF).expect("valid"); // 16 bits, 1 ns a tick
        // 0xFFF0 → wraps → 0x0010: 0x20 ticks.
        assert_eq!(c.span(0xFFF0, 0x0010), Duration::from_nanos(32));
        // Bits above the mask are not part of the stamp.
        assert_eq!(c.span(0x1_FFF0, 0x7_0010), Duration::from_nanos(32));
        // A 64-bit counter wraps too.
        let full = DeviceClock::new(1_000_000, u64::MAX).expect("valid");
        assert_eq!(full.span(u64::MAX - 4, 5), Duration::from_nanos(10));
    }

    #[test]
    fn a_clock_must_tick_and_its_mask_be_low_bits() {
        assert_eq!(DeviceClock::new(0, 0xFF), Err(RttError::NoClock));
        assert_eq!(DeviceClock::new(1, 0), Err(RttError::BadMask(0)));
        assert_eq!(DeviceClock::new(1, 0xF0), Err(RttError::BadMask(0xF0)));
        assert!(DeviceClock::new(1, 1).is_ok());
    }

    #[test]
    fn on_the_wire_stamps_split_as_r_pingmesh_does() {
        // Prober: ping out at 1000, pong in at 13000 → 12 µs. Responder (another clock, 500 MHz:
        // 2 ns a tick): ping in at 100, pong out at 2100 → 2000 ticks, 4 µs of processing.
        // Network: 12 - 4 = 8 µs. Wall: 20 µs → 12 µs in the hosts, 4 of them the responder's.
        let responder_clock = DeviceClock::new(500_000, (1 << 48) - 1).expect("valid");
        let e = Exchange {
            transport: SendStamp::OnWire,
            prober: stamps(ghz(), 1_000, 13_000),
            responder: stamps(responder_clock, 2_100, 100),
        };
        let rtt = Rtt::split(20 * US, &e).expect("consistent");
        let s = rtt.split.expect("split");
        assert_eq!(s.network, 8 * US);
        assert_eq!(s.host_delay, 12 * US);
        assert_eq!(s.responder, 4 * US);
        assert_eq!(s.prober(), 8 * US);
        assert_eq!(rtt.judged(), 8 * US);
        assert!(!rtt.wall_only());
    }

    #[test]
    fn acked_stamps_swap_the_spans() {
        // RC, one way 3 µs each direction. Responder gets the ping at r=0 and posts the pong
        // 5 µs later; it leaves at once. Prober's clock (offset 10000): its ping's ACK at r+3 µs
        // → 13000, the pong at 5+3 = 8 µs → 18000: inner span 5 µs (the responder's turn).
        // Responder's clock (offset 700): ping at 700, the pong's ACK at 8+3 = 11 µs → 11700:
        // outer span 11 µs. Network: 11 - 5 = 6 µs = 3 + 3.
        let e = Exchange {
            transport: SendStamp::Acked,
            prober: stamps(ghz(), 13_000, 18_000),
            responder: stamps(ghz(), 11_700, 700),
        };
        let s = Rtt::split(15 * US, &e)
            .expect("consistent")
            .split
            .expect("split");
        assert_eq!(s.network, 6 * US);
        assert_eq!(s.responder, 5 * US);
        assert_eq!(s.host_delay, 9 * US);
    }

    #[test]
    fn the_split_holds_across_a_wrap_of_the_prober_counter() {
        let c = DeviceClock::new(1_000_000, 0xFFFF).expect("valid");
        let e = Exchange {
            transport: SendStamp::OnWire,
            prober: stamps(c, 0xFF00, 0x0100), // 0x200 = 512 ticks
            responder: stamps(c, 312, 100),    // 212 ticks
        };
        let s = Rtt::split(Duration::from_nanos(600), &e)
            .expect("consistent")
            .split
            .expect("split");
        assert_eq!(s.network, Duration::from_nanos(300));
        assert_eq!(s.host_delay, Duration::from_nanos(300));
    }

    #[test]
    fn inconsistent_stamps_are_errors_never_negative_durations() {
        // The responder's processing (10 µs) longer than the prober's span (6 µs).
        let e = Exchange {
            transport: SendStamp::OnWire,
            prober: stamps(ghz(), 0, 6_000),
            responder: stamps(ghz(), 10_000, 0),
        };
        assert_eq!(
            Rtt::split(50 * US, &e),
            Err(RttError::InnerLonger {
                outer: 6 * US,
                inner: 10 * US
            })
        );
        // A network part (8 µs) longer than the wall time (5 µs): stamps of another probe.
        let e = Exchange {
            transport: SendStamp::OnWire,
            prober: stamps(ghz(), 0, 12_000),
            responder: stamps(ghz(), 4_000, 0),
        };
        assert_eq!(
            Rtt::split(5 * US, &e),
            Err(RttError::NetworkLonger {
                network: 8 * US,
                wall: 5 * US
            })
        );
        // The prober's own stamps (12 µs) outside its post and poll (11 µs of wall time).
        assert_eq!(
            Rtt::split(11 * US, &e),
            Err(RttError::ProberOutsideWall {
                span: 12 * US,
                wall: 11 * US
            })
        );
        // Equal spans: zero network time is possible arithmetic, not an error.
        let e = Exchange {
            transport: SendStamp::Acked,
            prober: stamps(ghz(), 0, 5_000),
            responder: stamps(ghz(), 5_000, 0),
        };
        let s = Rtt::split(7 * US, &e)
            .expect("consistent")
            .split
            .expect("split");
        assert_eq!((s.network, s.host_delay), (Duration::ZERO, 7 * US));
    }

    #[test]
    fn without_stamps_only_the_wall_time_and_a_flag_saying_so() {
        let rtt = Rtt::measure(42 * US, None).expect("nothing to check");
        assert!(rtt.wall_only());
        assert_eq!(rtt.judged(), 42 * US);
        let json = serde_json::to_string(&rtt).expect("serializes");
        assert_eq!(json, r#"{"wall_ns":42000}"#);
    }

    #[test]
    fn a_split_serializes_in_nanoseconds() {
        let e = Exchange {
            transport: SendStamp::OnWire,
            prober: stamps(ghz(), 0, 3_000),
            responder: stamps(ghz(), 1_000, 0),
        };
        let rtt = Rtt::measure(5 * US, Some(&e)).expect("consistent");
        let json = serde_json::to_string(&rtt).expect("serializes");
        assert_eq!(
            json,
            r#"{"wall_ns":5000,"network_ns":2000,"host_delay_ns":3000,"responder_ns":1000}"#
        );
    }
}
