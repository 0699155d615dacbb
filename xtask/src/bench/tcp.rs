//! `xtask bench-tcp` (hidden, runs inside the guests): a plain TCP stream between the two
//! guests, to measure what the virtual link itself carries. No python or iperf is needed on
//! the user's machine: the guests run the host's xtask binary over 9p.
//!
//! `--listen ADDR`: accept one connection, read until EOF, print `{"bytes":N,"secs":S}` (time
//! from the first byte to EOF: the receiver's view is the one that counts).
//! `--connect ADDR --secs S`: write 64 KiB chunks for S seconds, then close.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use clap::Args;
use color_eyre::eyre::{Result, WrapErr, bail};

use super::parse::Tcp;

/// Arguments of `xtask bench-tcp`.
#[derive(Debug, Args)]
pub struct TcpArgs {
    /// Receive: accept one connection on this address.
    #[arg(long, conflicts_with = "connect")]
    pub listen: Option<SocketAddr>,
    /// Send: connect to this address.
    #[arg(long)]
    pub connect: Option<SocketAddr>,
    /// How long the sender sends, seconds.
    #[arg(long, default_value_t = 5.0)]
    pub secs: f64,
    /// Deadline of the whole run, seconds (accept, connect, reads and writes).
    #[arg(long, default_value_t = 60.0)]
    pub timeout: f64,
}

const CHUNK: usize = 64 * 1024;

/// Entry point.
pub fn cmd(args: &TcpArgs) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs_f64(args.timeout.clamp(1.0, 3600.0));
    match (args.listen, args.connect) {
        (Some(addr), None) => {
            let t = receive(addr, deadline)?;
            println!("{}", serde_json::to_string(&t)?);
            Ok(())
        }
        (None, Some(addr)) => {
            let t = send(
                addr,
                Duration::from_secs_f64(args.secs.clamp(0.1, 600.0)),
                deadline,
            )?;
            println!("{}", serde_json::to_string(&t)?);
            Ok(())
        }
        _ => bail!("bench-tcp needs exactly one of --listen ADDR or --connect ADDR"),
    }
}

fn left(deadline: Instant) -> Result<Duration> {
    let d = deadline.saturating_duration_since(Instant::now());
    if d.is_zero() {
        bail!("bench-tcp: deadline passed");
    }
    Ok(d)
}

fn receive(addr: SocketAddr, deadline: Instant) -> Result<Tcp> {
    let l = TcpListener::bind(addr).wrap_err_with(|| format!("binding {addr}"))?;
    l.set_nonblocking(true)?;
    let mut s = loop {
        match l.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                left(deadline).wrap_err("no sender connected")?;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e).wrap_err("accepting the sender"),
        }
    };
    s.set_nonblocking(false)?;
    let mut buf = vec![0u8; CHUNK];
    let mut bytes = 0u64;
    let mut first: Option<Instant> = None;
    loop {
        s.set_read_timeout(Some(left(deadline)?))?;
        let n = s.read(&mut buf).wrap_err("reading the stream")?;
        if n == 0 {
            break;
        }
        first.get_or_insert_with(Instant::now);
        bytes += n as u64;
    }
    let secs = first.map_or(0.0, |f| f.elapsed().as_secs_f64());
    Ok(Tcp { bytes, secs })
}

fn send(addr: SocketAddr, secs: Duration, deadline: Instant) -> Result<Tcp> {
    let mut s = TcpStream::connect_timeout(&addr, left(deadline)?)
        .wrap_err_with(|| format!("connecting to {addr}"))?;
    let buf = vec![0x5au8; CHUNK];
    let t = Instant::now();
    let mut bytes = 0u64;
    while t.elapsed() < secs {
        s.set_write_timeout(Some(left(deadline)?))?;
        s.write_all(&buf).wrap_err("writing the stream")?;
        bytes += CHUNK as u64;
    }
    s.shutdown(std::net::Shutdown::Write)?;
    Ok(Tcp {
        bytes,
        secs: t.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_stream_is_counted_on_both_ends() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let deadline = Instant::now() + Duration::from_secs(20);
        let rx = std::thread::spawn(move || receive(addr, deadline));
        let tx = loop {
            match send(addr, Duration::from_millis(100), deadline) {
                Ok(t) => break t,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => panic!("{e:#}"),
            }
        };
        let got = rx.join().unwrap().unwrap();
        assert!(tx.bytes >= CHUNK as u64);
        assert_eq!(got.bytes, tx.bytes);
        assert!(got.secs > 0.0 && got.mbs() > 0.0);
    }
}
