//! The exporter's configuration, read the OpenTelemetry way: the SDK environment variables
//! (an empty value counts as unset), with `--otlp-endpoint` ahead of them.
//!
//! | variable | meaning |
//! |---|---|
//! | `OTEL_SDK_DISABLED=true`, `OTEL_TRACES_EXPORTER=none` | no spans |
//! | `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` | the traces URL, used as it is |
//! | `OTEL_EXPORTER_OTLP_ENDPOINT` | the collector's base URL; `/v1/traces` is added |
//! | `OTEL_EXPORTER_OTLP_HEADERS`, `…_TRACES_HEADERS` | `k=v,k2=v2` (values percent-decoded) |
//! | `OTEL_EXPORTER_OTLP_TIMEOUT`, `…_TRACES_TIMEOUT` | one export's timeout, ms (10000) |
//! | `OTEL_SERVICE_NAME` | `service.name` (default: the binary's own name) |
//! | `OTEL_RESOURCE_ATTRIBUTES` | more resource attributes, `k=v,…` |
//! | `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG` | `parentbased_always_on` (default), `always_on`, `always_off`, `traceidratio`, `parentbased_always_off`, `parentbased_traceidratio` |
//! | `OTEL_BSP_SCHEDULE_DELAY` | ms between exports (5000) |
//! | `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` | spans per export (512) |
//! | `OTEL_BSP_MAX_QUEUE_SIZE` | spans waiting at most; more are dropped (2048) |

use std::time::Duration;

use super::{AttrValue, OtelError};

#[derive(Debug, Clone)]
pub struct Config {
    /// The full URL spans are POSTed to.
    pub endpoint: url::Url,
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    /// Resource attributes, `service.name` first.
    pub resource: Vec<(String, AttrValue)>,
    pub timeout: Duration,
    pub schedule_delay: Duration,
    pub max_batch: usize,
    pub max_queue: usize,
    pub sampler: Sampler,
}

/// Which spans are recorded. A span not sampled still hands its context on (marked so).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampler {
    /// Follow the parent's sampled flag when there is a parent.
    pub parent_based: bool,
    pub root: Root,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Root {
    On,
    Off,
    /// Sample a trace id when its last 8 bytes (big-endian, top bit cleared) fall below this.
    Ratio(u64),
}

impl Default for Sampler {
    fn default() -> Self {
        Sampler {
            parent_based: true,
            root: Root::On,
        }
    }
}

impl Sampler {
    pub fn sample(&self, parent_sampled: Option<bool>, trace_id: &[u8; 16]) -> bool {
        if self.parent_based
            && let Some(sampled) = parent_sampled
        {
            return sampled;
        }
        match self.root {
            Root::On => true,
            Root::Off => false,
            Root::Ratio(bound) => {
                let mut low = [0u8; 8];
                low.copy_from_slice(&trace_id[8..]);
                (u64::from_be_bytes(low) >> 1) < bound
            }
        }
    }

    fn ratio(arg: Option<&str>) -> Result<Root, OtelError> {
        let ratio = match arg {
            None => 1.0,
            Some(a) => a
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|r| (0.0..=1.0).contains(r))
                .ok_or_else(|| OtelError::Setting {
                    name: "OTEL_TRACES_SAMPLER_ARG",
                    value: a.to_string(),
                    reason: "a ratio from 0 to 1 is expected",
                })?,
        };
        Ok(Root::Ratio((ratio * (1u64 << 63) as f64) as u64))
    }
}

/// `k=v,k2=v2` as the OTLP headers and resource variables write it: trimmed, values
/// percent-decoded; an entry without `=` is an error.
fn pairs(name: &'static str, text: &str) -> Result<Vec<(String, String)>, OtelError> {
    let mut out = Vec::new();
    for entry in text.split(',') {
        if entry.trim().is_empty() {
            continue;
        }
        let Some((k, v)) = entry.split_once('=') else {
            return Err(OtelError::Setting {
                name,
                value: text.to_string(),
                reason: "entries are key=value, separated by commas",
            });
        };
        let value = percent_decode(v.trim()).ok_or_else(|| OtelError::Setting {
            name,
            value: text.to_string(),
            reason: "a value is not valid percent-encoded UTF-8",
        })?;
        out.push((k.trim().to_string(), value));
    }
    Ok(out)
}

fn percent_decode(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn url_of(source_name: &'static str, text: &str, base: bool) -> Result<url::Url, OtelError> {
    let bad = |reason: String| OtelError::Endpoint {
        source_name,
        value: text.to_string(),
        reason,
    };
    let mut url = url::Url::parse(text.trim()).map_err(|e| bad(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(bad("http:// or https:// with a host is expected".into()));
    }
    // A base URL gets the signal's path; one already naming it is taken as it is.
    if base && !url.path().ends_with("/v1/traces") {
        let path = format!("{}/v1/traces", url.path().trim_end_matches('/'));
        url.set_path(&path);
    }
    Ok(url)
}

impl Config {
    /// The configuration `flag` (`--otlp-endpoint`, a base URL) and the environment ask
    /// for; None when no endpoint is set or the SDK is disabled.
    pub fn from_env(
        flag: Option<&str>,
        default_service: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Config>, OtelError> {
        let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        if let Some(exporter) = var("OTEL_TRACES_EXPORTER") {
            match exporter.trim() {
                "none" => return Ok(None),
                "otlp" => {}
                other => tracing::warn!(
                    "OTEL_TRACES_EXPORTER={other}: kitbag exports OTLP only; using otlp"
                ),
            }
        }
        let endpoint = match (
            flag.filter(|f| !f.trim().is_empty()),
            var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            var("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            (Some(f), _, _) => url_of("--otlp-endpoint", f, true)?,
            (None, Some(t), _) => url_of("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &t, false)?,
            (None, None, Some(b)) => url_of("OTEL_EXPORTER_OTLP_ENDPOINT", &b, true)?,
            (None, None, None) => return Ok(None),
        };
        let protocol = var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"));
        if let Some(p) = protocol
            && p.trim() != "http/json"
            && p.trim() != "http/protobuf"
        {
            tracing::warn!(
                "OTEL_EXPORTER_OTLP_PROTOCOL={p}: kitbag sends OTLP/HTTP with the JSON encoding; point the endpoint at the collector's HTTP port (4318)"
            );
        }

        // Generic headers first, the traces-only ones replacing them key by key.
        let mut headers: Vec<(http::HeaderName, http::HeaderValue)> = Vec::new();
        for name in [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        ] {
            let Some(text) = var(name) else { continue };
            for (k, v) in pairs(name, &text)? {
                let key = http::HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes()).map_err(
                    |_| OtelError::Setting {
                        name,
                        value: k.clone(),
                        reason: "not a valid header name",
                    },
                )?;
                let value = http::HeaderValue::from_str(&v).map_err(|_| OtelError::Setting {
                    name,
                    value: k.clone(),
                    reason: "the value is not a valid header value",
                })?;
                headers.retain(|(existing, _)| *existing != key);
                headers.push((key, value));
            }
        }

        let ms = |name: &'static str, default: u64| -> Result<Duration, OtelError> {
            match var(name) {
                None => Ok(Duration::from_millis(default)),
                Some(v) => v
                    .trim()
                    .parse::<u64>()
                    .map(Duration::from_millis)
                    .map_err(|_| OtelError::Setting {
                        name,
                        value: v.clone(),
                        reason: "milliseconds are expected",
                    }),
            }
        };
        let count =
            |name: &'static str, default: usize| -> Result<usize, OtelError> {
                match var(name) {
                    None => Ok(default),
                    Some(v) => v.trim().parse::<usize>().ok().filter(|n| *n > 0).ok_or(
                        OtelError::Setting {
                            name,
                            value: v.clone(),
                            reason: "a positive count is expected",
                        },
                    ),
                }
            };
        let timeout = match var("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") {
            Some(_) => ms("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", 10_000)?,
            None => ms("OTEL_EXPORTER_OTLP_TIMEOUT", 10_000)?,
        };
        let schedule_delay = ms("OTEL_BSP_SCHEDULE_DELAY", 5_000)?;
        let max_queue = count("OTEL_BSP_MAX_QUEUE_SIZE", 2048)?;
        let max_batch = count("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)?.min(max_queue);

        let arg = var("OTEL_TRACES_SAMPLER_ARG");
        let sampler = match var("OTEL_TRACES_SAMPLER").as_deref().map(str::trim) {
            None | Some("parentbased_always_on") => Sampler::default(),
            Some("always_on") => Sampler {
                parent_based: false,
                root: Root::On,
            },
            Some("always_off") => Sampler {
                parent_based: false,
                root: Root::Off,
            },
            Some("parentbased_always_off") => Sampler {
                parent_based: true,
                root: Root::Off,
            },
            Some("traceidratio") => Sampler {
                parent_based: false,
                root: Sampler::ratio(arg.as_deref())?,
            },
            Some("parentbased_traceidratio") => Sampler {
                parent_based: true,
                root: Sampler::ratio(arg.as_deref())?,
            },
            Some(other) => {
                return Err(OtelError::Setting {
                    name: "OTEL_TRACES_SAMPLER",
                    value: other.to_string(),
                    reason: "not a sampler kitbag knows (parentbased_always_on, always_on, always_off, traceidratio, parentbased_always_off, parentbased_traceidratio)",
                });
            }
        };

        let mut extra = match var("OTEL_RESOURCE_ATTRIBUTES") {
            Some(text) => pairs("OTEL_RESOURCE_ATTRIBUTES", &text)?,
            None => Vec::new(),
        };
        let from_attributes = extra
            .iter()
            .position(|(k, _)| k == "service.name")
            .map(|i| extra.remove(i).1);
        let service = var("OTEL_SERVICE_NAME")
            .map(|s| s.trim().to_string())
            .or(from_attributes)
            .unwrap_or_else(|| default_service.to_string());
        let mut resource = vec![
            ("service.name".to_string(), AttrValue::Str(service)),
            (
                "service.version".to_string(),
                AttrValue::Str(env!("CARGO_PKG_VERSION").into()),
            ),
            (
                "telemetry.sdk.name".to_string(),
                AttrValue::Str("kitbag".into()),
            ),
            (
                "telemetry.sdk.language".to_string(),
                AttrValue::Str("rust".into()),
            ),
            (
                "telemetry.sdk.version".to_string(),
                AttrValue::Str(env!("CARGO_PKG_VERSION").into()),
            ),
            (
                "process.pid".to_string(),
                AttrValue::Int(i64::from(std::process::id())),
            ),
        ];
        for (k, v) in extra {
            resource.retain(|(existing, _)| *existing != k);
            resource.push((k, AttrValue::Str(v)));
        }
        Ok(Some(Config {
            endpoint,
            headers,
            resource,
            timeout,
            schedule_delay,
            max_batch,
            max_queue,
            sampler,
        }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(flag: Option<&str>, vars: &[(&str, &str)]) -> Result<Option<Config>, OtelError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_env(flag, "kitbag", |k| vars.get(k).cloned())
    }

    fn service(c: &Config) -> &AttrValue {
        &c.resource[0].1
    }

    #[test]
    fn no_endpoint_no_config() {
        assert!(config(None, &[]).unwrap().is_none());
        assert!(
            config(None, &[("OTEL_EXPORTER_OTLP_ENDPOINT", "")])
                .unwrap()
                .is_none()
        );
        let disabled = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_SDK_DISABLED", "true"),
        ];
        assert!(config(None, &disabled).unwrap().is_none());
        let none = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ];
        assert!(config(None, &none).unwrap().is_none());
    }

    #[test]
    fn endpoints_resolve_as_the_spec_says() {
        let base = config(None, &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")])
            .unwrap()
            .unwrap();
        assert_eq!(base.endpoint.as_str(), "http://c:4318/v1/traces");
        let slash = config(
            None,
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/otlp/")],
        )
        .unwrap()
        .unwrap();
        assert_eq!(slash.endpoint.as_str(), "http://c:4318/otlp/v1/traces");
        // The signal's own variable is used as it is, and wins over the base.
        let own = config(
            None,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://t.example/x"),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(own.endpoint.as_str(), "https://t.example/x");
        // The flag wins over both.
        let flag = config(
            Some("http://127.0.0.1:9"),
            &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://t.example/x")],
        )
        .unwrap()
        .unwrap();
        assert_eq!(flag.endpoint.as_str(), "http://127.0.0.1:9/v1/traces");
        for bad in ["c:4318", "ftp://c/", "not a url"] {
            assert!(
                config(None, &[("OTEL_EXPORTER_OTLP_ENDPOINT", bad)]).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn headers_service_resource_and_batching() {
        let c = config(
            None,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                (
                    "OTEL_EXPORTER_OTLP_HEADERS",
                    "Authorization=Bearer%20abc, x-team = blue",
                ),
                ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-team=red"),
                (
                    "OTEL_RESOURCE_ATTRIBUTES",
                    "service.name=from-attrs,deployment.environment=prod",
                ),
                ("OTEL_BSP_SCHEDULE_DELAY", "100"),
                ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "9999"),
            ],
        )
        .unwrap()
        .unwrap();
        let h: Vec<(String, String)> = c
            .headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_string()))
            .collect();
        assert_eq!(
            h,
            [
                ("authorization".to_string(), "Bearer abc".to_string()),
                ("x-team".to_string(), "red".to_string())
            ]
        );
        assert_eq!(service(&c), &AttrValue::Str("from-attrs".into()));
        assert!(
            c.resource
                .iter()
                .any(|(k, v)| k == "deployment.environment" && *v == AttrValue::Str("prod".into()))
        );
        assert_eq!(c.schedule_delay, Duration::from_millis(100));
        assert_eq!(c.max_batch, 2048, "capped at the queue size");
        let named = config(
            None,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_SERVICE_NAME", "gateway"),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(service(&named), &AttrValue::Str("gateway".into()));
        let default = config(Some("http://c:4318"), &[]).unwrap().unwrap();
        assert_eq!(service(&default), &AttrValue::Str("kitbag".into()));
        assert!(
            config(
                None,
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                    ("OTEL_EXPORTER_OTLP_HEADERS", "novalue")
                ]
            )
            .is_err()
        );
    }

    #[test]
    fn samplers() {
        let with = |name: &str, arg: &str| {
            let mut vars = vec![
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_TRACES_SAMPLER", name),
            ];
            if !arg.is_empty() {
                vars.push(("OTEL_TRACES_SAMPLER_ARG", arg));
            }
            config(None, &vars).map(|c| c.unwrap().sampler)
        };
        let id_low = |low: u64| {
            let mut id = [0u8; 16];
            id[8..].copy_from_slice(&low.to_be_bytes());
            id
        };
        let off = with("always_off", "").unwrap();
        assert!(!off.sample(Some(true), &id_low(0)));
        let parent_off = with("parentbased_always_off", "").unwrap();
        assert!(parent_off.sample(Some(true), &id_low(0)));
        assert!(!parent_off.sample(None, &id_low(0)));
        let half = with("traceidratio", "0.5").unwrap();
        assert!(half.sample(None, &id_low(1 << 62)));
        assert!(!half.sample(None, &id_low(u64::MAX)));
        assert!(
            !half.sample(Some(true), &id_low(u64::MAX)),
            "not parent-based"
        );
        assert!(with("traceidratio", "2").is_err());
        assert!(with("jaeger_remote", "").is_err());
        let default = Sampler::default();
        assert!(default.sample(None, &id_low(u64::MAX)));
        assert!(!default.sample(Some(false), &id_low(0)));
    }
}
