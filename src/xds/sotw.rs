//! The state-of-the-world ADS protocol of one stream: each response carries every resource
//! of its type the client asked for (all of them for clusters and listeners, the named
//! ones for endpoints and routes), under a version that is the hash of what it carries.
//! Pure, like [`super::delta`].
//!
//! Invariants: a type is answered only once the client asked for it; a response is sent
//! when what the client would get differs from what it was last sent; a request whose
//! nonce is not the type's latest is stale and changes nothing; a NACKed version is never
//! sent again (the next snapshot or subscription change makes a new one).

use super::resources::{hex, ResourceType, Resources};
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use sha2::{Digest, Sha256};

/// Most names one request may ask for.
pub const NAMES_PER_REQUEST_MAX: usize = 16_384;

/// What a request meant.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    Request(ResourceType),
    /// A NACK of `version`, with the client's error.
    Nack {
        kind: ResourceType,
        version: String,
        error: String,
    },
    /// A request answering an older response than the type's latest.
    Stale(ResourceType),
    UnknownType(String),
}

#[derive(Debug, Default)]
struct TypeState {
    registered: bool,
    /// Empty for a wildcard type: everything.
    names: Vec<String>,
    nonce: String,
    sent_version: String,
    nacked_version: String,
}

#[derive(Debug, Default)]
pub struct SotwStream {
    types: [TypeState; 4],
    nonce: u64,
}

impl SotwStream {
    pub fn new() -> SotwStream {
        SotwStream::default()
    }

    pub fn receive(&mut self, request: &DiscoveryRequest) -> Result<Received, String> {
        if request.type_url.is_empty() {
            return Err("type URL is required for ADS".to_string());
        }
        let Some(kind) = ResourceType::from_type_url(&request.type_url) else {
            return Ok(Received::UnknownType(request.type_url.clone()));
        };
        if request.resource_names.len() > NAMES_PER_REQUEST_MAX {
            return Err(format!(
                "a request names more than {NAMES_PER_REQUEST_MAX} resources"
            ));
        }
        let state = &mut self.types[kind as usize];
        if !request.response_nonce.is_empty() && request.response_nonce != state.nonce {
            return Ok(Received::Stale(kind));
        }
        state.registered = true;
        let mut names = request.resource_names.clone();
        names.retain(|n| n != "*");
        names.sort_unstable();
        names.dedup();
        state.names = names;
        if let Some(status) = &request.error_detail {
            state.nacked_version = state.sent_version.clone();
            return Ok(Received::Nack {
                kind,
                version: state.sent_version.clone(),
                error: status.message.clone(),
            });
        }
        Ok(Received::Request(kind))
    }

    /// Every response due for `resources`, in Consul's type order.
    pub fn responses(&mut self, resources: &Resources) -> Vec<DiscoveryResponse> {
        let mut out = Vec::new();
        for kind in ResourceType::ALL {
            let state = &self.types[kind as usize];
            if !state.registered {
                continue;
            }
            let current = resources.of(kind);
            let chosen: Vec<(&String, &std::sync::Arc<super::resources::Resource>)> =
                if state.names.is_empty() && kind.is_wildcard_by_default() {
                    current.iter().collect()
                } else {
                    state
                        .names
                        .iter()
                        .filter_map(|n| current.get_key_value(n))
                        .collect()
                };
            let mut hasher = Sha256::new();
            for (name, resource) in &chosen {
                hasher.update(name.as_bytes());
                hasher.update([0]);
                hasher.update(resource.version.as_bytes());
                hasher.update([0]);
            }
            let version = hex(&hasher.finalize()[..16]);
            if version == state.sent_version || version == state.nacked_version {
                continue;
            }
            self.nonce += 1;
            let response = DiscoveryResponse {
                version_info: version.clone(),
                resources: chosen.iter().map(|(_, r)| r.any.clone()).collect(),
                type_url: kind.type_url().to_string(),
                nonce: format!("{:08x}", self.nonce),
                ..Default::default()
            };
            let state = &mut self.types[kind as usize];
            state.sent_version = version;
            state.nonce = response.nonce.clone();
            out.push(response);
        }
        out
    }
}
