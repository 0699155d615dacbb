//! `cargo xtask vm-smoke`: proves the VM infrastructure: guests boot, their RDMA devices come
//! up, and a perftest pair (`ib_write_bw`) runs across the virtual link (or inside one guest).
//! Options prove each capability of the guests: two NICs with one link cut (`--nics 2
//! --dead-link 0`), IPv6-only NICs (`--ipv6`), Soft-iWARP with RDMA CM (`--transport siw`:
//! rping), and a capture of the RoCE v2 packets (`--capture`); and our own pair with no
//! device flags (`--rdma-write`: also through RDMA CM, with `bench`, with a wrong CM nonce).
//! [`plans`] holds what each guest does, `judge` the verdicts on our pair, `suite` the shapes
//! `cargo xtask test` runs.

mod cm;
mod judge;
mod lossy;
mod plans;
mod suite;

pub use suite::suite;

use std::time::Instant;

use clap::Args;
use color_eyre::eyre::{Result, bail, eyre};

use crate::plan::{LinkKind, Modules};
use crate::scenario::transcript::{Role, Transcript};
use crate::vm::{self, PlanGuest};
use plans::{CAPTURE, Shape, Tag};

/// Arguments of `cargo xtask vm-smoke`.
#[derive(Debug, Args)]
pub struct SmokeArgs {
    /// 2: server in guest A, client in guest B; 1: both in one guest.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub nodes: u8,
    #[command(flatten)]
    pub guests: vm::GuestFlags,
    /// Messages the perftest pair sends.
    #[arg(long, default_value_t = 200)]
    pub iters: u32,
    /// NICs per guest (eth0, eth1), each on its own link, an RDMA device on each (rxe0, rxe1).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub nics: u8,
    /// Cut this link's wire (NIC index): the NICs stay up with their addresses, nothing
    /// crosses; the pair runs over the other link, and B proves the cut link dead (ping).
    #[arg(long)]
    pub dead_link: Option<u8>,
    /// Leave this NIC (index) administratively down in both guests (its addresses and RDMA
    /// device set, the device's port DOWN); the pair runs over the other link.
    #[arg(long)]
    pub down_link: Option<u8>,
    /// IPv6-only NICs (fd00::X/64 on eth0, fd00:1::X/64 on eth1): DAD waited for, the RDMA
    /// device's IPv6 GID checked, perftest on that GID.
    #[arg(long)]
    pub ipv6: bool,
    /// The RDMA transport: rxe (Soft-RoCE, perftest) or siw (Soft-iWARP, built for the guest
    /// kernel once; rping through RDMA CM).
    #[arg(long, value_enum, default_value_t = LinkKind::Rxe)]
    pub transport: LinkKind,
    /// tcpdump on UDP 4791 in guest A during the pair; the capture must hold RoCE v2 packets.
    #[arg(long)]
    pub capture: bool,
    /// rping through RDMA CM (modules configfs, ib_cm, iw_cm, rdma_cm, rdma_ucm loaded) instead
    /// of perftest; implied by --transport siw.
    #[arg(long)]
    pub rdma_cm: bool,
    /// Our own pair instead of perftest: rdma-server and rdma-client with no device, port or
    /// GID flags; each must pick the traffic link's device itself and say so. With
    /// --transport siw it connects through RDMA CM by itself (and takes notify tcp); with
    /// --rdma-cm the client asks for RDMA CM on rxe (`--cm`).
    #[arg(long)]
    pub rdma_write: bool,
    /// With --rdma-write: both ends mark their packets with this RoCE traffic class
    /// (`--tclass`); with --capture every captured packet must carry it in its IP header.
    #[arg(long, requires = "rdma_write", value_name = "TOS")]
    pub tclass: Option<u8>,
    /// With --rdma-write: the client measures the link (`bench --mode lat|bw`, a short run of one
    /// size) instead of one write; its rows must come.
    #[arg(long, requires = "rdma_write", value_parser = ["lat", "bw"])]
    pub bench: Option<String>,
    /// With --rdma-write through RDMA CM: a first client presents a wrong nonce (`--fault
    /// cm-bad-nonce`) and must be rejected (exit 3), then the server must serve the real one.
    #[arg(long, requires = "rdma_write")]
    pub cm_bad_nonce: bool,
    /// With --rdma-write: both guests drop this percentage of the frames they send on the
    /// traffic link (`tc netem loss`) while our pair runs 20 one-shot writes against one
    /// `--serve` server, each of which must be verified, and a 4 s `bench --mode bw` of 64 KiB,
    /// whose row must come.
    #[arg(long, requires = "rdma_write", value_name = "PCT",
          value_parser = clap::value_parser!(u8).range(1..=50))]
    pub loss: Option<u8>,
    /// Prepare kernel, initramfs (and siw.ko with --transport siw), boot nothing.
    #[arg(long)]
    pub prepare_only: bool,
    /// Run the suite `cargo xtask test` runs (two NICs with eth0's link cut, IPv6-only, siw,
    /// the capture), one after the other.
    #[arg(long, conflicts_with_all = ["nics", "dead_link", "down_link", "ipv6", "transport", "capture", "rdma_cm", "rdma_write", "tclass", "bench", "loss", "prepare_only"])]
    pub suite: bool,
}

impl SmokeArgs {
    /// The run's shape, or why the flags do not make one.
    fn shape(&self, modules: Option<Modules>, ours: Option<plans::Ours>) -> Result<Shape> {
        let nics = usize::from(self.nics);
        let dead = self.dead_link.map(usize::from);
        let down = self.down_link.map(usize::from);
        if dead.is_some() && down.is_some() {
            bail!("--dead-link and --down-link together leave the pair no link");
        }
        if let Some(d) = dead.or(down) {
            if self.nodes < 2 {
                bail!("--dead-link / --down-link need --nodes 2: a peer proves the link unusable");
            }
            if nics < 2 {
                bail!("--dead-link / --down-link {d} need --nics 2: the pair needs a live link");
            }
            if d >= nics {
                bail!("there is no link {d}: the guests have NICs 0..{}", nics - 1);
            }
        }
        if self.capture && (self.transport != LinkKind::Rxe || self.rdma_cm) {
            bail!(
                "--capture records perftest's RoCE v2 (UDP 4791): use it with --transport rxe and no --rdma-cm"
            );
        }
        if self.cm_bad_nonce && self.transport != LinkKind::Siw && !self.rdma_cm {
            bail!("--cm-bad-nonce tries RDMA CM: use it with --transport siw or --rdma-cm");
        }
        if self.loss.is_some() && (self.nodes < 2 || self.bench.is_some() || self.cm_bad_nonce) {
            bail!(
                "--loss runs its own workload (writes, then a bench) between two guests: use it with --nodes 2 and without --bench or --cm-bad-nonce"
            );
        }
        if (self.transport == LinkKind::Siw || self.rdma_cm) && self.nodes < 2 {
            bail!("rping (--transport siw, --rdma-cm) runs between two guests: use --nodes 2");
        }
        vm::Net::new(nics, dead.as_slice())?;
        Ok(Shape {
            nodes: self.nodes,
            nics,
            dead,
            down,
            ipv6: self.ipv6,
            transport: self.transport,
            capture: self.capture,
            cm: self.rdma_cm,
            iters: self.iters,
            modules,
            ours,
            tclass: self.tclass,
            bench: self.bench.clone(),
            cm_bad_nonce: self.cm_bad_nonce,
            loss: self.loss,
        })
    }
}

pub fn parse_bw_average(stdout: &str) -> Option<f64> {
    let mut lines = stdout.lines().skip_while(|l| !l.contains("BW average"));
    lines.next()?;
    lines.find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() >= 4 && f[0].parse::<u64>().is_ok())
            .then(|| f[3].parse().ok())
            .flatten()
    })
}

/// Prepares what the guests boot (and siw.ko for siw); the modules a node loads (RDMA CM for
/// rping, siw's dependency and siw.ko for siw).
fn prepare(args: &SmokeArgs) -> Result<(vm::Prepared, Option<Modules>, f64)> {
    args.shape(None, None)?;
    let prepared = vm::prepare()?;
    let siw = args.transport == LinkKind::Siw;
    if !siw && !args.rdma_cm {
        return Ok((prepared, None, 0.0));
    }
    let kernel = prepared
        .kernel
        .clone()
        .ok_or_else(|| eyre!("no kernel prepared"))?;
    let path = |p: &std::path::Path| {
        p.to_str()
            .map(str::to_owned)
            .ok_or_else(|| eyre!("{} is not UTF-8", p.display()))
    };
    let names = |l: &[&str]| l.iter().map(|m| (*m).to_owned()).collect::<Vec<_>>();
    let mut modules = Modules {
        root: path(&kernel.root)?,
        modprobe: names(vm::siw::RDMA_CM),
        insmod: Vec::new(),
    };
    if !siw {
        return Ok((prepared, Some(modules), 0.0));
    }
    let t = Instant::now();
    let (ko, built) = vm::siw::ensure_siw(&kernel, &vm::cache_dir())?;
    eprintln!(
        "siw: {} {} ({:.1} s)",
        if built { "built" } else { "cached" },
        ko.display(),
        t.elapsed().as_secs_f64()
    );
    modules.modprobe.splice(0..0, names(vm::siw::SIW_DEPS));
    modules.insmod.push(path(&ko)?);
    Ok((prepared, Some(modules), t.elapsed().as_secs_f64()))
}

/// Entry point.
pub fn cmd(args: &SmokeArgs) -> Result<()> {
    if args.suite {
        let t = Instant::now();
        suite(&args.guests.vm)?;
        println!("vm-smoke --suite: OK in {:.1} s", t.elapsed().as_secs_f64());
        return Ok(());
    }
    run(args)
}

/// One shape.
fn run(args: &SmokeArgs) -> Result<()> {
    run_group(std::slice::from_ref(args))
}

/// What one workload of a boot showed: its verdict lines, printed after the guests'.
struct Verdict {
    lines: Vec<String>,
}

/// Shapes that share their network ([`Shape::network`]) in one boot of the guests, one
/// workload after the other ([`plans::plans_for`]), each judged on its own steps and files.
pub(super) fn run_group(group: &[SmokeArgs]) -> Result<()> {
    let t0 = Instant::now();
    let first = group
        .first()
        .ok_or_else(|| eyre!("vm-smoke: no shape to run"))?;
    let (_, modules, siw_s) = prepare(first)?;
    if first.prepare_only {
        println!(
            "vm-smoke: prepared in {:.1} s (kernel, initramfs{})",
            t0.elapsed().as_secs_f64(),
            if modules.is_some() { ", siw.ko" } else { "" }
        );
        return Ok(());
    }
    let ours = if group.iter().any(|a| a.rdma_write) {
        crate::e2e::build()?;
        let b = crate::e2e::Bins::locate(true)?;
        Some(plans::Ours {
            server: b.server,
            client: b.client,
            misbehave_client: b.misbehave_client,
            cm_example: b
                .cm_example
                .filter(|_| group.iter().any(|a| a.cm_bad_nonce)),
        })
    } else {
        None
    };
    let shapes = group
        .iter()
        .map(|a| a.shape(modules.clone(), ours.clone().filter(|_| a.rdma_write)))
        .collect::<Result<Vec<Shape>>>()?;
    let shape = &shapes[0];
    if let Some(other) = shapes.iter().find(|s| s.network() != shape.network()) {
        bail!(
            "vm-smoke: shapes of one boot must share their network: {:?} and {:?}",
            shape.network(),
            other.network()
        );
    }
    let net = vm::Net::new(shape.total_nics(), shape.dead.as_slice())?;
    crate::deps::ensure(&[crate::deps::Group::Run])?;
    if shapes.iter().any(|s| s.rping() || s.capture) {
        crate::deps::ensure(&[crate::deps::Group::Transports])?;
    }
    let plans = plans::plans_for(&shapes);
    let cast = plans::cast(&plans, ours.as_ref());
    let nodes: Vec<PlanGuest> = plans
        .into_iter()
        .map(|(name, plan)| PlanGuest {
            name,
            plan,
            mem_mb: 1024,
        })
        .collect();
    let run = vm::run_plans_on(&nodes, &net, &first.guests.vm)?;
    let t = Transcript::from_guests(&run, &|n: &str| cast.get(n).copied().unwrap_or_default());
    let mut problems = Vec::new();
    for g in &t.guests {
        match &g.died {
            None if g.ok => {}
            None => problems.push(format!(
                "{}: plan failed: {}\n  diagnostics: {}",
                g.name,
                g.plan_error.as_deref().unwrap_or("?"),
                serde_json::to_string_pretty(&g.diagnostics).unwrap_or_default()
            )),
            Some(why) => problems.push(why.clone()),
        }
    }
    // The marker crossed from guest A to the host (and to B) through the 9p sync share.
    if !run.guests.sync_dir.join(plans::MARKER).exists() {
        problems.push(format!(
            "marker {} is missing from the sync dir {}",
            plans::MARKER,
            run.guests.sync_dir.display()
        ));
    }
    let plan_failed = !problems.is_empty();
    let verdicts: Vec<Verdict> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| judge_workload(s, Tag(i), &t, &run, plan_failed, &mut problems))
        .collect();

    let p = &run.guests.prepared;
    println!(
        "vm-smoke ({} guest{}, {} NIC{} each{}{}, {}{}, {}{}):",
        nodes.len(),
        if nodes.len() > 1 { "s" } else { "" },
        shape.nics,
        if shape.nics > 1 { "s" } else { "" },
        if shape.oob_nic() {
            " + an IPv4 one for perftest's out-of-band exchange"
        } else {
            ""
        },
        match (shape.dead, shape.down) {
            (Some(d), _) => format!(", link {d} cut"),
            (_, Some(d)) => format!(", eth{d} left down"),
            _ => String::new(),
        },
        if shape.ipv6 { "IPv6-only, " } else { "" },
        shape.transport.as_str(),
        p.accel_why,
        if shapes.len() > 1 {
            format!("; {} workloads in this boot", shapes.len())
        } else {
            String::new()
        }
    );
    if shape.transport == LinkKind::Siw {
        println!("  siw.ko     {siw_s:>6.1} s");
    }
    println!(
        "  kernel     {:>6.1} s  ({})",
        p.kernel_time.as_secs_f64(),
        match &p.kernel {
            Some(k) if k.fresh => format!("downloaded + unpacked {}", k.release),
            Some(k) => format!("cached {}", k.release),
            None => "?".into(),
        }
    );
    println!(
        "  initramfs  {:>6.1} s  ({})",
        p.initramfs_time.as_secs_f64(),
        if p.initramfs_built { "built" } else { "cached" }
    );
    for g in &t.guests {
        let boot = g
            .boot
            .map_or("?".to_owned(), |b| format!("{:.1} s", b.as_secs_f64()));
        let steps = g.plan_s.map_or("?".to_owned(), |s| format!("{s:.1} s"));
        println!(
            "  guest {}    boot {boot}, plan {steps}, total {:.1} s, exit {:?}",
            g.name,
            g.elapsed.unwrap_or_default().as_secs_f64(),
            g.exit_code
        );
        for s in g.setup.iter().chain(t.roles_of(&g.name)) {
            let wait = if s.waited_s > 0.0 {
                format!(", waited {:.2} s for marker", s.waited_s)
            } else {
                String::new()
            };
            let said = s.stdout.lines().next().filter(|_| s.argv.is_empty());
            println!(
                "      {:<16} {:>5.2} s  attempts {} {}{wait}{}",
                s.name,
                s.elapsed_s,
                s.attempts,
                s.exit,
                said.map(|l| format!("  ({l})")).unwrap_or_default()
            );
        }
    }
    println!(
        "  guests     {:>6.1} s wall",
        run.guests.guests_time.as_secs_f64()
    );
    println!("  total      {:>6.1} s", t0.elapsed().as_secs_f64());
    for v in &verdicts {
        for l in &v.lines {
            println!("  {l}");
        }
    }
    if !problems.is_empty() {
        bail!("vm-smoke failed:\n{}", problems.join("\n"));
    }
    println!("vm-smoke: OK");
    Ok(())
}

/// Judges workload `tag` of a boot (`shape`) from its own steps and capture; adds what went
/// wrong to `problems`. With `plan_failed` only the pair's own output is added (the plan's
/// error says the rest).
fn judge_workload(
    shape: &Shape,
    tag: Tag,
    t: &Transcript,
    run: &vm::PlanRun,
    plan_failed: bool,
    problems: &mut Vec<String>,
) -> Verdict {
    if shape.loss.is_some() {
        return match lossy::judge(&|n: &str| tag.name(n), t) {
            Ok(lines) => Verdict { lines },
            Err(p) => {
                problems.extend(p);
                Verdict { lines: Vec::new() }
            }
        };
    }
    let step = |name: &str| t.role(&tag.name(name));
    let (client, server) = (step("client"), step("server"));
    // perftest's and rping's own human lines: they print no events of ours.
    let bw = client.and_then(|c| parse_bw_average(&c.stdout));
    let pings = client.map_or(0, |c| plans::rping_verified(&c.stdout));
    let worked = if plan_failed {
        // What the pair itself printed (its last attempt), which the plan error leaves out.
        for step in [server, client].into_iter().flatten() {
            for (what, text) in [("stdout", &step.stdout), ("stderr", &step.stderr)] {
                let tail = crate::text::tail(text, 2000);
                if !tail.trim().is_empty() {
                    problems.push(format!("{} {what} (tail):\n{tail}", step.name));
                }
            }
        }
        false
    } else {
        let server_ok = |s: &Role| {
            if shape.rping() && shape.ours.is_none() {
                plans::rping_verified(&s.stdout) == 3
            } else {
                s.ok
            }
        };
        let shown = if shape.ours.is_some() {
            match (client, server) {
                (Some(c), Some(s)) => match judge::our_choice(shape, c, s)
                    .and_then(|()| judge::rejected(shape, &step, s))
                {
                    Ok(()) => true,
                    Err(e) => {
                        problems.push(format!("{}: {e}", tag.name("client")));
                        false
                    }
                },
                _ => false,
            }
        } else if shape.rping() {
            pings == 3
        } else {
            bw.is_some()
        };
        let ok = matches!((client, server), (Some(c), Some(s)) if c.ok && server_ok(s) && shown);
        if !ok {
            problems.push(format!(
                "the {} pair {} did not show its result (bandwidth / 3 verified pings / our verdict): client {client:?}, server {:?}",
                shape.transport.as_str(),
                tag.name("client"),
                server.map(|s| (s.exit, &s.stdout, &s.stderr))
            ));
        }
        ok
    };
    let mut lines = Vec::new();
    let want_ip = if shape.ipv6 { 6 } else { 4 };
    if shape.capture {
        let path = run.guests.outcomes[0].share_dir.join(tag.name(CAPTURE));
        match captured(shape, &path, want_ip) {
            Ok(p) => {
                let mut tcs: Vec<u8> = p.iter().map(|p| p.traffic_class).collect();
                tcs.sort_unstable();
                tcs.dedup();
                let mut ops: Vec<u8> = p.iter().map(|p| p.opcode).collect();
                ops.sort_unstable();
                ops.dedup();
                lines.push(format!(
                    "capture    {} RoCE v2 packets over IPv{want_ip} on UDP 4791 (tcpdump kept {}): traffic class {tcs:02x?}, BTH opcodes {ops:02x?}",
                    p.len(),
                    shape.capture_packets()
                ));
            }
            Err(e) => problems.push(e),
        }
    }
    if !worked {
        return Verdict { lines };
    }
    let dev = shape.dev(shape.traffic_link());
    if let Some(bw) = bw {
        lines.push(format!(
            "ib_write_bw 4096 B x {} over {dev}: BW average {bw:.2} MB/sec (TCG: only ratios mean anything)",
            shape.iters
        ));
    }
    if shape.ours.is_some() {
        lines.push(format!(
            "rdma-write over {dev}{}{}: verified, no device flags",
            if shape.rping() { " (RDMA CM)" } else { "" },
            shape
                .bench
                .as_ref()
                .map(|m| format!(", bench --mode {m}"))
                .unwrap_or_default()
        ));
    } else if shape.rping() {
        lines.push(format!(
            "rping over {dev} (RDMA CM): {pings} of 3 pings verified"
        ));
    }
    Verdict { lines }
}

/// The RoCE v2 packets of the capture at `path`: all over IPv`want_ip`, all with the shape's
/// `--tclass` when it has one, at least one; or what is wrong with it.
fn captured(
    shape: &Shape,
    path: &std::path::Path,
    want_ip: u8,
) -> std::result::Result<Vec<crate::pcap::RocePacket>, String> {
    let p = std::fs::read(path)
        .map_err(|e| eyre!("{}: {e}", path.display()))
        .and_then(|b| crate::pcap::roce_packets(&b))
        .map_err(|e| format!("no capture to read: {e:#}"))?;
    if p.iter().any(|p| p.ip_version != want_ip) {
        return Err(format!(
            "the capture {} holds RoCE v2 packets over IPv{} where all should be IPv{want_ip}",
            path.display(),
            if want_ip == 4 { 6 } else { 4 }
        ));
    }
    if let Some(tc) = shape.tclass
        && p.iter().any(|p| p.traffic_class != tc)
    {
        let seen: std::collections::BTreeSet<u8> = p.iter().map(|p| p.traffic_class).collect();
        return Err(format!(
            "--tclass {tc:#04x} should mark every RoCE v2 packet; the capture {} has traffic classes {seen:02x?}",
            path.display()
        ));
    }
    if p.is_empty() {
        return Err(format!(
            "the capture {} holds no RoCE v2 packet",
            path.display()
        ));
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bw_parsing() {
        let out = "---------------------------------------------------------------------------------------\n \
#bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n \
4096       200              12.34              11.56  \t\t   0.002960\n\
---------------------------------------------------------------------------------------\n";
        assert_eq!(parse_bw_average(out), Some(11.56));
        assert_eq!(
            parse_bw_average("Couldn't connect to 10.0.0.1:18515\n"),
            None
        );
    }
}
