//! What one probe came to ([`Outcome`]), and why a failed one failed ([`Cause`]), told from the
//! client's own errors by the client's own classifier ([`crate::classify::classify`], the one
//! that chooses the exit code), not by a second reading of them.
//!
//! From exit to cause:
//!
//! | exit                      | cause     | why                                               |
//! |---------------------------|-----------|---------------------------------------------------|
//! | `network`                 | `host`    | no TCP: refused, unreachable, reset, closed       |
//! | `refused`, `protocol`     | `refused` | the server said no (token, caps, busy) or broke the protocol |
//! | `rdma`, `transfer`        | `rdma`    | TCP answers, the RDMA path fails (setup, completion error, retry exceeded) |
//! | `unverified`              | `corrupt` | the server's verdict: the bytes or their CRC32C differ |
//! | `timeout`                 | by stage  | see below                                         |
//! | `usage`, `internal`       | none      | the prober's own fault, not the pair's            |
//!
//! A timeout names no cause by itself: whose wait ran out says it. The TCP connect's is `host`;
//! a verbs wait (a completion, an RDMA CM connect) is the RDMA path's, `rdma`, at any stage. A wait on the server's TCP line
//! (or the server's own `timeout` error) is told by the [`Stage`] the probe had reached: before
//! the banner the server does not answer at all (`host`: as good as dead for the mesh); during
//! the handshake it took the connection but did not let the probe through (`refused`); once the
//! write is posted the server waits on the RDMA path (`rdma`).
//!
//! `slow` comes from no error: the pair's state ([`super::state`]) judges a good probe's round
//! trip against the pair's own baseline.

use super::rtt::Rtt;
use crate::exit::ClientError;
use rdma_app::Exit;
use serde::Serialize;

/// Why a probe of a pair failed, or was judged bad: the contract's type (the `cause` of the
/// `mesh_probe` and `mesh_state` events, and the metrics' `result` label).
pub use rdma_proto::events::mesh::Cause;

/// How far a probe got when it failed: its last step begun.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Connecting, and waiting for the server's banner.
    Connect,
    /// From the banner to our queue pair at RTS (hello, accept, connecting the queue pair).
    Handshake,
    /// The write and the latency exchange posted, until the server's verdict.
    Transfer,
}

/// What one probe came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// The server verified the write; the latency exchange took `rtt`. `stalled`: the write or
    /// one of its ping-pongs waited out a retransmission (`probe::stalled`): RC hides a lost
    /// packet as that wait, so this is how loss shows.
    Ok {
        #[serde(flatten)]
        rtt: Rtt,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        stalled: bool,
    },
    /// The probe failed, for `cause`.
    Failed { cause: Cause },
}

impl Outcome {
    /// The outcome of a probe that failed at `stage` with `report`; `None` where the failure is
    /// the prober's own (a usage error, a bug), which says nothing of the pair.
    #[must_use]
    pub fn failed(report: &color_eyre::Report, stage: Stage) -> Option<Self> {
        classify(report, stage).map(|cause| Outcome::Failed { cause })
    }

    /// The cause, for a failed probe.
    #[must_use]
    pub fn cause(&self) -> Option<Cause> {
        match self {
            Outcome::Ok { .. } => None,
            Outcome::Failed { cause } => Some(*cause),
        }
    }
}

/// The cause of a probe's failure at `stage` with `report`: the exit the client's classifier
/// chooses for it, read as the module docs' table says. `None`: the prober's own fault.
#[must_use]
pub fn classify(report: &color_eyre::Report, stage: Stage) -> Option<Cause> {
    let exit = crate::classify::classify(report);
    let wait = if report.chain().any(|e| e.is::<rdma_core_rs::Error>()) {
        Wait::Verbs
    } else if report
        .chain()
        .any(|e| matches!(e.downcast_ref(), Some(ClientError::Connect { .. })))
    {
        Wait::Connect
    } else {
        Wait::Line(stage)
    };
    of_exit(exit, wait)
}

/// Whose wait a timeout was.
#[derive(Clone, Copy, Debug)]
enum Wait {
    /// The TCP connect.
    Connect,
    /// A verbs wait: a completion, an RDMA CM connect.
    Verbs,
    /// The server's line (or the server's own deadline), at this stage.
    Line(Stage),
}

/// The cause for `exit`; `wait` tells a timeout's.
fn of_exit(exit: Exit, wait: Wait) -> Option<Cause> {
    Some(match exit {
        Exit::Network => Cause::Host,
        Exit::Refused | Exit::Protocol => Cause::Refused,
        Exit::Rdma | Exit::Transfer => Cause::Rdma,
        Exit::Unverified => Cause::Corrupt,
        Exit::Timeout => match wait {
            Wait::Connect | Wait::Line(Stage::Connect) => Cause::Host,
            Wait::Line(Stage::Handshake) => Cause::Refused,
            Wait::Verbs | Wait::Line(Stage::Transfer) => Cause::Rdma,
        },
        Exit::Usage | Exit::Internal => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use color_eyre::{Report, eyre::eyre};
    use rdma_core_rs::{WcOpcode, WcStatus};
    use rdma_proto::{ErrorCode, FrameError, ProtoError, error::ErrorMsg};
    use std::io::ErrorKind;
    use std::time::Duration;

    fn connect(kind: ErrorKind) -> Report {
        Report::new(ClientError::Connect {
            addr: "10.0.0.2:7471".into(),
            port: 7471,
            source: kind.into(),
        })
        .wrap_err("probing 10.0.0.2")
    }

    fn remote(code: ErrorCode) -> Report {
        Report::new(ProtoError::Remote(ErrorMsg::new(code, "no"))).wrap_err("probing")
    }

    fn verbs_timeout() -> Report {
        Report::new(rdma_core_rs::Error::Timeout {
            what: "waiting for a completion",
            waited: Duration::from_secs(2),
        })
        .wrap_err("waiting for the RDMA Write to complete")
    }

    fn line_timeout() -> Report {
        Report::new(FrameError::Timeout {
            after: Duration::from_secs(2),
        })
        .wrap_err("waiting for the server")
    }

    const STAGES: [Stage; 3] = [Stage::Connect, Stage::Handshake, Stage::Transfer];

    #[test]
    fn no_tcp_is_the_host() {
        for stage in STAGES {
            for kind in [
                ErrorKind::ConnectionRefused,
                ErrorKind::HostUnreachable,
                ErrorKind::TimedOut,
            ] {
                assert_eq!(classify(&connect(kind), stage), Some(Cause::Host));
            }
            let lost = Report::new(FrameError::Closed).wrap_err("waiting for the server");
            assert_eq!(classify(&lost, stage), Some(Cause::Host), "{stage:?}");
        }
    }

    #[test]
    fn the_servers_no_and_a_broken_protocol_are_refused() {
        for code in [
            ErrorCode::Unauthorized,
            ErrorCode::Forbidden,
            ErrorCode::Busy,
            ErrorCode::TooLong,
            ErrorCode::RdmaSetup,
            ErrorCode::ShuttingDown,
            ErrorCode::BadJson,
        ] {
            assert_eq!(
                classify(&remote(code), Stage::Handshake),
                Some(Cause::Refused),
                "{code:?}"
            );
        }
        let garbled = Report::new(ProtoError::BadJson {
            detail: "expected value".into(),
        });
        assert_eq!(classify(&garbled, Stage::Connect), Some(Cause::Refused));
    }

    #[test]
    fn a_failed_write_or_completion_is_the_rdma_path() {
        let completion = Report::new(rdma_core_rs::Error::Completion {
            status: WcStatus::RetryExcErr,
            status_str: "transport retry counter exceeded".into(),
            vendor_err: 0x81,
            wr_id: 1,
            opcode: WcOpcode::RdmaWrite,
            advice: String::new(),
        });
        assert_eq!(classify(&completion, Stage::Transfer), Some(Cause::Rdma));
        assert_eq!(
            classify(&remote(ErrorCode::WriteFailed), Stage::Transfer),
            Some(Cause::Rdma)
        );
        // A local verbs failure (here: no device at all) fails every path from this node.
        let setup = Report::new(rdma_core_rs::Error::NoDevices);
        assert_eq!(classify(&setup, Stage::Handshake), Some(Cause::Rdma));
    }

    #[test]
    fn a_failed_verdict_is_corrupt() {
        let verdict = Report::new(ProtoError::VerifyFailed {
            reason: "server's crc32c differs from ours".into(),
        });
        assert_eq!(classify(&verdict, Stage::Transfer), Some(Cause::Corrupt));
        assert_eq!(
            classify(&remote(ErrorCode::VerifyFailed), Stage::Transfer),
            Some(Cause::Corrupt)
        );
    }

    #[test]
    fn a_timeout_is_told_by_whose_wait_ran_out() {
        for stage in STAGES {
            assert_eq!(classify(&verbs_timeout(), stage), Some(Cause::Rdma));
        }
        let by_stage = [
            (Stage::Connect, Cause::Host),
            (Stage::Handshake, Cause::Refused),
            (Stage::Transfer, Cause::Rdma),
        ];
        for (stage, cause) in by_stage {
            assert_eq!(classify(&line_timeout(), stage), Some(cause), "{stage:?}");
            assert_eq!(
                classify(&remote(ErrorCode::Timeout), stage),
                Some(cause),
                "{stage:?}"
            );
        }
    }

    #[test]
    fn the_probers_own_faults_name_no_cause() {
        assert_eq!(classify(&eyre!("a bug"), Stage::Transfer), None);
        let usage = Report::new(ClientError::EmptyPayload);
        assert_eq!(classify(&usage, Stage::Connect), None);
        assert_eq!(Outcome::failed(&usage, Stage::Connect), None);
    }

    #[test]
    fn every_exit_maps_and_the_names_are_the_serde_names() {
        for exit in Exit::ALL {
            let cause = of_exit(exit, Wait::Line(Stage::Transfer));
            assert_eq!(cause.is_none(), !exit.is_expected() || exit == Exit::Usage);
        }
        for cause in Cause::ALL {
            let json = serde_json::to_string(&cause).expect("serializes");
            assert_eq!(json, format!("\"{}\"", cause.as_str()));
            let back: Cause = serde_json::from_str(&json).expect("parses");
            assert_eq!(back, cause);
            assert_eq!(cause.is_failure(), cause != Cause::Slow);
        }
    }

    #[test]
    fn an_outcome_serializes_tagged() {
        let ok = Outcome::Ok {
            rtt: Rtt::wall(Duration::from_micros(7)),
            stalled: false,
        };
        assert_eq!(
            serde_json::to_string(&ok).expect("serializes"),
            r#"{"outcome":"ok","wall_ns":7000}"#
        );
        let stalled = Outcome::Ok {
            rtt: Rtt::wall(Duration::from_micros(7)),
            stalled: true,
        };
        assert_eq!(
            serde_json::to_string(&stalled).expect("serializes"),
            r#"{"outcome":"ok","wall_ns":7000,"stalled":true}"#
        );
        let failed = Outcome::failed(&connect(ErrorKind::ConnectionRefused), Stage::Connect)
            .expect("a cause");
        assert_eq!(failed.cause(), Some(Cause::Host));
        assert_eq!(
            serde_json::to_string(&failed).expect("serializes"),
            r#"{"outcome":"failed","cause":"host"}"#
        );
    }
}
