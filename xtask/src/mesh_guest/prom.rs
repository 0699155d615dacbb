//! Prometheus's HTTP API, as the mesh check reads it: instant queries (`/api/v1/query`) and
//! readiness (`/-/ready`). [`Query`] is the seam: the stages run against [`Http`] in the guests
//! and against fakes in the tests.

use std::collections::BTreeMap;
use std::time::Duration;

use color_eyre::eyre::{Result, WrapErr as _, bail, eyre};

/// One sample of an instant vector: its labels and value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

impl Sample {
    /// The value of label `name` (empty when absent, as PromQL reads it).
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).map_or("", String::as_str)
    }
}

/// What the stages ask Prometheus.
pub trait Query {
    /// The instant vector `expr` evaluates to now.
    ///
    /// # Errors
    /// Prometheus did not answer, or refused the query.
    fn query(&self, expr: &str) -> Result<Vec<Sample>>;
}

/// Prometheus at `base` (`http://10.0.0.1:9090`), each request at most `timeout`.
#[derive(Debug)]
pub struct Http {
    base: String,
    agent: ureq::Agent,
}

impl Http {
    pub fn new(base: &str, timeout: Duration) -> Self {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .build()
            .into();
        Self {
            base: base.trim_end_matches('/').to_owned(),
            agent,
        }
    }

    /// Whether Prometheus says it is ready to serve queries (`/-/ready` answers 200).
    pub fn ready(&self) -> bool {
        self.agent
            .get(format!("{}/-/ready", self.base))
            .call()
            .is_ok_and(|r| r.status() == 200)
    }
}

impl Query for Http {
    fn query(&self, expr: &str) -> Result<Vec<Sample>> {
        let url = format!("{}/api/v1/query", self.base);
        let mut resp = self
            .agent
            .get(&url)
            .query("query", expr)
            .call()
            .wrap_err_with(|| format!("GET {url}?query={expr}"))?;
        let status = resp.status();
        let body = resp
            .body_mut()
            .read_to_string()
            .wrap_err_with(|| format!("reading the answer to {expr}"))?;
        parse(&body).wrap_err_with(|| format!("query {expr} (HTTP {status})"))
    }
}

/// An API answer (`{"status":"success","data":{"resultType":"vector","result":[…]}}`) as
/// samples; a scalar is one sample without labels.
pub fn parse(body: &str) -> Result<Vec<Sample>> {
    let v: serde_json::Value = serde_json::from_str(body)
        .wrap_err_with(|| format!("not JSON: {}", crate::text::tail(body, 300)))?;
    if v["status"] != "success" {
        bail!(
            "Prometheus said {}: {}",
            v["errorType"].as_str().unwrap_or("error"),
            v["error"].as_str().unwrap_or("(no reason)")
        );
    }
    let value = |p: &serde_json::Value| -> Result<f64> {
        let s = p
            .get(1)
            .and_then(|x| x.as_str())
            .ok_or_else(|| eyre!("a sample without a value: {p}"))?;
        // Prometheus writes NaN and infinities as these strings; Rust's parser reads them.
        s.parse::<f64>()
            .map_err(|_| eyre!("a sample whose value is no number: {s:?}"))
    };
    match v["data"]["resultType"].as_str() {
        Some("vector") => v["data"]["result"]
            .as_array()
            .ok_or_else(|| eyre!("a vector without its result list"))?
            .iter()
            .map(|r| {
                let labels = r["metric"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, x)| (k.clone(), x.as_str().unwrap_or("").to_owned()))
                            .collect()
                    })
                    .unwrap_or_default();
                Ok(Sample {
                    labels,
                    value: value(&r["value"])?,
                })
            })
            .collect(),
        Some("scalar") => Ok(vec![Sample {
            labels: BTreeMap::new(),
            value: value(&v["data"]["result"])?,
        }]),
        other => bail!("an answer of type {other:?}, not an instant vector"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vector_a_scalar_and_the_errors_parse() {
        let s = parse(
            r#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"instance":"node1:9478","peer":"node2"},"value":[1.5,"1"]},
            {"metric":{},"value":[1.5,"NaN"]}]}}"#,
        )
        .unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].label("peer"), s[0].value), ("node2", 1.0));
        assert_eq!(s[0].label("rail"), "");
        assert!(s[1].value.is_nan());
        let s = parse(r#"{"status":"success","data":{"resultType":"scalar","result":[1,"7"]}}"#)
            .unwrap();
        assert_eq!(s[0].value, 7.0);
        let e = parse(r#"{"status":"error","errorType":"bad_data","error":"parse error"}"#)
            .unwrap_err();
        assert!(format!("{e}").contains("bad_data: parse error"), "{e}");
        assert!(parse("<html>").is_err());
        let matrix = r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert!(format!("{}", parse(matrix).unwrap_err()).contains("matrix"));
        let bad = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"x"]}]}}"#;
        assert!(parse(bad).is_err());
    }
}
