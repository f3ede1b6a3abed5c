//! The keys bearer tokens are verified with (docs/security.md, "Tenancy and JWT"; the
//! verification itself is crate::http::auth): the HS256 secret, a PEM public
//! key, and a JWKS fetched from `JWT_JWKS_URL` — at start, every
//! `JWT_JWKS_REFRESH_INTERVAL`, and again when a token names a `kid` not seen yet (at
//! most once per [`REFETCH_AFTER`], so a stream of forged kids cannot hammer the
//! provider). Each fetch is bounded by `JWT_JWKS_TIMEOUT_MS`; a failed one keeps the
//! keys already known.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey};

use crate::config::{AuthConfig, JwtAlgorithm};

/// The shortest time between two fetches caused by unknown kids.
pub const REFETCH_AFTER: Duration = Duration::from_secs(10);

/// One verification key.
#[derive(Clone)]
pub struct Key {
    pub kid: Option<String>,
    pub alg: Algorithm,
    pub key: DecodingKey,
}

/// Every key a token may be verified with.
pub struct Keys {
    /// The secret and the PEM key: fixed for the process's life.
    fixed: Vec<Key>,
    jwks: Option<Jwks>,
}

impl Keys {
    pub fn new(cfg: &AuthConfig) -> Result<Keys, String> {
        let mut fixed = Vec::new();
        let accepts = |a: JwtAlgorithm| cfg.algorithm == a || cfg.algorithm == JwtAlgorithm::Auto;
        if let Some(s) = cfg
            .secret
            .as_deref()
            .filter(|_| accepts(JwtAlgorithm::Hs256))
        {
            fixed.push(Key {
                kid: None,
                alg: Algorithm::HS256,
                key: DecodingKey::from_secret(s.as_bytes()),
            });
        }
        if let Some(pem) = &cfg.public_key {
            fixed.push(pem_key(pem.as_bytes(), cfg)?);
        }
        let jwks = cfg
            .jwks_url
            .as_ref()
            .map(|url| Jwks::new(url, cfg))
            .transpose()?;
        Ok(Keys { fixed, jwks })
    }

    /// The JWKS, when one is configured (the server starts its refresh loop).
    pub fn jwks(&self) -> Option<&Jwks> {
        self.jwks.as_ref()
    }

    /// Candidate keys for a token signed with `alg`, naming `kid`: the fixed ones of that
    /// algorithm, and the JWKS key of that kid (or every JWKS key of that algorithm when
    /// the token names none), fetching the set again for a kid not seen yet.
    pub async fn for_token(&self, alg: Algorithm, kid: Option<&str>) -> Vec<Key> {
        let mut out: Vec<Key> = self
            .fixed
            .iter()
            .filter(|k| k.alg == alg)
            .cloned()
            .collect();
        if let Some(j) = &self.jwks {
            let found = j.matching(alg, kid);
            if found.is_empty() {
                out.extend(j.refetch_for(alg, kid).await);
            } else {
                out.extend(found);
            }
        }
        out
    }
}

/// A PEM public key: RSA for RS256, Ed25519 for EdDSA (whichever parses, within the
/// configured algorithm).
fn pem_key(pem: &[u8], cfg: &AuthConfig) -> Result<Key, String> {
    let rsa = DecodingKey::from_rsa_pem(pem)
        .ok()
        .map(|k| (Algorithm::RS256, k));
    let ed = || {
        DecodingKey::from_ed_pem(pem)
            .ok()
            .map(|k| (Algorithm::EdDSA, k))
    };
    let (alg, key) = rsa
        .or_else(ed)
        .ok_or("JWT_PUBLIC_KEY is neither an RSA nor an Ed25519 public key in PEM")?;
    let wanted = match alg {
        Algorithm::RS256 => JwtAlgorithm::Rs256,
        _ => JwtAlgorithm::EdDsa,
    };
    if cfg.algorithm != wanted && cfg.algorithm != JwtAlgorithm::Auto {
        return Err(format!(
            "JWT_PUBLIC_KEY is a {alg:?} key but JWT_ALGORITHM is {:?}",
            cfg.algorithm
        ));
    }
    Ok(Key {
        kid: None,
        alg,
        key,
    })
}

/// A fetched key set.
pub struct Jwks {
    url: String,
    http: reqwest::Client,
    refresh: Duration,
    algorithm: JwtAlgorithm,
    keys: RwLock<Arc<Vec<Key>>>,
    /// Held by the fetch in flight (a request for a missing key waits for it rather than
    /// failing or fetching twice); holds when the last fetch started.
    fetching: tokio::sync::Mutex<Option<Instant>>,
    pub fetches_ok: AtomicU64,
    pub fetches_failed: AtomicU64,
}

impl Jwks {
    fn new(url: &str, cfg: &AuthConfig) -> Result<Jwks, String> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(cfg.jwks_timeout_ms))
            .build()
            .map_err(|e| format!("JWT_JWKS_URL client: {e}"))?;
        Ok(Jwks {
            url: url.to_string(),
            http,
            refresh: Duration::from_secs(cfg.jwks_refresh_s),
            algorithm: cfg.algorithm,
            keys: RwLock::new(Arc::new(Vec::new())),
            fetching: tokio::sync::Mutex::new(None),
            fetches_ok: AtomicU64::new(0),
            fetches_failed: AtomicU64::new(0),
        })
    }

    pub fn refresh_interval(&self) -> Duration {
        self.refresh
    }

    fn matching(&self, alg: Algorithm, kid: Option<&str>) -> Vec<Key> {
        let keys = self.keys.read().expect("jwks lock").clone();
        keys.iter()
            .filter(|k| k.alg == alg && (kid.is_none() || k.kid.as_deref() == kid))
            .cloned()
            .collect()
    }

    /// The keys for a token the known set has none for: after the fetch in flight, if
    /// any, and after one more fetch when the last began at least REFETCH_AFTER ago.
    async fn refetch_for(&self, alg: Algorithm, kid: Option<&str>) -> Vec<Key> {
        let mut last = self.fetching.lock().await;
        let found = self.matching(alg, kid);
        if !found.is_empty() || last.is_some_and(|t| t.elapsed() < REFETCH_AFTER) {
            return found;
        }
        let _ = self.fetch_locked(&mut last).await;
        self.matching(alg, kid)
    }

    /// Fetches the set and replaces the known keys; on failure the known keys stay.
    pub async fn fetch(&self) -> Result<usize, String> {
        let mut last = self.fetching.lock().await;
        self.fetch_locked(&mut last).await
    }

    async fn fetch_locked(&self, last: &mut Option<Instant>) -> Result<usize, String> {
        *last = Some(Instant::now());
        let got = self.get().await;
        match &got {
            Ok(keys) => {
                self.fetches_ok.fetch_add(1, Ordering::Relaxed);
                *self.keys.write().expect("jwks lock") = Arc::new(keys.clone());
            }
            Err(e) => {
                self.fetches_failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(url = %self.url, error = %e, "JWKS fetch failed; keeping the keys known");
            }
        }
        got.map(|k| k.len())
    }

    async fn get(&self) -> Result<Vec<Key>, String> {
        let r = self
            .http
            .get(&self.url)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !r.status().is_success() {
            return Err(format!("HTTP {}", r.status()));
        }
        let set: JwkSet = r.json().await.map_err(|e| e.to_string())?;
        Ok(set
            .keys
            .iter()
            .filter_map(|jwk| {
                let alg = match &jwk.algorithm {
                    AlgorithmParameters::RSA(_) => Algorithm::RS256,
                    AlgorithmParameters::OctetKeyPair(_) => Algorithm::EdDSA,
                    _ => return None,
                };
                let wanted = match alg {
                    Algorithm::RS256 => JwtAlgorithm::Rs256,
                    _ => JwtAlgorithm::EdDsa,
                };
                if self.algorithm != wanted && self.algorithm != JwtAlgorithm::Auto {
                    return None;
                }
                Some(Key {
                    kid: jwk.common.key_id.clone(),
                    alg,
                    key: DecodingKey::from_jwk(jwk).ok()?,
                })
            })
            .collect())
    }
}
