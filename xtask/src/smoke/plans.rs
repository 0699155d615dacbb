//! What each guest of a `vm-smoke` run does, for each shape of run: one or two guests, one or
//! two NICs (one link cut), IPv4 or IPv6-only, Soft-RoCE (perftest) or Soft-iWARP (rping), and
//! a capture of the RoCE v2 traffic.

use crate::plan::{GUEST_SHARE, GUEST_SYNC, LinkKind, Modules, Nic, Node, Plan, RdmaDev, Step};
use crate::scenario::exit::Speaks;
use crate::scenario::role::Invocation;
use std::collections::HashMap;

/// The marker guest A's server sets when it started.
pub const MARKER: &str = "server-started";
/// The capture guest A writes into its share (`--capture`).
pub const CAPTURE: &str = "capture.pcap";
/// Packets tcpdump keeps before it exits (a 4096-byte write is 4 RoCE packets at rxe's MTU).
pub const CAPTURE_PACKETS: u32 = 40;
/// With our pair (one short write-with-immediate): the client's write and the server's ACK.
pub const OUR_CAPTURE_PACKETS: u32 = 2;

/// Which of the workloads sharing one boot a step, marker or file belongs to: the first keeps
/// the plain names (`server`, `client`, [`MARKER`], [`CAPTURE`]), the others get `-I`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag(pub usize);

impl Tag {
    /// `base` for this workload: `server`, `server-2`.
    pub fn name(self, base: &str) -> String {
        match self.0 {
            0 => base.to_owned(),
            i => match base.rsplit_once('.') {
                // capture.pcap -> capture-2.pcap
                Some((stem, ext)) => format!("{stem}-{i}.{ext}"),
                None => format!("{base}-{i}"),
            },
        }
    }
}

/// The shape of a smoke run.
#[derive(Clone, Debug)]
pub struct Shape {
    pub nodes: u8,
    pub nics: usize,
    /// The link (NIC index) whose wire is cut.
    pub dead: Option<usize>,
    /// The NIC (index) both guests leave administratively down.
    pub down: Option<usize>,
    /// Every NIC IPv6-only.
    pub ipv6: bool,
    pub transport: LinkKind,
    /// tcpdump on UDP 4791 in guest A during the perftest pair.
    pub capture: bool,
    /// rping through RDMA CM instead of perftest (always with siw).
    pub cm: bool,
    pub iters: u32,
    /// Modules the guests load (siw and RDMA CM for `--transport siw`).
    pub modules: Option<Modules>,
    /// Instead of perftest, our own pair with no device flags (`--rdma-write`): the paths of
    /// rdma-server and rdma-client.
    pub ours: Option<Ours>,
    /// `--tclass` for both ends of our pair.
    pub tclass: Option<u8>,
    /// `bench --mode MODE` for our client (a short run of 4096-byte messages).
    pub bench: Option<String>,
    /// A client with a wrong RDMA CM nonce goes first (see [`super::cm::BAD_NONCE`]).
    pub cm_bad_nonce: bool,
    /// Both guests drop this percentage of the frames they send on the traffic link while our
    /// pair runs the lossy workload ([`super::lossy`]).
    pub loss: Option<u8>,
}

impl Shape {
    /// What the guests are, apart from what runs on them: shapes that agree on it share one
    /// boot ([`plans_for`]).
    pub fn network(
        &self,
    ) -> (
        u8,
        usize,
        Option<usize>,
        Option<usize>,
        bool,
        LinkKind,
        bool,
        bool,
    ) {
        (
            self.nodes,
            self.nics,
            self.dead,
            self.down,
            self.ipv6,
            self.transport,
            self.cm,
            self.oob_nic(),
        )
    }

    /// Whether link `k` carries nothing (cut, or its NICs left down).
    pub fn unusable(&self, k: usize) -> bool {
        Some(k) == self.dead || Some(k) == self.down
    }

    /// The link the test traffic takes: the first usable one.
    pub fn traffic_link(&self) -> usize {
        (0..self.nics)
            .find(|k| !self.unusable(*k))
            .unwrap_or_default()
    }

    /// Guest `guest`'s (1-based) address on NIC `nic`: 10.0.NIC.GUEST, or fd00:NIC::GUEST
    /// (fd00::GUEST on eth0) with `--ipv6`.
    pub fn addr(&self, guest: u8, nic: usize) -> String {
        match (self.ipv6, nic) {
            (true, 0) => format!("fd00::{guest}"),
            (true, k) => format!("fd00:{k}::{guest}"),
            (false, k) => format!("10.0.{k}.{guest}"),
        }
    }

    /// Whether the guests get one more NIC, the last, with IPv4 and no RDMA device: perftest's
    /// out-of-band TCP exchange is IPv4 only ("Address family for hostname not supported for
    /// fd00::1", `--ipv6` or not), so an IPv6-only RoCE pair needs it. rping (RDMA CM) does not.
    pub fn oob_nic(&self) -> bool {
        self.ipv6 && !self.rping() && self.ours.is_none()
    }

    /// How many packets the capture keeps: enough of the pair's traffic, and no more than it
    /// sends (tcpdump exits when it has them).
    pub fn capture_packets(&self) -> u32 {
        if self.ours.is_some() {
            OUR_CAPTURE_PACKETS
        } else {
            CAPTURE_PACKETS
        }
    }

    /// Whether the pair is rping (RDMA CM) rather than perftest.
    pub fn rping(&self) -> bool {
        self.cm || self.transport == LinkKind::Siw
    }

    /// NICs per guest, the out-of-band one included.
    pub fn total_nics(&self) -> usize {
        self.nics + usize::from(self.oob_nic())
    }

    /// Where the client reaches guest A's server: its out-of-band IPv4 address, or its
    /// address on the traffic link.
    pub fn server_addr(&self) -> String {
        if self.oob_nic() {
            format!("10.0.{}.1", self.nics)
        } else {
            self.addr(1, self.traffic_link())
        }
    }

    /// The RDMA device on NIC `nic` (`rxe1`, `siw0`).
    pub fn dev(&self, nic: usize) -> String {
        format!("{}{nic}", self.transport.as_str())
    }

    /// Guest `guest`'s node: every NIC addressed, an RDMA device on each.
    pub fn node(&self, guest: u8) -> Node {
        let mut nics: Vec<Nic> = (0..self.nics)
            .map(|k| {
                let name = self.dev(k);
                let dev = Some(match self.transport {
                    LinkKind::Rxe => RdmaDev::rxe(&name),
                    LinkKind::Siw => RdmaDev::siw(&name),
                });
                let iface = format!("eth{k}");
                let mut nic = if self.ipv6 {
                    Nic::v6(&iface, &self.addr(guest, k), dev)
                } else {
                    Nic::v4(&iface, &self.addr(guest, k), dev)
                };
                nic.up = Some(k) != self.down;
                nic
            })
            .collect();
        if self.oob_nic() {
            let k = self.nics;
            nics.push(Nic::v4(
                &format!("eth{k}"),
                &format!("10.0.{k}.{guest}"),
                None,
            ));
        }
        Node {
            nics,
            modules: self.modules.clone(),
        }
    }
}

fn owned(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

/// The perftest pair over the traffic link: `-d DEV -x INDEX` with the index of the GID of
/// this guest's own address there (resolved in the guest), the server's address last.
fn perftest(shape: &Shape, me: u8, server: Option<&str>) -> Vec<String> {
    let k = shape.traffic_link();
    let dev = shape.dev(k);
    let mut v = owned(&["ib_write_bw", "-d", &dev, "-x"]);
    v.push(format!("@gid-index:{dev}:{}", shape.addr(me, k)));
    v.extend(owned(&["-s", "4096", "-n"]));
    v.push(shape.iters.to_string());
    v.extend(server.map(str::to_owned));
    v
}

/// rping over the traffic link (RDMA CM; iWARP has no other way to connect a QP).
fn rping(shape: &Shape, server: bool) -> Vec<String> {
    let a = shape.addr(1, shape.traffic_link());
    let role = if server { "-s" } else { "-c" };
    let mut v = owned(&["rping", role, "-a", &a, "-C", "3", "-v"]);
    if !server {
        v.push("-V".into());
    }
    v
}

/// Our binaries, as the guests run them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ours {
    pub server: String,
    pub client: String,
    /// The test-only misbehaving client (`rdma-misbehave-client`).
    pub misbehave_client: String,
    /// rdma-core-rs's RDMA CM example (`examples/cm_connect`), where a shape runs it.
    pub cm_example: Option<String>,
}

/// Our pair, with no device, port or GID flags: the server one-shot on its default dual-stack
/// `[::]:7471`, the client to A's address on the traffic link; both must pick that link's
/// device by themselves.
pub(super) fn ours(shape: &Shape, server: bool, tag: Tag) -> Option<Vec<String>> {
    let Ours {
        server: srv,
        client: cli,
        ..
    } = shape.ours.as_ref()?;
    // The first pair of a boot on the default port; each later one on its own, so that it
    // never meets the one before still closing.
    let port = (tag.0 > 0).then(|| rdma_proto::DEFAULT_PORT + u16::try_from(tag.0).unwrap_or(0));
    let mut v = if server {
        let mut v = Invocation::server(srv).args(["--json", "--timeout", "30s"]);
        if let Some(p) = port {
            v = v.args(["--listen".to_owned(), format!("[::]:{p}")]);
        }
        v
    } else {
        let addr = shape.server_addr();
        let to = port.map_or_else(|| addr.clone(), |p| crate::plan::host_port(&addr, p));
        // A bench writes its own pattern: the message is the write's alone.
        let message: &[&str] = if shape.bench.is_some() {
            &[]
        } else {
            &["--message", OUR_MESSAGE]
        };
        Invocation::client(cli)
            .args(["--json"])
            .args(message)
            .args([&to])
    };
    if let Some(tc) = shape.tclass {
        v = v.args(["--tclass".to_owned(), tc.to_string()]);
    }
    // RDMA CM on rxe is the client's request; on siw both ends take it by themselves.
    if shape.cm && !server {
        v = v.args(["--cm"]);
    }
    if let (Some(mode), false) = (&shape.bench, server) {
        v = v
            .subcommand("bench")
            .args(["--mode", mode, "--size", "4096", "--iters", "200"]);
    }
    Some(v.argv())
}

/// Which role each step of `plans` plays, by the program it runs: our server, our client or
/// the test-only client (their events); anything else (perftest, rping, tc) is not ours.
pub fn cast(plans: &[(String, Plan)], ours: Option<&Ours>) -> HashMap<String, Speaks> {
    let mut roles = HashMap::new();
    let Some(o) = ours else {
        return roles;
    };
    for step in plans.iter().flat_map(|(_, p)| &p.steps) {
        let speaks = match step.argv.first() {
            Some(p) if *p == o.server => Speaks::Server,
            Some(p) if *p == o.client || *p == o.misbehave_client => Speaks::Client,
            _ => continue,
        };
        roles.insert(step.name.clone(), speaks);
    }
    roles
}

/// What our client writes (`--rdma-write`).
pub const OUR_MESSAGE: &str = "Hello RDMA Write!";

fn server_step(shape: &Shape, tag: Tag) -> Step {
    let argv = if let Some(v) = ours(shape, true, tag) {
        v
    } else if shape.rping() {
        rping(shape, true)
    } else {
        perftest(shape, 1, None)
    };
    let mut s = Step {
        argv,
        ..Step::new(tag.name("server"), &[])
    };
    s.background = true;
    s.create_file_when_started = Some(tag.name(MARKER));
    s.timeout_s = 90.0;
    s
}

fn client_step(shape: &Shape, me: u8, tag: Tag) -> Step {
    let server = shape.server_addr();
    let argv = if let Some(v) = ours(shape, false, tag) {
        v
    } else if shape.rping() {
        rping(shape, false)
    } else {
        perftest(shape, me, Some(&server))
    };
    let mut c = Step {
        argv,
        ..Step::new(tag.name("client"), &[])
    };
    c.wait_for_file = Some(tag.name(MARKER));
    // The marker says the server process started, not that it listens yet: retry.
    c.retries = 20;
    c.retry_delay_s = 0.5;
    c.timeout_s = 60.0;
    c
}

/// tcpdump on the traffic link's UDP 4791 into guest A's share; exits after
/// [`CAPTURE_PACKETS`] packets (`-U`: each written at once; `-Z root`: it keeps the right to
/// write the share).
fn capture_step(shape: &Shape, tag: Tag) -> Step {
    let iface = format!("eth{}", shape.traffic_link());
    let file = format!("{GUEST_SHARE}/{}", tag.name(CAPTURE));
    let count = shape.capture_packets().to_string();
    let mut s = Step::new(
        tag.name("tcpdump"),
        &[
            "tcpdump", "-i", &iface, "-n", "-U", "-Z", "root", "-c", &count, "-w", &file, "udp",
            "port", "4791",
        ],
    );
    s.background = true;
    s.timeout_s = 90.0;
    s
}

/// `busybox ping` from B to A on link `k`: must answer on a live link, must not on a cut one
/// or one whose NICs are down.
fn ping_step(shape: &Shape, k: usize) -> Step {
    let dead = shape.unusable(k);
    let a = shape.addr(1, k);
    let name = match (Some(k) == shape.down, dead) {
        (true, _) => "ping-down-link",
        (false, true) => "ping-dead-link",
        (false, false) => "ping-live-link",
    };
    let mut s = Step::new(name, &["busybox", "ping", "-c", "2", "-W", "3", &a]);
    // busybox ping's own status (not one of ours): 1 when no reply came.
    s.expect_exit = i32::from(dead);
    // A live link may need a moment for neighbour discovery.
    if !dead {
        s.retries = 3;
    }
    s.timeout_s = 20.0;
    s
}

/// The plans of one shape, by guest name.
#[cfg(test)]
pub fn plans(shape: &Shape) -> Vec<(String, Plan)> {
    plans_for(std::slice::from_ref(shape))
}

/// The plans of one boot that runs `shapes` one after the other (all of one
/// [`Shape::network`]; the first's is used): the network is proven once (the sync share's
/// ping-pong, each link pinged from B), then each workload's pair in turn, its steps, markers
/// and files named by its [`Tag`]. A workload's server starts once the one before has its
/// client's verdict.
pub fn plans_for(shapes: &[Shape]) -> Vec<(String, Plan)> {
    let Some(net) = shapes.first() else {
        return Vec::new();
    };
    let info = Step::new("ibv_devinfo", &["ibv_devinfo"]);
    let sync = GUEST_SYNC.to_owned();
    if net.nodes == 1 {
        let mut steps = vec![info];
        for (i, shape) in shapes.iter().enumerate() {
            if shape.capture {
                steps.push(capture_step(shape, Tag(i)));
            }
            steps.extend([server_step(shape, Tag(i)), client_step(shape, 1, Tag(i))]);
        }
        let plan = Plan {
            node: net.node(1),
            steps,
            sync_dir: sync,
        };
        return vec![("A".into(), plan)];
    }
    // Ping-pong through the sync share before the pair: B looks up "ping" before A creates it,
    // so a stale (cached) negative lookup would show up as a timeout here.
    let mut ping = Step::new("sync-ping", &["true"]);
    ping.create_file_when_done = Some("ping".into());
    let mut wait_pong = Step::new("sync-pong", &["true"]);
    wait_pong.wait_for_file = Some("pong".into());
    wait_pong.timeout_s = 30.0;
    let mut pong = Step::new("sync-pong", &["true"]);
    pong.wait_for_file = Some("ping".into());
    pong.timeout_s = 30.0;
    pong.create_file_when_done = Some("pong".into());
    let mut a_steps = vec![info.clone(), ping, wait_pong];
    let mut b_steps = vec![info, pong];
    b_steps.extend((0..net.nics).map(|k| ping_step(net, k)));
    for (i, shape) in shapes.iter().enumerate() {
        let tag = Tag(i);
        let done = tag.name("client-done");
        if i > 0 {
            // The workload before has its verdict: its pair is over.
            let mut turn = Step::new(tag.name("turn"), &["true"]);
            turn.wait_for_file = Some(Tag(i - 1).name("client-done"));
            a_steps.push(turn);
        }
        if shape.capture {
            a_steps.push(capture_step(shape, tag));
        }
        if let Some(loss) = shape.loss {
            let names = |n: &str| tag.name(n);
            let parts = super::lossy::Parts {
                tag: &names,
                dev: format!("eth{}", shape.traffic_link()),
                loss,
                client: ours(shape, false, tag).unwrap_or_default(),
                server: server_step(shape, tag),
                started: tag.name(MARKER),
            };
            let (a, b) = super::lossy::steps(parts, &done);
            a_steps.extend(a);
            b_steps.extend(b);
            continue;
        }
        let mut server = server_step(shape, tag);
        if shape.rping() && shape.ours.is_none() {
            // rping's server may outlive its client: stopped once the client is done, and
            // judged by the pings it printed (vm-smoke), not by how it ended.
            server.stop_when_file = Some(done.clone());
            server.allow_failure = true;
        }
        let cm = match (&shape.ours, shape.cm_bad_nonce) {
            (Some(ours), true) => {
                let names = |n: &str| tag.name(n);
                super::cm::steps(&super::cm::Parts {
                    tag: &names,
                    client: client_step(shape, 2, tag),
                    server_bin: &ours.server,
                    misbehave_client: &ours.misbehave_client,
                    cm_example: ours.cm_example.as_deref(),
                    server: shape.server_addr(),
                    guest_a: shape.addr(1, shape.traffic_link()),
                    done: &done,
                })
            }
            _ => Default::default(),
        };
        let ((before, after), cm_b) = cm;
        a_steps.extend(before);
        a_steps.push(server);
        a_steps.extend(after);
        b_steps.extend(cm_b);
        let mut client = client_step(shape, 2, tag);
        // Made whatever the client's outcome, so that the next workload's turn comes.
        client.create_file_when_ended = Some(done);
        // The pairs after a failed one still run: each is judged on its own.
        client.allow_failure = shapes.len() > 1;
        b_steps.push(client);
    }
    vec![
        (
            "A".into(),
            Plan {
                node: net.node(1),
                steps: a_steps,
                sync_dir: sync.clone(),
            },
        ),
        (
            "B".into(),
            Plan {
                node: net.node(2),
                steps: b_steps,
                sync_dir: sync,
            },
        ),
    ]
}

/// How many `ping data:` lines a verified rping client printed.
pub fn rping_verified(stdout: &str) -> usize {
    stdout
        .lines()
        .filter(|l| l.contains("ping data: rdma-ping-"))
        .count()
}

#[cfg(test)]
pub(super) mod tests;
