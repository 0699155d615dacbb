//! Which exit code each failure of the server ends in: the outermost typed error in its chain
//! decides, among the codes `--help` documents ([`EXITS`]).

use crate::access::AccessError;
use crate::budget;
use crate::config::ConfigError;
use crate::exit::{EXITS, ServerError};
use rdma_app::{self as app, Exit};

/// The exit for the error that ends the server, as documented in `--help`.
pub fn classify(report: &color_eyre::Report) -> Exit {
    app::classify(report, EXITS, |cause| {
        if cause.is::<AccessError>() || cause.is::<ConfigError>() || cause.is::<budget::TooSmall>()
        {
            return Some(Exit::Usage);
        }
        cause
            .downcast_ref::<ServerError>()
            .map(|e| match e {
                ServerError::Listen { .. } => Exit::Network,
                ServerError::Lifetime(_) => Exit::Timeout,
                ServerError::Signals(_) => Exit::Internal,
            })
            .or_else(|| rdma_app::verbs::verbs_exit(cause))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use color_eyre::Report;

    #[test]
    fn each_server_error_has_its_documented_exit() {
        let listen = Report::new(ServerError::Listen {
            addr: "0.0.0.0:7471".parse().unwrap(),
            source: std::io::ErrorKind::AddrInUse.into(),
        });
        let lifetime = Report::new(ServerError::Lifetime(std::time::Duration::from_secs(1)));
        let token =
            Report::new(AccessError::EmptyToken("f".into())).wrap_err("loading the access token");
        let signals = Report::new(ServerError::Signals(std::io::ErrorKind::Other.into()));
        assert_eq!(classify(&listen), Exit::Network);
        assert_eq!(classify(&lifetime), Exit::Timeout);
        assert_eq!(classify(&token), Exit::Usage);
        assert_eq!(classify(&signals), Exit::Internal);
        assert_eq!(classify(&color_eyre::eyre::eyre!("odd")), Exit::Internal);
    }
}
