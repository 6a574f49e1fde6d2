//! `[http.cors]`: which web pages on other origins may use the API from a browser.

use serde::{Deserialize, Serialize};

/// Cross-origin requests from browsers (docs/server.md, "Browsers").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CorsSettings {
    /// Answer CORS at all: reads (GET and HEAD: rows, SSE, offsets, tables) from any origin,
    /// writes from the origins below. `false`: no CORS headers, so pages on other origins cannot
    /// read responses. Default true.
    pub enabled: bool,
    /// Origins (`https://app.example:8443`) whose pages may write (append, trim, create, drop,
    /// take writer ids). Any origin may when the node requires a token: a page that does not
    /// hold one cannot write. Writes from any other origin are refused (403) whether CORS is on
    /// or not, so a page a developer visits cannot write to their local node. Default none.
    pub write_origins: Vec<String>,
    /// How long a browser may cache a preflight's answer, seconds (`max_age_secs`). Default 600.
    pub max_age_secs: u64,
}

impl Default for CorsSettings {
    fn default() -> Self {
        CorsSettings {
            enabled: true,
            write_origins: Vec::new(),
            max_age_secs: 600,
        }
    }
}

impl CorsSettings {
    /// Refuses origins that are not `scheme://host[:port]`, naming the setting.
    pub fn validate(&self) -> Result<(), String> {
        for origin in &self.write_origins {
            let ok = (origin.starts_with("http://") || origin.starts_with("https://"))
                && !origin.trim_end_matches('/').contains(['?', '#'])
                && origin.split("://").nth(1).is_some_and(|rest| {
                    !rest.is_empty() && !rest.trim_end_matches('/').contains('/')
                });
            if !ok {
                return Err(format!(
                    "http.cors.write_origins: `{origin}` is not an origin (scheme://host[:port])"
                ));
            }
        }
        if self.max_age_secs > 86_400 {
            return Err("http.cors.max_age_secs must be at most 86400".to_owned());
        }
        Ok(())
    }
}
