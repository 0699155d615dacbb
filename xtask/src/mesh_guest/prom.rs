//! Prometheus's HTTP API, as the mesh check reads it: instant queries (`/api/v1/query`) and
//! readiness (`/-/ready`); and Alertmanager's, for the alerts it would page (`/api/v2/alerts`,
//! neither inhibited nor silenced). [`Query`] is the seam: the stages run against [`Monitor`]
//! in the guests and against fakes in the tests.

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

    /// The alerts Alertmanager would page now (active: neither inhibited nor silenced), each
    /// as its labels (value 1).
    ///
    /// # Errors
    /// Alertmanager did not answer.
    fn pages(&self) -> Result<Vec<Sample>>;
}

/// Prometheus (or Alertmanager) at `base` (`http://10.0.0.1:9090`), each request at most
/// `timeout`.
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

    /// Whether it says it is ready to serve (`/-/ready` answers 200).
    pub fn ready(&self) -> bool {
        self.agent
            .get(format!("{}/-/ready", self.base))
            .call()
            .is_ok_and(|r| r.status() == 200)
    }

    /// `GET base + path ? params`: the answer's status and body.
    fn get(&self, path: &str, params: &[(&str, &str)]) -> Result<(u16, String)> {
        let url = format!("{}{path}", self.base);
        let shown = || {
            let q: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("GET {url}?{}", q.join("&"))
        };
        let mut req = self.agent.get(&url);
        for (k, v) in params {
            req = req.query(*k, *v);
        }
        let mut resp = req.call().wrap_err_with(shown)?;
        let status = resp.status().as_u16();
        let body = resp
            .body_mut()
            .read_to_string()
            .wrap_err_with(|| format!("reading the answer to {}", shown()))?;
        Ok((status, body))
    }

    /// Prometheus's instant vector `expr` now.
    ///
    /// # Errors
    /// Prometheus did not answer, or refused the query.
    pub fn query(&self, expr: &str) -> Result<Vec<Sample>> {
        let (status, body) = self.get("/api/v1/query", &[("query", expr)])?;
        parse(&body).wrap_err_with(|| format!("query {expr} (HTTP {status})"))
    }

    /// Alertmanager's alerts that it would page now.
    ///
    /// # Errors
    /// Alertmanager did not answer.
    pub fn pages(&self) -> Result<Vec<Sample>> {
        let path = "/api/v2/alerts";
        let params = [
            ("active", "true"),
            ("silenced", "false"),
            ("inhibited", "false"),
        ];
        let (status, body) = self.get(path, &params)?;
        parse_alerts(&body).wrap_err_with(|| format!("GET {}{path} (HTTP {status})", self.base))
    }
}

/// The guests' Prometheus and Alertmanager.
#[derive(Debug)]
pub struct Monitor {
    prometheus: Http,
    alertmanager: Http,
}

impl Monitor {
    pub fn new(prometheus: &str, alertmanager: &str, timeout: Duration) -> Self {
        Self {
            prometheus: Http::new(prometheus, timeout),
            alertmanager: Http::new(alertmanager, timeout),
        }
    }

    /// Both answer `/-/ready`.
    pub fn ready(&self) -> bool {
        self.prometheus.ready() && self.alertmanager.ready()
    }
}

impl Query for Monitor {
    fn query(&self, expr: &str) -> Result<Vec<Sample>> {
        self.prometheus.query(expr)
    }

    fn pages(&self) -> Result<Vec<Sample>> {
        self.alertmanager.pages()
    }
}

/// Alertmanager's list of alerts (`[{"labels":{…},"status":{"state":"active",…}},…]`): the
/// active ones, as samples of their labels.
pub fn parse_alerts(body: &str) -> Result<Vec<Sample>> {
    #[derive(serde::Deserialize)]
    struct Status {
        state: String,
    }
    #[derive(serde::Deserialize)]
    struct Alert {
        labels: BTreeMap<String, String>,
        status: Status,
    }
    let list: Vec<Alert> = serde_json::from_str(body).wrap_err_with(|| {
        format!(
            "not Alertmanager's list of alerts: {}",
            crate::text::tail(body, 300)
        )
    })?;
    Ok(list
        .into_iter()
        .filter(|a| a.status.state == "active")
        .map(|a| Sample {
            labels: a.labels,
            value: 1.0,
        })
        .collect())
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

    #[test]
    fn alertmanagers_list_reads_its_active_alerts_only() {
        let a = parse_alerts(
            r#"[{"labels":{"alertname":"RdmaMeshNodeDown","peer":"node3"},"status":{"state":"active","inhibitedBy":[]}},
               {"labels":{"alertname":"RdmaMeshPathDown","peer":"node3"},"status":{"state":"suppressed","inhibitedBy":["x"]}}]"#,
        )
        .unwrap();
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].label("alertname"), "RdmaMeshNodeDown");
        assert!(format!("{:#}", parse_alerts("{}").unwrap_err()).contains("Alertmanager"));
    }
}
