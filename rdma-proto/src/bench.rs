//! The `bench` extension of `hello` (feature `"bench"` in the banner): the client asks the
//! server for a benchmark session instead of one write, and carries every parameter itself, so
//! the server needs no matching flags.
//!
//! Also the contract both sides share about what the bytes are: the payload pattern (every
//! byte has its high bit set) and the ping-pong counters of `lat` (1..=127, never 0, never a
//! pattern byte), so a side spinning on the last byte of its buffer can never mistake an old
//! byte for the next ping. Pure; no I/O.

use serde::Serialize;
use serde::ser::{SerializeStruct as _, Serializer};

/// What the client measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BenchMode {
    /// Ping-pong of RDMA Writes (like `ib_write_lat`): the server answers each write with one.
    Lat,
    /// A stream of RDMA Writes (like `ib_write_bw`): the server only checks the end result.
    Bw,
}

impl BenchMode {
    /// `"lat"` or `"bw"`.
    pub fn as_str(self) -> &'static str {
        match self {
            BenchMode::Lat => "lat",
            BenchMode::Bw => "bw",
        }
    }
}

impl std::fmt::Display for BenchMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for BenchMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "lat" => Ok(BenchMode::Lat),
            "bw" => Ok(BenchMode::Bw),
            other => Err(format!(
                "unknown bench mode `{}`: use `lat` or `bw`",
                crate::text::shorten(other)
            )),
        }
    }
}

/// Both sides of a session post a signalled write at least this often (and so keep at most a
/// few times this many in their send queue). Not on the wire: the one number the client's
/// loops and the server's pong loop size their queues by.
pub const SIGNAL_EVERY: u64 = 16;

/// The feature a server lists in its banner when it serves bench sessions.
pub const FEATURE: &str = "bench";
/// The feature a server lists in its banner when its `lat` sessions end with the stamped
/// exchange (`hello.bench.stamped`): every server that serves bench sessions lists it.
pub const FEATURE_STAMPED: &str = "stamped";
/// The immediate data of both writes of the stamped exchange ("STMP").
pub const STAMP_IMM: u32 = 0x5354_4d50;
/// Most sizes one session may sweep.
pub const MAX_SIZES: usize = 64;
/// Most exchanges (lat) or writes (bw) per size.
pub const MAX_ITERS: u64 = 100_000_000;

/// `hello.bench`: on the wire `mode`, `sizes`, `iters`, and for `lat` the client's buffer as
/// `addr` and `rkey` (see [`BenchKind`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchParams {
    /// What is measured, with what only that mode carries.
    pub kind: BenchKind,
    /// Message sizes, strictly ascending; the largest is `hello.length` (the buffer it needs).
    pub sizes: Vec<u64>,
    /// Exchanges (lat) or writes (bw) per size. With bw the client may stop earlier (a
    /// duration); the server only checks the final bytes.
    pub iters: u64,
    /// `lat` only: the sweep ends with the stamped exchange (see [`Turnaround`]). On the wire
    /// only when `true`.
    pub stamped: bool,
}

/// `result.stamps`: what the server's device stamped in a `lat` session's stamped exchange,
/// raw, for the client to judge. After the sweep the client writes one byte with immediate
/// [`STAMP_IMM`] (its last byte again, so the final content does not change); the server's
/// receive completion of it is stamped `recv`; it answers with one byte with immediate into
/// the client's buffer, whose send completion (the client's ACK) is stamped `send`. Both are
/// ticks of the server's device clock, which runs at `clock_khz` and keeps the bits of `mask`.
/// Only a server whose device stamps completions sends it; the exchange itself runs either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Turnaround {
    /// The stamp of the receive completion of the client's ping.
    pub recv: u64,
    /// The stamp of the send completion of the server's answer.
    pub send: u64,
    /// The device clock's frequency (`hca_core_clock`), kHz.
    pub clock_khz: u64,
    /// The bits a stamp holds (`completion_timestamp_mask`).
    pub mask: u64,
}

/// A bench session's mode and what only it needs: `lat` names the client's buffer the server
/// writes its answers to, `bw` needs nothing. A `lat` without a buffer cannot be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchKind {
    /// Ping-pong: the server answers each write into the client's buffer.
    Lat(PongBuffer),
    /// A stream of writes.
    Bw,
}

/// `lat`: the client's buffer the server writes its answers to (`hello.length` bytes).
/// On the wire it is `hello.bench`'s `addr` and `rkey`, or a `next`'s `pong` object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PongBuffer {
    /// `hello.bench.addr`.
    pub addr: u64,
    /// `hello.bench.rkey`: the remote key of that buffer.
    pub rkey: u32,
}

impl BenchKind {
    /// Its mode.
    #[must_use]
    pub fn mode(self) -> BenchMode {
        match self {
            BenchKind::Lat(_) => BenchMode::Lat,
            BenchKind::Bw => BenchMode::Bw,
        }
    }
}

/// The wire form, field order as PROTOCOL.md writes it (and the golden vectors hold).
impl Serialize for BenchParams {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let pongs = match self.kind {
            BenchKind::Lat(p) => Some(p),
            BenchKind::Bw => None,
        };
        let fields = 3 + if pongs.is_some() { 2 } else { 0 } + usize::from(self.stamped);
        let mut st = s.serialize_struct("BenchParams", fields)?;
        st.serialize_field("mode", &self.mode())?;
        st.serialize_field("sizes", &self.sizes)?;
        st.serialize_field("iters", &self.iters)?;
        if let Some(p) = pongs {
            st.serialize_field("addr", &p.addr)?;
            st.serialize_field("rkey", &p.rkey)?;
        }
        if self.stamped {
            st.serialize_field("stamped", &true)?;
        }
        st.end()
    }
}

impl BenchParams {
    /// Its mode.
    #[must_use]
    pub fn mode(&self) -> BenchMode {
        self.kind.mode()
    }

    /// Checks what the fields must satisfy together, for a hello of `length` bytes.
    /// Returns the field at fault and why.
    pub fn check(&self, length: u64) -> Result<(), (&'static str, String)> {
        check_sweep(&self.sizes, self.iters, length)?;
        if self.stamped && self.mode() != BenchMode::Lat {
            let (field, why) = STAMPED_NEEDS_LAT;
            return Err((field, why.to_owned()));
        }
        Ok(())
    }
}

/// The sizes and iterations of a session of `length` bytes: the field at fault and why.
pub fn check_sweep(sizes: &[u64], iters: u64, length: u64) -> Result<(), (&'static str, String)> {
    if sizes.is_empty() || sizes.len() > MAX_SIZES {
        return Err((
            "sizes",
            format!("has {} entries; give 1..={MAX_SIZES} sizes", sizes.len()),
        ));
    }
    if sizes[0] == 0 || sizes.windows(2).any(|w| w[0] >= w[1]) {
        return Err((
            "sizes",
            "must be at least 1 and strictly ascending".to_owned(),
        ));
    }
    if sizes.last() != Some(&length) {
        return Err((
            "sizes",
            format!("the largest size must equal hello's length ({length})"),
        ));
    }
    if !(1..=MAX_ITERS).contains(&iters) {
        return Err(("iters", format!("{iters} is out of range 1..={MAX_ITERS}")));
    }
    Ok(())
}

/// Why a `bw` hello asking for the stamped exchange is refused (the field and the reason).
pub const STAMPED_NEEDS_LAT: (&str, &str) = (
    "stamped",
    "only a lat session ends with the stamped exchange: leave it out of a bw hello",
);

/// Why a `lat` hello without the client's buffer is refused (the field and the reason).
pub const LAT_NEEDS_PONGS: (&str, &str) = (
    "addr",
    "lat needs the client's buffer (`addr` and `rkey`) for the server's answers",
);

/// Byte `i` of a bench payload: never below 0x80, so never a ping counter.
#[must_use]
pub fn pattern_byte(i: usize) -> u8 {
    0x80 | ((i.wrapping_mul(31).wrapping_add(7)) as u8 & 0x7f)
}

/// Fills `buf` with the bench pattern.
///
/// The pattern repeats every [`PATTERN_PERIOD`] bytes, so one period is computed and copied
/// along the buffer: a memory copy, fast even in a debug build (a server fills megabytes of it
/// before it may answer a bench hello).
pub fn fill_pattern(buf: &mut [u8]) {
    let mut period = [0u8; PATTERN_PERIOD];
    for (i, b) in period.iter_mut().enumerate() {
        *b = pattern_byte(i);
    }
    for chunk in buf.chunks_mut(PATTERN_PERIOD) {
        chunk.copy_from_slice(&period[..chunk.len()]);
    }
}

/// The bench pattern's period in bytes: [`pattern_byte`] depends on `i` modulo 128 only.
pub const PATTERN_PERIOD: usize = 128;

/// The last byte of ping-pong exchange `n` (1-based): 1..=127, and consecutive exchanges differ.
/// Total: `n = 0` (no exchange yet) is 127, the counter cycle's step before exchange 1, and no
/// `n` overflows.
#[must_use]
pub fn counter(n: u64) -> u8 {
    // (n - 1) mod 127, without the subtraction that underflows at 0.
    ((n % 127 + 126) % 127) as u8 + 1
}

/// What the server's buffer holds when a session of `p` ends: every size written its pattern,
/// in ascending order, and in lat the last byte of each size is the counter of its last
/// exchange. `last_iters` is how many exchanges the last size got.
#[must_use]
pub fn final_content(p: &BenchParams, last_iters: u64) -> Vec<u8> {
    let max = p.sizes.last().copied().unwrap_or(0) as usize;
    let mut buf = vec![0u8; max];
    fill_pattern(&mut buf);
    // Every ping of a larger size rewrites the smaller sizes' last bytes with the pattern, so
    // only the last size's final counter remains.
    if p.mode() == BenchMode::Lat && max > 0 {
        buf[max - 1] = counter(last_iters);
    }
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_is_filled_as_defined_byte_by_byte() {
        for len in [0, 1, 127, 128, 129, 1000, 4096 + 3] {
            let mut buf = vec![0u8; len];
            fill_pattern(&mut buf);
            assert!(
                buf.iter().enumerate().all(|(i, b)| *b == pattern_byte(i)),
                "{len} bytes"
            );
        }
        assert!((0..PATTERN_PERIOD).all(|i| pattern_byte(i) == pattern_byte(i + PATTERN_PERIOD)));
    }

    fn lat(sizes: Vec<u64>) -> BenchParams {
        BenchParams {
            kind: BenchKind::Lat(PongBuffer {
                addr: 0x1000,
                rkey: 7,
            }),
            sizes,
            iters: 300,
            stamped: false,
        }
    }

    #[test]
    fn counters_never_collide_with_the_pattern_or_zero() {
        assert_eq!(counter(0), 127, "no underflow: the step before exchange 1");
        assert_eq!((counter(1), counter(127), counter(128)), (1, 127, 1));
        assert!((1..=127).contains(&counter(u64::MAX)));
        for n in (0..1000u64).chain(u64::MAX - 1000..u64::MAX) {
            let c = counter(n);
            assert!((1..=127).contains(&c));
            assert_ne!(c, counter(n + 1));
        }
        assert!((0..10_000).all(|i| pattern_byte(i) >= 0x80));
    }

    #[test]
    fn params_are_checked_together() {
        assert!(lat(vec![2, 64]).check(64).is_ok());
        assert_eq!(lat(vec![2, 64]).check(65).unwrap_err().0, "sizes");
        assert_eq!(lat(vec![64, 2]).check(2).unwrap_err().0, "sizes");
        assert_eq!(lat(vec![0, 2]).check(2).unwrap_err().0, "sizes");
        assert_eq!(lat(vec![]).check(2).unwrap_err().0, "sizes");
        let mut p = lat(vec![8]);
        p.kind = BenchKind::Bw;
        assert!(p.check(8).is_ok(), "bw needs no client buffer");
        p.iters = 0;
        assert_eq!(p.check(8).unwrap_err().0, "iters");
    }

    #[test]
    fn only_lat_carries_the_buffer_on_the_wire_in_protocol_order() {
        let line = serde_json::to_string(&lat(vec![2, 8])).unwrap();
        assert_eq!(
            line,
            r#"{"mode":"lat","sizes":[2,8],"iters":300,"addr":4096,"rkey":7}"#
        );
        let bw = BenchParams {
            kind: BenchKind::Bw,
            ..lat(vec![8])
        };
        assert_eq!(
            serde_json::to_string(&bw).unwrap(),
            r#"{"mode":"bw","sizes":[8],"iters":300}"#
        );
    }

    #[test]
    fn final_content_is_the_pattern_with_the_last_counter() {
        let p = lat(vec![2, 8]);
        let c = final_content(&p, 300);
        assert_eq!(c.len(), 8);
        assert_eq!(c[7], counter(300));
        assert_eq!(
            c[1],
            pattern_byte(1),
            "size 2's counter was overwritten by size 8"
        );
        let bw = BenchParams {
            kind: BenchKind::Bw,
            ..p
        };
        let c = final_content(&bw, 5);
        assert!(c.iter().enumerate().all(|(i, b)| *b == pattern_byte(i)));
    }
}
