//! Layered settings: built-in defaults → TOML file → `APIARY_*` environment → command-line flags.
//!
//! The settings struct carries its own defaults (`#[serde(default)]`) and refuses unknown keys
//! (`#[serde(deny_unknown_fields)]`), so a typo in the file is an error, never a silent default. Each
//! program lists its keys ([`Key`]: dotted path and value kind); the variable of a key is `APIARY_` + the
//! path in upper case with `.` → `_` (`outbox.max_bytes` → `APIARY_OUTBOX_MAX_BYTES`). A variable's text
//! is parsed by its key's kind, so `APIARY_IDENTITY_USER_ID=007` stays the string `"007"` and
//! `APIARY_POOL_SIZE=many` is refused naming the variable. Flags are applied by the caller on the loaded
//! value (they are typed already), then the caller validates combinations.
//!
//! Every layer is a `figment` provider named after its source, so an error says where the bad value came
//! from: `config file /etc/apiary/ingest.toml: key `pool_size`: invalid type: …` or
//! `environment variable APIARY_MODE: key `mode`: unknown variant …`.

use std::path::{Path, PathBuf};

use figment::providers::{Format, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};
use serde::de::DeserializeOwned;

/// How the text of an environment variable becomes a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Taken as is.
    Str,
    /// A signed or unsigned integer.
    Int,
    /// A decimal number.
    Float,
    /// `true`/`false` (also `1`/`0`, `yes`/`no`).
    Bool,
}

/// One settable key of a program's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// Dotted path in the TOML file (`push.backoff_cap_ms`).
    pub path: &'static str,
    /// How its environment variable is parsed.
    pub kind: Kind,
}

impl Key {
    pub const fn new(path: &'static str, kind: Kind) -> Key {
        Key { path, kind }
    }

    /// The environment variable that sets this key.
    pub fn env_var(&self) -> String {
        env_name(self.path)
    }
}

/// The environment variable of a dotted key path.
pub fn env_name(path: &str) -> String {
    format!("APIARY_{}", path.replace('.', "_").to_uppercase())
}

/// Why settings could not be loaded. Messages name the source and say how to fix the value.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file named by `--config` (or found in the data directory) could not be read.
    #[error("cannot read config file {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A variable's text does not parse as its key's kind.
    #[error("environment variable {var}: {why}")]
    Env { var: String, why: String },
    /// A value does not fit the settings (wrong type, unknown key, unknown variant), with its source.
    #[error("{0}")]
    Settings(String),
    /// Values that are each fine but do not work together (from the program's own validation).
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// The layers to load, below the flags.
#[derive(Debug, Clone, Copy)]
pub struct Layers<'a> {
    /// The TOML file, if any (it must exist when given).
    pub file: Option<&'a Path>,
    /// The process environment (usually `std::env::vars()` collected), injectable for tests.
    pub env: &'a [(String, String)],
    /// The program's keys, for the environment layer.
    pub keys: &'a [Key],
}

/// Loads defaults → file → environment into `T`.
pub fn load<T: DeserializeOwned>(layers: Layers<'_>) -> Result<T, ConfigError> {
    let mut figment = Figment::new();
    if let Some(path) = layers.file {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        figment = figment.merge(Named {
            inner: Toml::string(&text),
            name: format!("config file {}", path.display()),
            path: Some(path.to_path_buf()),
        });
    }
    for key in layers.keys {
        let var = key.env_var();
        let Some((_, raw)) = layers.env.iter().rev().find(|(k, _)| *k == var) else {
            continue;
        };
        let value = parse(key.kind, raw).map_err(|why| ConfigError::Env {
            var: var.clone(),
            why,
        })?;
        figment = figment.merge(EnvVar {
            path: key.path,
            value,
            name: format!("environment variable {var}"),
        });
    }
    figment
        .extract()
        .map_err(|e| ConfigError::Settings(render(e)))
}

fn parse(kind: Kind, raw: &str) -> Result<Value, String> {
    let t = raw.trim();
    Ok(match kind {
        Kind::Str => Value::from(raw.to_string()),
        Kind::Int => {
            if let Ok(n) = t.parse::<i64>() {
                Value::from(n)
            } else if let Ok(n) = t.parse::<u64>() {
                Value::from(n)
            } else {
                return Err(format!("{raw:?} is not an integer"));
            }
        }
        Kind::Float => Value::from(
            t.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| format!("{raw:?} is not a number"))?,
        ),
        Kind::Bool => Value::from(match t.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => true,
            "false" | "0" | "no" | "off" => false,
            _ => return Err(format!("{raw:?} is not true or false")),
        }),
    })
}

/// Every error of a failed extraction, one per line: source, key, what is wrong.
fn render(errors: figment::Error) -> String {
    let lines: Vec<String> = errors
        .into_iter()
        .map(|e| {
            let source = e
                .metadata
                .as_ref()
                .map(|m| m.name.to_string())
                .unwrap_or_else(|| "settings".into());
            if e.path.is_empty() {
                format!("{source}: {}", e.kind)
            } else {
                format!("{source}: key `{}`: {}", e.path.join("."), e.kind)
            }
        })
        .collect();
    lines.join("\n")
}

/// A provider under a name of our choosing (the file's path rather than "TOML source string").
struct Named<P> {
    inner: P,
    name: String,
    path: Option<PathBuf>,
}

impl<P: Provider> Provider for Named<P> {
    fn metadata(&self) -> Metadata {
        let m = Metadata::named(self.name.clone());
        match &self.path {
            Some(p) => m.source(figment::Source::File(p.clone())),
            None => m,
        }
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        self.inner.data()
    }
}

/// One environment variable, typed by its key's kind.
struct EnvVar {
    path: &'static str,
    value: Value,
    name: String,
}

impl Provider for EnvVar {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.name.clone())
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let dict = match figment::util::nest(self.path, self.value.clone()) {
            Value::Dict(_, d) => d,
            _ => unreachable!("a non-empty key path nests into a dictionary"),
        };
        Ok(Profile::Default.collect(dict))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(default, deny_unknown_fields)]
    struct Demo {
        name: String,
        user: Option<String>,
        rate: f64,
        inner: Inner,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(default, deny_unknown_fields)]
    struct Inner {
        max_bytes: u64,
        enabled: bool,
    }

    impl Default for Demo {
        fn default() -> Self {
            Demo {
                name: "d".into(),
                user: None,
                rate: 1.5,
                inner: Inner::default(),
            }
        }
    }

    impl Default for Inner {
        fn default() -> Self {
            Inner {
                max_bytes: 10,
                enabled: false,
            }
        }
    }

    const KEYS: &[Key] = &[
        Key::new("name", Kind::Str),
        Key::new("user", Kind::Str),
        Key::new("rate", Kind::Float),
        Key::new("inner.max_bytes", Kind::Int),
        Key::new("inner.enabled", Kind::Bool),
    ];

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn load_with(file: Option<&Path>, vars: &[(&str, &str)]) -> Result<Demo, ConfigError> {
        load(Layers {
            file,
            env: &env(vars),
            keys: KEYS,
        })
    }

    #[test]
    fn layers_apply_defaults_then_file_then_environment() {
        assert_eq!(load_with(None, &[]).unwrap(), Demo::default());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(&file, "name = \"f\"\n[inner]\nmax_bytes = 20\n").unwrap();
        let d = load_with(Some(&file), &[]).unwrap();
        assert_eq!((d.name.as_str(), d.inner.max_bytes), ("f", 20));
        let d = load_with(
            Some(&file),
            &[
                ("APIARY_INNER_MAX_BYTES", "30"),
                ("APIARY_USER", "007"),
                ("APIARY_INNER_ENABLED", "yes"),
                ("APIARY_RATE", "2"),
            ],
        )
        .unwrap();
        assert_eq!(d.inner.max_bytes, 30);
        assert_eq!(d.user.as_deref(), Some("007"), "a Str key stays a string");
        assert!(d.inner.enabled);
        assert_eq!(d.rate, 2.0);
        assert_eq!(
            d.name, "f",
            "the file's value stands where no variable is set"
        );
    }

    #[test]
    fn errors_name_their_source_and_key() {
        let err = load_with(None, &[("APIARY_INNER_MAX_BYTES", "lots")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "environment variable APIARY_INNER_MAX_BYTES: \"lots\" is not an integer"
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(&file, "[inner]\nmax_byte = 1\n").unwrap();
        let err = load_with(Some(&file), &[]).unwrap_err().to_string();
        assert!(
            err.contains(&format!("config file {}", file.display())) && err.contains("max_byte"),
            "{err}"
        );
        std::fs::write(&file, "name = 5\n").unwrap();
        let err = load_with(Some(&file), &[]).unwrap_err().to_string();
        assert!(err.contains("key `name`"), "{err}");
        let err = load_with(Some(&dir.path().join("missing.toml")), &[]).unwrap_err();
        assert!(matches!(err, ConfigError::Read { .. }), "{err}");
        assert!(
            !err.to_string().contains("os error"),
            "the cause is the source's to print, not repeated in the message: {err}"
        );
    }

    #[test]
    fn variable_names_follow_the_key_path() {
        assert_eq!(
            env_name("push.heartbeat_interval_secs"),
            "APIARY_PUSH_HEARTBEAT_INTERVAL_SECS"
        );
        assert_eq!(Key::new("mode", Kind::Str).env_var(), "APIARY_MODE");
    }
}
