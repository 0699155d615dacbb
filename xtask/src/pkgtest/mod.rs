//! `cargo xtask pkg-test`: the two Debian packages, each installed alone in a guest, run the
//! way they are meant to run.
//!
//! `cargo xtask dist` builds them; then guest A installs `rdma-server_*.deb` with apt (its
//! dependencies resolve from what the host root already has: the guests see it read-only under
//! a throw-away overlay, so every install is gone at power-off) and guest B installs
//! `rdma-client_*.deb`; neither pulls the other. Guest A boots with the host's systemd as PID 1
//! ([`vm::Init::Systemd`]): `systemd-analyze security` rates the installed unit as systemd loaded
//! it (no worse than `cargo xtask dist` rated the file), and `systemctl start
//! rdma-server.service` runs the server with the unit's whole sandbox (DevicePolicy=closed and
//! its DeviceAllow=, ProtectSystem=strict, the system call filter, ...; its main process is
//! checked for the unit's user and limits, see [`unit`]). Both guests have Soft-RoCE on eth0
//! and Soft-iWARP on eth1: the installed client in guest B writes the seed's message over rxe,
//! and again through RDMA CM over siw (`--cm`), with the token the package made, and each must be
//! verified. Then each package is removed (the server's purged) and its files must be gone.

mod guest;
mod unit;

pub use guest::{PkgGuestArgs, cmd as guest_cmd};

use clap::Args;
use color_eyre::eyre::{Result, bail, eyre};

use crate::dist::{self, Dist};
use crate::plan::{DEADLINE_ARG, GUEST_SYNC, Modules, Nic, Node, Plan, RdmaDev, Step};
use crate::scenario::exit::Speaks;
use crate::scenario::judge;
use crate::scenario::role::Invocation;
use crate::scenario::transcript::{Guest, Role, Transcript};
use crate::text;
use crate::vm::{self, Init, Net, PlanGuest, VmOptions};
use rdma_proto::Exit;

const SERVER_IP: &str = "10.0.0.1";
const CLIENT_IP: &str = "10.0.0.2";
/// The guests' addresses on eth1, Soft-iWARP's link.
const SERVER_IWARP_IP: &str = "10.0.1.1";
const CLIENT_IWARP_IP: &str = "10.0.1.2";
/// The unit, and where the package installs it and the token.
const UNIT: &str = "rdma-server.service";
const UNIT_PATH: &str = "/usr/lib/systemd/system/rdma-server.service";
const TOKEN: &str = "/etc/rdma-server/token";
/// The token, copied into guest B with the right mode.
const CLIENT_TOKEN: &str = "/tmp/rdma-write.token";
/// Markers in the sync share.
const TOKEN_READY: &str = "token-ready";
const SERVER_STARTED: &str = "server-started";
const CLIENT_DONE: &str = "client-done";
/// The steps whose writes must be verified: over Soft-RoCE, then through RDMA CM over
/// Soft-iWARP.
const SEED: &str = "seed write with the installed client";
const CM_SEED: &str = "seed write through RDMA CM over siw";
/// The step that runs the server.
const SERVICE: &str = "systemctl start rdma-server.service";
/// The installed client.
const CLIENT: &str = "/usr/bin/rdma-client";

/// One run of the installed client: step name, the server's address, arguments after the
/// common ones, how it must end (`None`: success).
type ClientRun = (String, &'static str, Vec<String>, Option<Exit>);

/// The installed client's runs.
fn client_runs(open_token: &str) -> [ClientRun; 4] {
    let refused = Exit::Refused;
    let usage = Exit::Usage;
    [
        (
            format!("without the token: refused (exit {})", refused.code()),
            SERVER_IP,
            vec![],
            Some(refused),
        ),
        (
            format!(
                "with that file: refused before connecting (exit {})",
                usage.code()
            ),
            SERVER_IP,
            argv(&["--token-file", open_token]),
            Some(usage),
        ),
        (
            SEED.to_owned(),
            SERVER_IP,
            argv(&["--token-file", CLIENT_TOKEN]),
            None,
        ),
        // iWARP connects only through RDMA CM: the service's /dev/infiniband/rdma_cm.
        (
            CM_SEED.to_owned(),
            SERVER_IWARP_IP,
            argv(&["--cm", "--token-file", CLIENT_TOKEN]),
            None,
        ),
    ]
}

/// Arguments of `cargo xtask pkg-test`.
#[derive(Debug, Clone, Args)]
pub struct PkgTestArgs {
    #[command(flatten)]
    pub vm: VmOptions,
    /// Use the packages already in target/dist (do not run `cargo xtask dist`).
    #[arg(long)]
    pub no_build: bool,
}

/// Entry point.
pub fn cmd(args: &PkgTestArgs) -> Result<()> {
    let d = if args.no_build {
        existing()?
    } else {
        dist::build(false)?
    };
    println!(
        "pkg-test: rdma-server.service exposure {:.1} (systemd-analyze security, OK <= {:.1})",
        d.exposure,
        dist::MAX_EXPOSURE
    );
    let xtask = crate::exec::self_exe()?;
    let guests = plans(&d, &xtask, &modules()?)?;
    // Guest A, the server's, boots systemd: the unit runs as packaged.
    let run = vm::run_plans_booted(&guests, &Net::new(2, &[])?, &args.vm, &|g| {
        if g.name == "A" {
            Init::Systemd
        } else {
            Init::Busybox
        }
    })?;
    // The installed client speaks as our client; the rest (apt, dpkg, the service's journal,
    // whose lines are human) are not ours.
    let t = Transcript::from_guests(&run, &|name: &str| {
        if client_runs("").iter().any(|(n, ..)| n == name) {
            Speaks::Client
        } else {
            Speaks::Other
        }
    });
    let mut failures = Vec::new();
    for g in &t.guests {
        match &g.died {
            None => failures.extend(report(g, &t)),
            Some(why) => failures.push(why.clone()),
        }
    }
    if !failures.is_empty() {
        bail!("pkg-test FAILED:\n{}", failures.join("\n"));
    }
    println!(
        "pkg-test PASS: both packages installed apart, rdma-server.service under systemd (its sandbox as packaged) verified the installed client's writes over rxe and through RDMA CM over siw, both removed cleanly"
    );
    Ok(())
}

/// The modules the guests load beyond the initramfs's: RDMA CM, siw's dependencies and
/// siw.ko (built once for the guest kernel, cached).
fn modules() -> Result<Modules> {
    let prepared = vm::prepare()?;
    let kernel = prepared.kernel.ok_or_else(|| eyre!("no kernel prepared"))?;
    let (ko, _) = vm::siw::ensure_siw(&kernel, &vm::cache_dir())?;
    let utf8 = |p: &std::path::Path| {
        p.to_str()
            .map(str::to_owned)
            .ok_or_else(|| eyre!("{} is not UTF-8", p.display()))
    };
    Ok(Modules {
        root: utf8(&kernel.root)?,
        modprobe: vm::siw::SIW_DEPS
            .iter()
            .chain(vm::siw::RDMA_CM)
            .map(|m| (*m).to_owned())
            .collect(),
        insmod: vec![utf8(&ko)?],
    })
}

/// A guest's node: Soft-RoCE on eth0 at `ip`, Soft-iWARP on eth1 at `iwarp_ip`.
fn node(ip: &str, iwarp_ip: &str, modules: &Modules) -> Node {
    Node {
        nics: vec![
            Nic::v4("eth0", ip, Some(RdmaDev::rxe("rxe0"))),
            Nic::v4("eth1", iwarp_ip, Some(RdmaDev::siw("siw0"))),
        ],
        modules: Some(modules.clone()),
    }
}

/// The packages already in target/dist (`--no-build`), rated again.
fn existing() -> Result<Dist> {
    let dir = crate::vm::target_dir().join("dist");
    let find = |name: &str| -> Result<std::path::PathBuf> {
        std::fs::read_dir(&dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| {
                p.file_name()
                    .and_then(|f| f.to_str())
                    .is_some_and(|f| f.starts_with(&format!("{name}_")) && f.ends_with(".deb"))
            })
            .ok_or_else(|| {
                eyre!(
                    "no {name}_*.deb in {}: run `cargo xtask dist`",
                    dir.display()
                )
            })
    };
    Ok(Dist {
        server: find("rdma-server")?,
        client: find("rdma-client")?,
        exposure: dist::unit_exposure(&crate::exec::workspace_root().join(dist::UNIT))?,
    })
}

fn argv(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| (*a).to_owned()).collect()
}

fn step(name: &str, args: &[&str]) -> Step {
    let mut s = Step::new(name, &[]);
    s.argv = argv(args);
    s
}

/// `apt-get install` of a local .deb: its dependencies must resolve from what the host root has
/// installed (the guests have no route to a mirror). (`--no-download` would say so more plainly,
/// but apt 2.6 then refuses the local file: "Pathname to install is not absolute".)
fn apt_install(deb: &str) -> Step {
    let mut s = step(
        &format!("apt-get install {}", deb.rsplit('/').next().unwrap_or(deb)),
        &[
            "apt-get",
            "install",
            "-y",
            "-q",
            "--no-install-recommends",
            "-o",
            "APT::Sandbox::User=root",
            "-o",
            "Dpkg::Use-Pty=0",
            deb,
        ],
    );
    s.timeout_s = 240.0;
    s
}

/// Turns off man-db's index rebuild, which dpkg triggers on every install and removal of a
/// package with a man page: `mandb` reading every man page of the host root over 9p under TCG
/// takes minutes. The overlay is thrown away at power-off; the man page itself is still checked.
fn no_mandb() -> Step {
    step(
        "skip man-db's index rebuild (guest only)",
        &["rm", "-f", "/var/lib/man-db/auto-update"],
    )
}

/// The two guests' plans.
fn plans(d: &Dist, xtask: &str, modules: &Modules) -> Result<Vec<PlanGuest>> {
    let utf8 = |p: &std::path::Path| {
        p.to_str()
            .map(str::to_owned)
            .ok_or_else(|| eyre!("{} is not UTF-8", p.display()))
    };
    let (server_deb, client_deb) = (utf8(&d.server)?, utf8(&d.client)?);
    let guest = |args: &[&str]| {
        let mut v = vec![xtask];
        v.extend_from_slice(args);
        v.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>()
    };
    let until = format!("{GUEST_SYNC}/{CLIENT_DONE}");

    let mut share_token = step(
        "share the token",
        &[
            "install",
            "-m",
            "600",
            TOKEN,
            &format!("{GUEST_SYNC}/token"),
        ],
    );
    share_token.create_file_when_done = Some(TOKEN_READY.into());
    let mut service = step(SERVICE, &[]);
    service.argv = guest(&[
        "pkg-guest",
        "service",
        "--unit",
        UNIT,
        "--until",
        &until,
        "--timeout",
        DEADLINE_ARG,
    ]);
    service.create_file_when_started = Some(SERVER_STARTED.into());
    // It serves until the client guest is done: its deadline is derived from the client's
    // steps (crate::deadline), and told to `pkg-guest service` through DEADLINE_ARG.
    service.stop_when_file = Some(CLIENT_DONE.into());
    let server = vec![
        no_mandb(),
        apt_install(&server_deb),
        Step {
            argv: guest(&["pkg-guest", "absent", "--package", "rdma-client"]),
            ..Step::new("the server's install pulled no client", &[])
        },
        Step {
            argv: guest(&["pkg-guest", "installed", "--package", "rdma-server"]),
            ..Step::new("rdma-server installed as packaged", &[])
        },
        step(
            "systemd-analyze verify",
            &["systemd-analyze", "verify", UNIT_PATH],
        ),
        Step {
            argv: guest(&[
                "pkg-guest",
                "security",
                "--unit",
                UNIT,
                "--max",
                &format!("{:.1}", d.exposure),
            ]),
            ..Step::new("systemd-analyze security of the loaded unit", &[])
        },
        share_token,
        service,
        Step {
            argv: guest(&["pkg-guest", "remove", "--package", "rdma-server", "--purge"]),
            timeout_s: 180.0,
            ..Step::new("dpkg -r and -P rdma-server", &[])
        },
    ];

    let client = |(name, server, extra, exit): ClientRun| {
        let mut s = Step::new(name, &[]);
        s.argv = Invocation::client(CLIENT)
            .args([server, "--wait-for-server", "60s", "--json"])
            .args(extra)
            .argv();
        s.expect_exit = exit.map_or(0, |e| i32::from(e.code()));
        s.timeout_s = 90.0;
        // Keep going: the server waits for the end marker, and each step is judged.
        s.allow_failure = true;
        s
    };
    let mut get_token = step(
        "copy the token",
        &[
            "install",
            "-m",
            "600",
            &format!("{GUEST_SYNC}/token"),
            CLIENT_TOKEN,
        ],
    );
    get_token.wait_for_file = Some(TOKEN_READY.into());
    let open_token = "/tmp/open.token";
    let [without, open, seed, cm_seed] = client_runs(open_token).map(client);
    let mut first = without;
    first.wait_for_file = Some(SERVER_STARTED.into());
    let mut done = step("client done", &["true"]);
    done.create_file_when_done = Some(CLIENT_DONE.into());
    let mut client_steps = vec![
        no_mandb(),
        apt_install(&client_deb),
        Step {
            argv: guest(&["pkg-guest", "absent", "--package", "rdma-server"]),
            ..Step::new("the client's install pulled no server", &[])
        },
        Step {
            argv: guest(&["pkg-guest", "installed", "--package", "rdma-client"]),
            ..Step::new("rdma-client installed as packaged", &[])
        },
        get_token,
        first,
        step(
            "a token file others can read",
            &["install", "-m", "644", CLIENT_TOKEN, open_token],
        ),
        open,
        seed,
        cm_seed,
        done,
        Step {
            argv: guest(&["pkg-guest", "remove", "--package", "rdma-client"]),
            timeout_s: 180.0,
            ..Step::new("dpkg -r rdma-client", &[])
        },
    ];
    // Every client step runs whatever happened before: the server waits for the end marker.
    for s in &mut client_steps {
        s.allow_failure = true;
    }
    Ok(vec![
        PlanGuest {
            name: "A".into(),
            plan: Plan {
                node: node(SERVER_IP, SERVER_IWARP_IP, modules),
                steps: server,
                sync_dir: GUEST_SYNC.into(),
            },
            mem_mb: 1024,
        },
        PlanGuest {
            name: "B".into(),
            plan: Plan {
                node: node(CLIENT_IP, CLIENT_IWARP_IP, modules),
                steps: client_steps,
                sync_dir: GUEST_SYNC.into(),
            },
            mem_mb: 1024,
        },
    ])
}

/// Prints one guest's steps; returns what failed.
fn report(g: &Guest, t: &Transcript) -> Vec<String> {
    let guest = &g.name;
    let mut failures = Vec::new();
    if let Some(e) = g.setup_failure() {
        failures.push(format!(
            "guest {guest}: setup `{}` failed: {}",
            e.argv.join(" "),
            e.stderr
        ));
    }
    let runs = client_runs("");
    for s in t.roles_of(guest) {
        let mut problems = Vec::new();
        if !s.ok {
            problems.push(match &s.error {
                Some(e) => e.clone(),
                None => s.exit.to_string(),
            });
        }
        if let Some((.., want)) = runs.iter().find(|(n, ..)| *n == s.name) {
            problems.extend(judge::exit(s, *want).filter(|_| s.ok));
        }
        if (s.name == SEED || s.name == CM_SEED) && s.ok {
            problems.extend(seed_problem(s));
        }
        // The service runs rdma-server as its unit says, without --json: its lines (its
        // journal) are human.
        if s.name == SERVICE && s.ok && !s.stdout.contains("verified") {
            problems.push("the service never reported a verified write".into());
        }
        let status = if problems.is_empty() { "PASS" } else { "FAIL" };
        println!("{status}  {guest}: {} ({:.1} s)", s.name, s.elapsed_s);
        if s.name == SERVICE {
            for line in s
                .stdout
                .lines()
                .filter(|l| l.starts_with("received message:") || l.starts_with("verified:"))
            {
                println!("      server: {line}");
            }
        }
        if !problems.is_empty() {
            failures.push(format!(
                "guest {guest}: {}: {}\n      stdout: {}\n      stderr: {}",
                s.name,
                problems.join("; "),
                text::tail(s.stdout.trim(), 1500),
                text::tail(s.stderr.trim(), 1500)
            ));
        }
    }
    if let Some(e) = &g.plan_error {
        if failures.is_empty() {
            failures.push(format!("guest {guest}: {e}"));
        }
    }
    failures
}

/// The seed write's client: every line of its stdout an event (`--json`), and its write
/// verified.
fn seed_problem(s: &Role) -> Option<String> {
    if let Err(e) = judge::only_events(s) {
        return Some(e);
    }
    (!judge::client_verified(s)).then(|| "no `verified` event with verified: true".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dist() -> Dist {
        Dist {
            server: "/t/dist/rdma-server_0.1.0-1_amd64.deb".into(),
            client: "/t/dist/rdma-client_0.1.0-1_amd64.deb".into(),
            exposure: 1.3,
        }
    }

    #[test]
    fn each_guest_installs_only_its_package() {
        let g = plans(&dist(), "/x/xtask", &Modules::default()).unwrap();
        let installs = |i: usize| -> Vec<String> {
            g[i].plan
                .steps
                .iter()
                .filter(|s| s.argv.first().is_some_and(|a| a == "apt-get"))
                .filter_map(|s| s.argv.last().cloned())
                .collect()
        };
        assert_eq!(installs(0), ["/t/dist/rdma-server_0.1.0-1_amd64.deb"]);
        assert_eq!(installs(1), ["/t/dist/rdma-client_0.1.0-1_amd64.deb"]);
        // The server stops only once the client is done, and is removed after it stopped.
        let server = &g[0].plan.steps;
        let run = server.iter().position(|s| s.name == SERVICE).unwrap();
        assert!(!server[run].background);
        assert!(server[run].argv.iter().any(|a| a.ends_with(CLIENT_DONE)));
        assert!(
            server[run + 1..]
                .iter()
                .any(|s| s.argv.contains(&"remove".to_owned()))
        );
        // Under systemd: the installed unit started by name, rated as loaded against dist's
        // figure; both guests carry rxe on eth0 and siw on eth1.
        assert_eq!(&server[run].argv[1..4], ["pkg-guest", "service", "--unit"]);
        assert_eq!(server[run].argv[4], UNIT);
        let security = server
            .iter()
            .find(|s| s.argv.get(2).is_some_and(|a| a == "security"))
            .unwrap();
        assert_eq!(&security.argv[3..], ["--unit", UNIT, "--max", "1.3"]);
        for guest in &g {
            let kinds: Vec<_> = guest
                .plan
                .node
                .nics
                .iter()
                .map(|n| n.rdma.as_ref().map(|r| r.kind))
                .collect();
            assert_eq!(
                kinds,
                [
                    Some(crate::plan::LinkKind::Rxe),
                    Some(crate::plan::LinkKind::Siw)
                ]
            );
            assert!(guest.plan.node.modules.is_some());
        }
        let client = &g[1].plan.steps;
        let seed = client.iter().find(|s| s.name == SEED).unwrap();
        assert_eq!(
            seed.argv[0], "/usr/bin/rdma-client",
            "the installed client, not the build's"
        );
        assert!(
            client
                .iter()
                .any(|s| s.create_file_when_done.as_deref() == Some(CLIENT_DONE))
        );
    }

    #[test]
    fn the_clients_must_end_as_their_kinds_and_the_seed_be_verified() {
        let g = plans(&dist(), "/x/xtask", &Modules::default()).unwrap();
        let client = &g[1].plan.steps;
        let run = |name: &str| client.iter().find(|s| s.name == name).unwrap();
        let refused = run("without the token: refused (exit 7)");
        assert_eq!(refused.expect_exit, i32::from(Exit::Refused.code()));
        assert_eq!(
            refused.argv.join(" "),
            "/usr/bin/rdma-client 10.0.0.1 --wait-for-server 60s --json"
        );
        let open = run("with that file: refused before connecting (exit 2)");
        assert_eq!(open.expect_exit, i32::from(Exit::Usage.code()));
        assert_eq!(&open.argv[5..], ["--token-file", "/tmp/open.token"]);
        assert_eq!(run(SEED).expect_exit, 0);
        // The second seed goes through RDMA CM to the server's Soft-iWARP address.
        let cm = run(CM_SEED);
        assert_eq!(cm.expect_exit, 0);
        assert_eq!(
            cm.argv.join(" "),
            "/usr/bin/rdma-client 10.0.1.1 --wait-for-server 60s --json --cm --token-file /tmp/rdma-write.token"
        );

        let seed = |stdout: &str| {
            let step = crate::plan::StepResult {
                name: SEED.into(),
                exit_code: Some(0),
                ok: true,
                stdout: stdout.into(),
                ..Default::default()
            };
            Role::of(&step, "B", Speaks::Client)
        };
        let verdict = |v: bool| {
            format!(
                r#"{{"type":"verified","verified":{v},"length":1,"crc32c":0,"text":"x","truncated":false}}"#
            )
        };
        assert_eq!(seed_problem(&seed(&verdict(true))), None);
        assert!(seed_problem(&seed(&verdict(false))).is_some());
        assert!(seed_problem(&seed("")).is_some());
        assert!(
            seed_problem(&seed(&format!("verified\n{}", verdict(true))))
                .unwrap()
                .contains("verified")
        );
        assert!(seed_problem(&seed(r#"{"type":"verifed"}"#)).is_some());
    }
}
