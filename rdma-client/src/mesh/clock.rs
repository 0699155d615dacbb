//! What the mesh says, once at start, of its devices' completion timestamps: each device is
//! asked for its completion clock ([`rdma_core_rs::Context::completion_clock`]), and its answer
//! becomes `mesh_started`'s `timestamps_why` and the device's `rdma_mesh_timestamps_supported`.
//!
//! Where a device has a clock, the probes' lat exchanges end with the stamped exchange (a
//! write with immediate each way, feature `stamped`) on completion queues that stamp
//! (`Context::create_cq_ex`), and a probe's round trip is split into the network's part and
//! the hosts' where the peer's device stamps too (`probe::rtt_of`). So `timestamps` is `true`
//! when any of this node's devices has a clock, and the text says what each device answered
//! and what follows: a device without a clock (Soft-RoCE, Soft-iWARP) measures wall time. The
//! metric says what the device said: 1 where it has a clock.

use rdma_core_rs::CompletionClock;

/// One device's answer: its completion clock, or why it could not be asked (the error's text).
pub type Answer = Result<CompletionClock, String>;

/// What the mesh says of its devices' timestamps, once at start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Said {
    /// Whether round trips are split by completion timestamps (`mesh_started`'s
    /// `timestamps`): where a device of ours has a clock (and the peer's device too, probe by
    /// probe).
    pub split: bool,
    /// What each device answered, and what follows (`mesh_started`'s `timestamps_why`).
    pub why: String,
    /// Each device and whether it has a completion clock (`rdma_mesh_timestamps_supported`), in
    /// the order given.
    pub supported: Vec<(String, bool)>,
}

/// What the mesh does for a device without a clock.
const WALL: &str = "round trips are wall time";
/// What the mesh does for a device with one.
const SPLIT: &str =
    "round trips are split into network time and host delay where the peer's device stamps too";

/// What to say of `devices`, each with its answer (a device without one was not asked). Devices
/// that answered alike are named together, in the order given.
#[must_use]
pub fn said(devices: &[String], answers: &[Answer]) -> Said {
    let not_asked = Err("it was not asked".to_owned());
    let mut groups: Vec<(&Answer, Vec<&str>)> = Vec::new();
    let mut supported = Vec::with_capacity(devices.len());
    for (i, device) in devices.iter().enumerate() {
        let answer = answers.get(i).unwrap_or(&not_asked);
        supported.push((device.clone(), matches!(answer, Ok(c) if c.has_clock())));
        match groups.iter_mut().find(|(a, _)| *a == answer) {
            Some((_, names)) => names.push(device),
            None => groups.push((answer, vec![device])),
        }
    }
    let parts: Vec<String> = groups
        .iter()
        .map(|(answer, names)| sentence(&names.join(", "), names.len() > 1, answer))
        .collect();
    let why = if parts.is_empty() {
        format!("no device was asked for completion timestamps: {WALL}")
    } else {
        parts.join("; ")
    };
    Said {
        split: supported.iter().any(|(_, clock)| *clock),
        why,
        supported,
    }
}

/// What `names` (several when `plural`) answered, in a clause.
fn sentence(names: &str, plural: bool, answer: &Answer) -> String {
    let (has, gives) = if plural {
        ("have", "give")
    } else {
        ("has", "gives")
    };
    match answer {
        Ok(CompletionClock::Clock {
            hca_core_clock_khz,
            timestamp_mask,
        }) => format!(
            "{names} {has} a completion clock ({hca_core_clock_khz} kHz, mask {timestamp_mask:#x}): \
             {SPLIT}"
        ),
        Ok(CompletionClock::NoClock {
            hca_core_clock_khz: 0,
            ..
        }) => format!("{names} {gives} no completion timestamps (hca_core_clock 0 kHz): {WALL}"),
        Ok(CompletionClock::NoClock {
            hca_core_clock_khz,
            timestamp_mask,
        }) => format!(
            "{names} {gives} no completion timestamps (hca_core_clock {hca_core_clock_khz} kHz, \
             timestamp mask {timestamp_mask:#x}): {WALL}"
        ),
        Ok(CompletionClock::NotSupported) => {
            let (they, stamp, their) = if plural {
                ("they", "stamp", "their")
            } else {
                ("it", "stamps", "its")
            };
            format!(
                "{names} cannot say whether {they} {stamp} completions (no ibv_query_device_ex \
                 in {their} provider): {WALL}"
            )
        }
        Err(e) => format!("{names} could not be asked for completion timestamps ({e}): {WALL}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn devs(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    const RXE: CompletionClock = CompletionClock::NoClock {
        hca_core_clock_khz: 0,
        timestamp_mask: 0,
    };

    #[test]
    fn soft_roce_says_it_has_no_clock_once() {
        let s = said(&devs(&["rxe0"]), &[Ok(RXE)]);
        assert_eq!(
            s.why,
            "rxe0 gives no completion timestamps (hca_core_clock 0 kHz): round trips are wall time"
        );
        assert!(!s.split);
        assert_eq!(s.supported, [("rxe0".to_owned(), false)]);
    }

    /// A device with a clock is said to have one, and that round trips are split where the
    /// peer stamps too; the metric says what the device said.
    #[test]
    fn a_clock_is_said_and_splits_the_round_trips() {
        let clock = CompletionClock::Clock {
            hca_core_clock_khz: 156_250,
            timestamp_mask: 0x7fff_ffff_ffff_ffff,
        };
        let s = said(&devs(&["mlx5_0"]), &[Ok(clock)]);
        assert_eq!(
            s.why,
            "mlx5_0 has a completion clock (156250 kHz, mask 0x7fffffffffffffff): round trips \
             are split into network time and host delay where the peer's device stamps too"
        );
        assert!(s.split);
        assert_eq!(s.supported, [("mlx5_0".to_owned(), true)]);
    }

    #[test]
    fn each_other_answer_has_its_words() {
        let one = |a: Answer| said(&devs(&["d0"]), &[a]);
        let s = one(Ok(CompletionClock::NoClock {
            hca_core_clock_khz: 1000,
            timestamp_mask: 0,
        }));
        assert_eq!(
            s.why,
            "d0 gives no completion timestamps (hca_core_clock 1000 kHz, timestamp mask 0x0): \
             round trips are wall time"
        );
        assert_eq!(s.supported, [("d0".to_owned(), false)]);
        let s = one(Ok(CompletionClock::NotSupported));
        assert_eq!(
            s.why,
            "d0 cannot say whether it stamps completions (no ibv_query_device_ex in its \
             provider): round trips are wall time"
        );
        assert_eq!(s.supported, [("d0".to_owned(), false)]);
        let s = one(Err("ibv_query_device_ex failed: EIO".into()));
        assert_eq!(
            s.why,
            "d0 could not be asked for completion timestamps (ibv_query_device_ex failed: EIO): \
             round trips are wall time"
        );
        assert_eq!(s.supported, [("d0".to_owned(), false)]);
    }

    /// With `--rails`: devices that answered alike are named together, each once.
    #[test]
    fn rails_answering_alike_are_said_together() {
        let clock = CompletionClock::Clock {
            hca_core_clock_khz: 1_000_000,
            timestamp_mask: 0xffff_ffff,
        };
        let s = said(
            &devs(&["rxe0", "mlx5_0", "rxe1"]),
            &[Ok(RXE), Ok(clock), Ok(RXE)],
        );
        assert_eq!(
            s.why,
            "rxe0, rxe1 give no completion timestamps (hca_core_clock 0 kHz): round trips are \
             wall time; mlx5_0 has a completion clock (1000000 kHz, mask 0xffffffff): round trips \
             are split into network time and host delay where the peer's device stamps too"
        );
        assert!(s.split, "one rail stamps");
        assert_eq!(
            s.supported,
            [
                ("rxe0".to_owned(), false),
                ("mlx5_0".to_owned(), true),
                ("rxe1".to_owned(), false)
            ]
        );
        let s = said(
            &devs(&["siw0", "siw1"]),
            &[
                Ok(CompletionClock::NotSupported),
                Ok(CompletionClock::NotSupported),
            ],
        );
        assert!(
            s.why.starts_with("siw0, siw1 cannot say whether they stamp completions (no ibv_query_device_ex in their provider)"),
            "{}",
            s.why
        );
    }

    #[test]
    fn a_device_not_asked_is_said_so() {
        let s = said(&devs(&["rxe0", "rxe1"]), &[Ok(RXE)]);
        assert!(
            s.why
                .contains("rxe1 could not be asked for completion timestamps (it was not asked)"),
            "{}",
            s.why
        );
        assert_eq!(s.supported[1], ("rxe1".to_owned(), false));
        let s = said(&[], &[]);
        assert_eq!(
            s.why,
            "no device was asked for completion timestamps: round trips are wall time"
        );
        assert!(s.supported.is_empty());
    }
}
