//! Which series a PromQL expression reads, without a PromQL parser: enough of its lexical
//! rules (strings, label matchers, ranges, `by (…)` lists, functions and keywords) to find the
//! metric names; and where the expressions are in a Grafana dashboard, in a rules file, and the
//! list of series the mesh exposes (`SERIES` in rdma-client's `mesh/metrics.rs`, read with syn).

use color_eyre::eyre::{Result, WrapErr as _, bail, eyre};

/// Aggregation operators: a name, then `by (…)`/`without (…)` or `(`, never a metric.
const AGGREGATIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];
/// Keywords followed by a parenthesised list of label names.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
/// Other keywords and literals.
const KEYWORDS: &[&str] = &[
    "and", "or", "unless", "offset", "bool", "atan2", "inf", "nan", "Inf", "NaN", "start", "end",
];

/// Skips from `open` (at `i`) to just past its matching `close`, stepping over strings.
fn skip_group(b: &[u8], mut i: usize, open: u8, close: u8) -> usize {
    let mut depth = 0usize;
    while i < b.len() {
        match b[i] {
            q @ (b'"' | b'\'' | b'`') => i = skip_string(b, i, q),
            c if c == open => {
                depth += 1;
                i += 1;
            }
            c if c == close => {
                depth = depth.saturating_sub(1);
                i += 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => i += 1,
        }
    }
    i
}

/// Skips the string opened by `q` at `i` (backslash escapes), to just past its end.
fn skip_string(b: &[u8], mut i: usize, q: u8) -> usize {
    i += 1;
    while i < b.len() && b[i] != q {
        i += if b[i] == b'\\' && q != b'`' { 2 } else { 1 };
    }
    i + 1
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c == b':'
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b':'
}

/// The metric names `expr` reads, in order of appearance (duplicates kept).
pub fn metric_names(expr: &str) -> Vec<String> {
    let b = expr.as_bytes();
    let mut names = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if matches!(c, b'"' | b'\'' | b'`') {
            i = skip_string(b, i, c);
        } else if c == b'{' {
            i = skip_group(b, i, b'{', b'}');
        } else if c == b'[' {
            i = skip_group(b, i, b'[', b']');
        } else if c == b'#' {
            // A comment, to the end of the line.
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'$' || c.is_ascii_digit() || c == b'.' {
            // A Grafana variable, a number or a duration (`1h`, `10e-6`'s `10e`).
            i += 1;
            while i < b.len() && (is_ident(b[i]) || b[i] == b'.') {
                i += 1;
            }
        } else if is_ident_start(c) {
            let start = i;
            while i < b.len() && is_ident(b[i]) {
                i += 1;
            }
            let word = &expr[start..i];
            let mut j = i;
            while j < b.len() && b[j].is_ascii_whitespace() {
                j += 1;
            }
            let next = b.get(j).copied();
            if LABEL_LISTS.contains(&word) {
                if next == Some(b'(') {
                    i = skip_group(b, j, b'(', b')');
                }
            } else if KEYWORDS.contains(&word) || AGGREGATIONS.contains(&word) {
                // `offset 1h`: the duration is skipped as a number next.
            } else if next != Some(b'(') {
                names.push(word.to_owned());
            }
        } else {
            i += 1;
        }
    }
    names
}

/// The expression of a Grafana templating query: `label_values(EXPR, label)` reads `EXPR`;
/// `label_values(label)` and `metrics(…)` read nothing here.
pub fn templating_expr(query: &str) -> Option<&str> {
    let inner = query
        .trim()
        .strip_prefix("label_values(")?
        .strip_suffix(')')?;
    inner.rsplit_once(',').map(|(e, _)| e.trim())
}

/// Every PromQL query of a Grafana dashboard: each panel target's `expr` (nested rows
/// included) and each templating variable's query, as `(where, query)`.
pub fn dashboard_exprs(json: &serde_json::Value) -> Vec<(String, String)> {
    fn walk(v: &serde_json::Value, at: &str, out: &mut Vec<(String, String)>) {
        match v {
            serde_json::Value::Object(m) => {
                let title = m.get("title").and_then(|t| t.as_str());
                let here = title.map_or_else(|| at.to_owned(), |t| format!("panel {t:?}"));
                for (k, x) in m {
                    if k == "expr"
                        && let Some(s) = x.as_str()
                    {
                        out.push((here.clone(), s.to_owned()));
                    } else {
                        walk(x, &here, out);
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, at, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    if let Some(panels) = json.get("panels") {
        walk(panels, "panels", &mut out);
    }
    let vars = json
        .pointer("/templating/list")
        .and_then(|l| l.as_array())
        .map(Vec::as_slice)
        .unwrap_or_default();
    for v in vars.iter().filter(|v| v["type"] == "query") {
        let q = v["query"]
            .as_str()
            .or_else(|| v["query"]["query"].as_str())
            .unwrap_or("");
        if let Some(e) = templating_expr(q) {
            out.push((format!("variable {}", v["name"]), e.to_owned()));
        }
    }
    out
}

/// Every `expr:` of a Prometheus rules file as this project writes them (inline, or a `|`
/// block indented under it), as `(alert or record name, expr)`.
pub fn rule_exprs(yaml: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = yaml.lines().collect();
    let mut out = Vec::new();
    let mut name = String::new();
    let mut i = 0;
    while i < lines.len() {
        let t = lines[i].trim_start();
        let t = t.strip_prefix("- ").unwrap_or(t);
        if let Some(n) = t
            .strip_prefix("alert:")
            .or_else(|| t.strip_prefix("record:"))
        {
            name = n.trim().to_owned();
        }
        if let Some(rest) = t.strip_prefix("expr:") {
            let rest = rest.trim();
            if rest.starts_with('|') || rest.starts_with('>') {
                let indent = lines[i].len() - lines[i].trim_start().len();
                let mut body = String::new();
                i += 1;
                while i < lines.len() {
                    let l = lines[i];
                    if !l.trim().is_empty() && l.len() - l.trim_start().len() <= indent {
                        break;
                    }
                    body.push_str(l.trim());
                    body.push('\n');
                    i += 1;
                }
                out.push((name.clone(), body));
                continue;
            }
            out.push((name.clone(), rest.to_owned()));
        }
        i += 1;
    }
    out
}

/// The `SERIES` list of rdma-client's `mesh/metrics.rs` (its source text): what the mesh
/// exposes, the only series a dashboard or rule may read.
pub fn exposed_series(metrics_rs: &str) -> Result<Vec<String>> {
    let file = syn::parse_file(metrics_rs).wrap_err("parsing mesh/metrics.rs")?;
    let konst = file
        .items
        .iter()
        .find_map(|it| match it {
            syn::Item::Const(c) if c.ident == "SERIES" => Some(c),
            _ => None,
        })
        .ok_or_else(|| eyre!("mesh/metrics.rs has no `const SERIES`"))?;
    let syn::Expr::Reference(r) = &*konst.expr else {
        bail!("mesh/metrics.rs: SERIES is not `&[…]`");
    };
    let syn::Expr::Array(a) = &*r.expr else {
        bail!("mesh/metrics.rs: SERIES is not `&[…]`");
    };
    a.elems
        .iter()
        .map(|e| match e {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) => Ok(s.value()),
            _ => bail!("mesh/metrics.rs: an element of SERIES is not a string literal"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_not_labels_functions_strings_or_durations() {
        let e = r#"histogram_quantile(0.5, sum by (instance, peer, le) (rate(a_bucket{x=~"$i", y!="b{c}"}[$__rate_interval] offset 1h))) > 2 * b - 10e-6 and on (peer) group_left (cause) c unless max(d) or time() - e_total"#;
        assert_eq!(metric_names(e), ["a_bucket", "b", "c", "d", "e_total"]);
        assert_eq!(
            metric_names(r#"label_replace(x, "cause", "$1", "result", "(.*)")"#),
            ["x"]
        );
        assert_eq!(metric_names("topk by (a) (1, y > 0)"), ["y"]);
        assert_eq!(metric_names("absent(z)"), ["z"]);
    }

    #[test]
    fn rules_and_dashboards_give_their_exprs() {
        let yaml = "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: |\n          x\n          > y\n        for: 1m\n      - alert: B\n        expr: up == 0\n";
        assert_eq!(
            rule_exprs(yaml),
            [
                ("A".to_owned(), "x\n> y\n".to_owned()),
                ("B".to_owned(), "up == 0".to_owned())
            ]
        );
        let json = serde_json::json!({
            "panels": [{"title": "P", "targets": [{"expr": "a"}]},
                       {"type": "row", "panels": [{"title": "Q", "targets": [{"expr": "b"}]}]}],
            "templating": {"list": [{"name": "v", "type": "query",
                                     "query": {"query": "label_values(c{x=\"1\"}, peer)"}}]}
        });
        let got: Vec<String> = dashboard_exprs(&json).into_iter().map(|(_, e)| e).collect();
        assert_eq!(got, ["a", "b", "c{x=\"1\"}"]);
    }

    #[test]
    fn series_are_read_from_the_source() {
        let src = "pub const SERIES: &[&str] = &[\"a_total\", \"b\"];\nconst X: u8 = 1;";
        assert_eq!(exposed_series(src).unwrap(), ["a_total", "b"]);
        assert!(exposed_series("const Y: u8 = 1;").is_err());
    }
}
