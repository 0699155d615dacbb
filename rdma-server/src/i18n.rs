//! The two lines that prove the write, in English or in the seed's own Chinese.

/// Language of the human verdict lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lang {
    #[default]
    En,
    Zh,
}

impl Lang {
    /// From the environment: `LC_ALL` wins over `LANG` (POSIX precedence); `zh*` selects Chinese.
    pub fn from_env() -> Self {
        let pick = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        Self::from_locale(pick("LC_ALL").or_else(|| pick("LANG")).as_deref())
    }

    fn from_locale(locale: Option<&str>) -> Self {
        match locale {
            Some(l) if l.starts_with("zh") => Lang::Zh,
            _ => Lang::En,
        }
    }

    /// The line that shows the bytes the server found in its own memory. The bytes are the
    /// client's: control characters are shown escaped (`\u{1b}`), never sent to the terminal.
    pub fn received(self, text: &str) -> String {
        let text = rdma_proto::printable(text);
        match self {
            Lang::En => format!("received message: {text}"),
            Lang::Zh => format!("服务端收到消息: {text}"),
        }
    }

    /// The line that says the write was verified.
    pub fn verified(self, length: u64, crc32c: u32) -> String {
        match self {
            Lang::En => format!(
                "verified: RDMA Write data landed in server memory ({length} bytes, crc32c {crc32c:#010x})"
            ),
            Lang::Zh => "验证通过：RDMA Write数据已写入服务端内存".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chinese_locales_get_the_seed_lines() {
        let zh = Lang::from_locale(Some("zh_CN.UTF-8"));
        assert_eq!(zh, Lang::Zh);
        assert_eq!(
            zh.received("Hello RDMA Write!"),
            "服务端收到消息: Hello RDMA Write!"
        );
        assert_eq!(
            zh.verified(17, 1),
            "验证通过：RDMA Write数据已写入服务端内存"
        );
        let en = Lang::from_locale(Some("C.UTF-8"));
        assert_eq!(en.received("hi"), "received message: hi");
        assert!(en.verified(17, 0xabcd).contains("17 bytes"));
        assert_eq!(Lang::from_locale(None), Lang::En);
    }

    #[test]
    fn client_bytes_cannot_drive_the_terminal() {
        let line = Lang::En.received("a\u{0}b\u{1b}[2Jc\nd");
        assert_eq!(line, "received message: a\\0b\\u{1b}[2Jc\\nd");
        assert!(!line.chars().any(char::is_control));
        assert_eq!(Lang::En.received("你好"), "received message: 你好");
    }
}
