//! `cargo xtask vm-run -- /abs/prog args`: one command in one guest (host userland, Debian
//! kernel with rdma_rxe loaded, no network or rxe set up), for debugging.

use std::time::Duration;

use color_eyre::eyre::{Result, bail};

use super::{GuestSpec, run_guests};

#[derive(Debug, clap::Args)]
pub struct VmRunArgs {
    #[command(flatten)]
    pub guests: super::GuestFlags,
    /// Absolute path of the program, then its arguments.
    #[arg(trailing_var_arg = true, required = true)]
    pub argv: Vec<String>,
}

pub fn cmd(args: &VmRunArgs) -> Result<()> {
    let mut spec = GuestSpec::new("A", 1, args.argv.clone());
    spec.timeout = Duration::from_secs(args.guests.timeout);
    let run = run_guests(&[spec], &args.guests.vm)?;
    if args.guests.vm.keep {
        println!(
            "run directory (shares, console logs): {}",
            run.dir().display()
        );
    }
    for o in &run.outcomes {
        if !args.guests.vm.verbose {
            println!("--- console tail of {} ---\n{}", o.name, o.console_tail);
        }
        match o.exit_code {
            Some(0) => println!("{}: exit 0 in {:.1} s", o.name, o.elapsed.as_secs_f64()),
            code => bail!(
                "{}: command failed (exit {code:?}, timed out: {})",
                o.name,
                o.timed_out
            ),
        }
    }
    Ok(())
}
