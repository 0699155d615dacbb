//! The argv of our binaries in one place: our server, our client, or the test-only peer that
//! misbehaves, with their environment, a wrapper (valgrind) and device flags. Each harness
//! says what it wants of the role; the order of the words is this file's business.

/// The client's bench use (`rdma-client bench SERVER ...`), as argument lists name it.
pub const BENCH: &str = "bench";

/// One of our binaries, to be run with these arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invocation {
    env: Vec<(String, String)>,
    wrapper: Vec<String>,
    program: String,
    fault: Option<String>,
    subcommand: Option<String>,
    args: Vec<String>,
    device: Option<String>,
}

impl Invocation {
    /// `rdma-server` at `program`.
    pub fn server(program: &str) -> Self {
        Self::new(program)
    }

    /// `rdma-client` at `program`.
    pub fn client(program: &str) -> Self {
        Self::new(program)
    }

    /// The test-only peer at `program` (`rdma-misbehave-client` or `-server`, which print
    /// the events of the binary they stand for), doing `fault` wrong: `--fault FAULT` first,
    /// then the arguments of the binary it stands for.
    pub fn misbehaving(program: &str, fault: &str) -> Self {
        let mut me = Self::new(program);
        me.fault = Some(fault.to_owned());
        me
    }

    fn new(program: &str) -> Self {
        Self {
            env: Vec::new(),
            wrapper: Vec::new(),
            program: program.to_owned(),
            fault: None,
            subcommand: None,
            args: Vec::new(),
            device: None,
        }
    }

    /// Run with these environment variables (`env NAME=VALUE … program`).
    pub fn env<K: AsRef<str>, V: AsRef<str>>(mut self, vars: &[(K, V)]) -> Self {
        self.env.extend(
            vars.iter()
                .map(|(k, v)| (k.as_ref().to_owned(), v.as_ref().to_owned())),
        );
        self
    }

    /// Run under this program (`valgrind …`).
    pub fn wrapper(mut self, wrapper: &[&str]) -> Self {
        self.wrapper.extend(wrapper.iter().map(|w| (*w).to_owned()));
        self
    }

    /// Arguments, after those before them.
    pub fn args<S: AsRef<str>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// The client's use (`bench`, `fabric`, `mesh`): right after the program (and the
    /// test-only peer's `--fault`), before every argument, as the client's command line wants.
    pub fn subcommand(mut self, name: &str) -> Self {
        self.subcommand = Some(name.to_owned());
        self
    }

    /// Name the RDMA device (`--ib-dev D`, last) unless the arguments already name one.
    pub fn device(mut self, device: Option<&str>) -> Self {
        self.device = device.map(str::to_owned);
        self
    }

    /// The command line: `env NAME=VALUE…` when there is an environment, the wrapper, the
    /// program, `--fault FAULT` for the test-only peer, the client's use, the arguments,
    /// `--ib-dev D`.
    pub fn argv(&self) -> Vec<String> {
        let mut v = Vec::new();
        if !self.env.is_empty() {
            v.push("env".to_owned());
            v.extend(self.env.iter().map(|(k, val)| format!("{k}={val}")));
        }
        v.extend(self.wrapper.iter().cloned());
        v.push(self.program.clone());
        if let Some(f) = &self.fault {
            v.extend(["--fault".to_owned(), f.clone()]);
        }
        v.extend(self.subcommand.iter().cloned());
        v.extend(self.args.iter().cloned());
        let named = |a: &String| {
            ["--ib-dev", "-d", "--device"].contains(&a.as_str())
                || a.starts_with("--ib-dev=")
                || a.starts_with("--device=")
        };
        if let Some(d) = &self.device
            && !self.args.iter().any(named)
        {
            v.extend(["--ib-dev".to_owned(), d.clone()]);
        }
        v
    }
}
