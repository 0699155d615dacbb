//! How an xtask failure reads: its message and causes, whose text carries what to do.
//!
//! Every `Err` that reaches `main` is an expected failure of the tool (a package conflict, a
//! missing program, a scenario that failed): it prints as text, never with a backtrace or a
//! source location, whatever `RUST_BACKTRACE` says. A bug is a panic, and color-eyre's panic
//! hook still shows its backtrace.

use color_eyre::Report;

/// The stderr text of the failure that ends xtask.
#[must_use]
pub fn render(report: &Report) -> String {
    let mut chain = rdma_app::report::causes(report).into_iter();
    let mut text = format!("error: {}", chain.next().unwrap_or_default());
    for cause in chain {
        text.push_str("\n  caused by: ");
        // A cause over several lines (a tool's stderr) stays readable under its heading.
        text.push_str(&cause.replace('\n', "\n    "));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use color_eyre::eyre::{WrapErr as _, eyre};

    #[test]
    fn a_failure_reads_as_its_chain_without_backtrace_or_location() {
        let inner: Result<(), Report> = Err(eyre!("`apt-get -s install x` failed:\nE: broken"));
        let report = inner
            .wrap_err("deps: installing x would make apt remove y")
            .wrap_err("`cargo xtask test` failed at: e2e")
            .unwrap_err();
        let text = render(&report);
        assert_eq!(
            text,
            "error: `cargo xtask test` failed at: e2e\n  \
             caused by: deps: installing x would make apt remove y\n  \
             caused by: `apt-get -s install x` failed:\n    E: broken"
        );
        assert!(!text.contains("BACKTRACE") && !text.contains("Location"));
    }

    #[test]
    fn a_cause_the_message_already_quotes_is_not_repeated() {
        let report =
            Report::new(std::io::Error::other("disk full")).wrap_err("writing x: disk full");
        assert_eq!(render(&report), "error: writing x: disk full");
    }
}
