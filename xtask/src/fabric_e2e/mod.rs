//! `cargo xtask fabric-e2e`: the fabric check of issue 11, proven in three guests on one
//! virtual segment (a hub on a unix socket: no host IP address), launched by a minimal Slurm.
//!
//! Every guest has two NICs, each its own segment and rail (eth`k`, `10.0.k.i`, Soft-RoCE
//! `rxe{k}`), and brings up munge and slurmd (node1 also slurmctld) from its plan; node1 then
//! runs, inside one `salloc -N 3`, the servers as a job step (`srun --overlap ... rdma-server
//! --serve --max-clients 1`) and `srun --label rdma-client fabric --json` four times:
//! healthy, with `--rails auto` (both rails, each node's name resolving to one address per
//! rail), with a `tc netem` delay on node3, and with node3's rxe devices deleted. The host
//! merges each phase with `rdma-client fabric report` and judges it ([`judge`]).
//!
//! Then the mesh phase ([`mesh`]): every node runs `rdma-server --serve` and `rdma-client mesh`
//! under two labelled ToRs, node1 Prometheus scraping the three with the shipped rules and
//! Alertmanager with the shipped inhibit rules, and faults one after another (node3 dead and
//! back, RoCE blocked on node2, its server stopped, both restored, a lossy link), each checked
//! from Prometheus and Alertmanager in node1 (`xtask mesh-guest`); the host judges the probers'
//! own events too ([`mesh_judge`]).
//!
//! The parts: [`cluster`] (hosts, slurm.conf and the guests' scripts, as text), [`judge`]
//! (what each phase's report must show), [`rails`] (the rails phase's reports and lines),
//! [`mesh`] and [`mesh_judge`].

mod cluster;
mod judge;
mod mesh;
mod mesh_judge;
mod rails;

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use color_eyre::eyre::{Result, WrapErr as _, bail, eyre};
use xshell::{Shell, cmd};

use crate::deps::{self, Group};
use crate::e2e::{self, Bins};
use crate::exec;
use crate::plan::{GUEST_SYNC, Nic, Node, Plan, RdmaDev, Step, StepResult};
use crate::scenario::exit::Speaks;
use crate::scenario::transcript::{HOST, Role, Transcript};
use crate::vm::{self, Net, PlanGuest, VmOptions};

/// The guests.
const NODES: usize = 3;
/// The delay put on the slow node's link.
const DELAY_MS: u32 = 60;

/// Arguments of `cargo xtask fabric-e2e`.
#[derive(Debug, Args)]
pub struct FabricE2eArgs {
    #[command(flatten)]
    pub vm: VmOptions,
    /// Do not build the binaries (use the ones next to xtask).
    #[arg(long)]
    pub no_build: bool,
    /// Copy each phase's report (table) and heat map (PNG, SVG) into this directory (the
    /// README's figures: `--save-figure docs/fabric`).
    #[arg(long, value_name = "DIR")]
    pub save_figure: Option<PathBuf>,
}

/// Entry point.
pub fn cmd(args: &FabricE2eArgs) -> Result<()> {
    let t0 = Instant::now();
    deps::ensure(&[
        Group::Build,
        Group::Run,
        Group::Vm,
        Group::Slurm,
        Group::Prometheus,
    ])?;
    if !args.no_build {
        e2e::build()?;
    }
    let bins = Bins::locate(false)?;
    println!(
        "fabric-e2e: phase build done at {:.1} s",
        t0.elapsed().as_secs_f64()
    );

    let dir = vm::xtask_dir().join("fabric-e2e");
    let files = dir.join("files");
    let out = dir.join("out");
    for d in [&files, &out] {
        if d.exists() {
            std::fs::remove_dir_all(d).wrap_err_with(|| format!("clearing {}", d.display()))?;
        }
        std::fs::create_dir_all(d).wrap_err_with(|| format!("creating {}", d.display()))?;
    }
    let files_s = utf8(&files)?;
    write_files(&files, &files_s, &bins)?;

    let guests: Vec<PlanGuest> = cluster::nodes(NODES)
        .iter()
        .enumerate()
        .map(|(i, name)| PlanGuest {
            name: name.clone(),
            plan: plan(i, name, &files_s, &bins),
            mem_mb: 1024,
        })
        .collect();
    let t = Instant::now();
    let run = vm::run_plans_on(&guests, &Net::new(rails::RAILS, &[])?, &args.vm)?;
    println!(
        "fabric-e2e: phase guests done in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    // The guests run scripts (Slurm, then srun of our binaries) and checks; only the mesh's
    // probers are our binaries' own steps, which print client events.
    let t = Transcript::from_guests(&run, &|name: &str| {
        if name == mesh::PROBER {
            Speaks::Client
        } else {
            Speaks::Other
        }
    });
    let mut problems: Vec<String> = t.deaths().map(str::to_owned).collect();
    for s in &t.roles {
        for l in s
            .stdout
            .lines()
            .filter(|l| l.starts_with("fabric-e2e:") || l.starts_with("mesh-guest:"))
        {
            println!("  {}: {l}", s.guest);
        }
        if !s.ok {
            problems.push(format!(
                "{}: step {} failed ({}): {}\n{}",
                s.guest,
                s.name,
                s.exit,
                s.error.as_deref().unwrap_or(""),
                crate::text::tail(&format!("{}\n{}", s.stdout, s.stderr), 3000)
            ));
        }
    }
    if !problems.is_empty() {
        bail!("fabric-e2e: the guests failed:\n{}", problems.join("\n"));
    }
    let guest_out = run.guests.sync_dir.join("fabric");
    copy_dir(&guest_out, &out)?;
    let verdicts = judge::all(&bins.client, &out, NODES)?;
    for v in &verdicts {
        println!("{v}");
    }
    // The mesh phase: the checks passed in the guests (a failed one is a failed step, above);
    // now the probers' own events.
    let nodes = cluster::nodes(NODES);
    let probers: Vec<Option<&Role>> = nodes
        .iter()
        .map(|node| t.roles_of(node).find(|r| r.name == mesh::PROBER))
        .collect();
    let rank = |name: &str| nodes.iter().position(|n| n == name);
    let (Some(dead), Some(faulted), Some(a), Some(b)) = (
        rank(mesh::DEAD),
        rank(mesh::FAULTED),
        rank(mesh::LOSSY[0]),
        rank(mesh::LOSSY[1]),
    ) else {
        bail!("fabric-e2e: the mesh's faulted nodes are not among {nodes:?}");
    };
    match mesh_judge::check(
        &probers,
        dead,
        faulted,
        [a, b],
        mesh::DOWN_AFTER,
        mesh::RENEW_EVERY,
    ) {
        Ok(v) => println!("fabric-e2e: mesh: {v}"),
        Err(why) => bail!("fabric-e2e: wrong results:\nmesh: {why}"),
    }
    if let Some(to) = &args.save_figure {
        std::fs::create_dir_all(to)?;
        for phase in judge::PHASES {
            let pictures: Vec<String> = match phase {
                // One heat map per rail.
                judge::Phase::Rails => (0..rails::RAILS)
                    .flat_map(|k| ["png", "svg"].map(|ext| format!("rails.rail{k}.{ext}")))
                    .collect(),
                _ => ["png", "svg"]
                    .map(|ext| format!("{}.{ext}", phase.name()))
                    .into(),
            };
            for f in pictures
                .into_iter()
                .chain([format!("{}.txt", phase.name())])
            {
                std::fs::copy(out.join(&f), to.join(&f))
                    .wrap_err_with(|| format!("copying {f} to {}", to.display()))?;
            }
        }
    }
    println!(
        "fabric-e2e: passed in {:.1} s (results in {})",
        t0.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(())
}

/// The hosts file, the munge key, slurm.conf and the scripts, where the guests read them.
fn write_files(files: &Path, files_s: &str, bins: &Bins) -> Result<()> {
    let key = random_key()?;
    let out = format!("{GUEST_SYNC}/fabric");
    for (name, text) in [
        ("hosts", cluster::hosts(NODES, rails::RAILS)),
        ("slurm.conf", cluster::slurm_conf(NODES)),
        ("cgroup.conf", cluster::CGROUP_CONF.to_owned()),
        ("up.sh", cluster::up_script(files_s)),
        (
            "fabric.sh",
            cluster::fabric_script(
                &bins.server,
                &bins.client,
                NODES,
                DELAY_MS,
                judge::THRESHOLDS,
            ),
        ),
        ("launch.sh", cluster::launch_script(files_s, &out, NODES)),
    ] {
        std::fs::write(files.join(name), text)?;
    }
    std::fs::write(files.join("munge.key"), key)?;
    mesh::write_files(files, files_s, NODES)
}

/// 1024 bytes from the kernel's random source (a munge key).
fn random_key() -> Result<Vec<u8>> {
    use std::io::Read as _;
    let mut key = vec![0u8; 1024];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut key))
        .wrap_err("reading /dev/urandom for the munge key")?;
    Ok(key)
}

/// Node `i`'s plan: its rails (eth`k` with `10.0.k.{i+1}` and `rxe{k}` on it), munge and
/// Slurm up; node1 then runs the fabric check, the others wait until it is done; then the
/// mesh phase ([`mesh::steps`]).
fn plan(i: usize, name: &str, files: &str, bins: &Bins) -> Plan {
    let mut up = Step::new("slurm-up", &["/bin/sh", &format!("{files}/up.sh"), name]);
    up.timeout_s = 90.0;
    let mut steps = vec![up];
    if i == 0 {
        let mut fabric = Step::new("fabric", &["/bin/sh", &format!("{files}/launch.sh")]);
        // Derived from the phases of the script it runs (each pair at its pair deadline).
        let script = cluster::fabric_script("", "", NODES, DELAY_MS, judge::THRESHOLDS);
        fabric.timeout_s = cluster::worst_case(&script, NODES, rails::RAILS).as_secs_f64();
        fabric.allow_failure = true;
        let mut done = Step::new("done", &["/bin/true"]);
        done.create_file_when_done = Some("fabric-done".into());
        steps.extend([fabric, done]);
    } else {
        let mut wait = Step::new("wait", &["/bin/true"]);
        // As long as node1's steps may take (derived: crate::deadline).
        wait.wait_for_file = Some("fabric-done".into());
        steps.push(wait);
    }
    steps.extend(mesh::steps(
        i,
        NODES,
        mesh::Bins {
            server: &bins.server,
            client: &bins.client,
            xtask: &bins.xtask,
            files,
        },
    ));
    Plan {
        node: node(i),
        steps,
        sync_dir: GUEST_SYNC.into(),
    }
}

/// Node `i`'s NICs: one rail each.
fn node(i: usize) -> Node {
    Node {
        nics: (0..rails::RAILS)
            .map(|k| {
                let dev = RdmaDev::rxe(&format!("rxe{k}"));
                Nic::v4(
                    &format!("eth{k}"),
                    &format!("10.0.{k}.{}", i + 1),
                    Some(dev),
                )
            })
            .collect(),
        modules: None,
    }
}

fn utf8(p: &Path) -> Result<String> {
    p.to_str()
        .map(str::to_owned)
        .ok_or_else(|| eyre!("{} is not UTF-8", p.display()))
}

/// Copies the plain files of `from` into `to`.
fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    let entries = std::fs::read_dir(from)
        .wrap_err_with(|| format!("reading the guests' results in {}", from.display()))?;
    for e in entries {
        let e = e?;
        if e.file_type()?.is_file() {
            std::fs::copy(e.path(), to.join(e.file_name()))?;
        }
    }
    Ok(())
}

/// `rdma-client fabric report FILE …` (with heat maps) on this host, as a client role.
fn report(client: &str, input: &Path, extra: &[&str]) -> Result<Role> {
    let sh = Shell::new()?;
    let out = exec::output(cmd!(sh, "{client} fabric report {input} {extra...}"))?;
    let step = StepResult {
        name: "fabric-report".into(),
        exit_code: out.status.code(),
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        attempts: 1,
        ..StepResult::default()
    };
    Ok(Role::of(&step, HOST, Speaks::Client))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node1_runs_the_check_and_the_others_wait_for_it() {
        let bins = Bins::for_tests();
        let p = plan(0, "node1", "/f", &bins);
        assert_eq!(p.node.nics[0], Node::guest("10.0.0.1", true).nics[0]);
        assert_eq!(p.node.nics[1].ipv4.as_deref(), Some("10.0.1.1/24"));
        assert_eq!(p.node.nics[1].rdma, Some(RdmaDev::rxe("rxe1")));
        let names: Vec<&str> = p.steps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names[..3], ["slurm-up", "fabric", "done"]);
        // Then the mesh phase, after the fabric check.
        assert_eq!(names[3], "mesh-server");
        assert_eq!(p.steps[0].argv, ["/bin/sh", "/f/up.sh", "node1"]);
        assert_eq!(
            p.steps[2].create_file_when_done.as_deref(),
            Some("fabric-done")
        );
        let p = plan(2, "node3", "/f", &bins);
        assert_eq!(p.node.nics.len(), 2);
        assert_eq!(p.node.nics[1].ipv4.as_deref(), Some("10.0.1.3/24"));
        assert_eq!(p.steps[1].wait_for_file.as_deref(), Some("fabric-done"));
    }

    /// The three plans' waits derive (no circle between the fabric check, the faults and the
    /// checks), and the mesh's services live until the last check.
    #[test]
    fn the_mesh_phase_deadlines_derive_from_its_turns() {
        let bins = Bins::for_tests();
        let mut plans: Vec<Plan> = cluster::nodes(NODES)
            .iter()
            .enumerate()
            .map(|(i, n)| plan(i, n, "/f", &bins))
            .collect();
        crate::deadline::derive(&mut plans).unwrap();
        let step = |p: usize, name: &str| plans[p].steps.iter().find(|s| s.name == name).unwrap();
        let lossy = step(0, "mesh-lossy");
        let prober = step(1, "mesh-prober");
        // The prober on node2 lives past the last check, which it outlasts by its own wait.
        assert!(
            prober.timeout_s > lossy.timeout_s,
            "{} {}",
            prober.timeout_s,
            lossy.timeout_s
        );
        assert!(step(2, "mesh-root").wait_s.unwrap() > step(0, "mesh-steady").timeout_s);
        assert!(step(1, "mesh-root").wait_s.unwrap() > step(0, "mesh-up").timeout_s);
    }
}
