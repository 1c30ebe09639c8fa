//! Federation states as Consul's RPC carries them: `FederationState.Apply`
//! (`FederationStateRequest{Datacenter, Op, State, WriteRequest}`, answered with a bool)
//! and `FederationState.List` (a `DCSpecificRequest`, answered with
//! `IndexedFederationStates{States, QueryMeta}`), which a secondary datacenter's leader
//! sends its primary (`agent::connect::primary`).
//!
//! A state crosses as Consul's `FederationState` struct: `UpdatedAt` as Go's binary time,
//! each mesh gateway as its `CheckServiceNode` — the JSON the store keeps, written as the
//! msgpack map of its fields and read back into the same canonical JSON
//! (`consul::federation_state::gateway_from_value`), so a state that went there and back
//! compares equal to the one sent. Decoding is bounded: at most
//! [`MESH_GATEWAYS_PER_DATACENTER_MAX`] gateways per state, [`STATES_PER_ANSWER_MAX`] states
//! per answer, datacenter names of at most [`DATACENTER_NAME_BYTES_MAX`] bytes.

use super::acl::go_time_unix_ns;
use super::{each_field, go_time_binary, read_json, read_reply, write_json, Fields, QueryMeta};
use crate::consul::federation_state::{gateway_from_value, STATES_PER_ANSWER_MAX};
use crate::proto::msgpack::{Reader, WireError, Writer};
use crate::proto::rfc3339;
use crate::store::federation::{
    FederationState, DATACENTER_NAME_BYTES_MAX, MESH_GATEWAYS_PER_DATACENTER_MAX,
};
use arcstr::ArcStr;

/// `FederationStateRequest`: an upsert or a delete of one datacenter's state.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ApplyRequest<'a> {
    /// The datacenter that serves the call (the primary).
    pub datacenter: &'a str,
    /// `"upsert"` or `"delete"` (Consul's `FederationStateOp`).
    pub op: &'a str,
    /// The state; `None` when the request carried none (Consul refuses it).
    pub state: Option<FederationState>,
    pub token: &'a str,
}

impl<'a> ApplyRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<ApplyRequest<'a>, WireError> {
        let mut request = ApplyRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "Op" => request.op = r.str()?,
                "State" => {
                    request.state = if r.try_nil()? {
                        None
                    } else {
                        Some(read_state(r)?)
                    }
                }
                _ => return super::write_request_field(&mut request.token, name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    /// The request as a client sends it.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 4);
        f.field("Datacenter").str(self.datacenter);
        f.field("Op").str(self.op);
        match &self.state {
            Some(state) => write_state(f.field("State"), state),
            None => f.field("State").nil(),
        }
        f.field("Token").str(self.token);
        f.finish();
        w.into_inner()
    }
}

/// One `FederationState`.
pub fn write_state(w: &mut Writer, state: &FederationState) {
    let mut f = Fields::new(w, 6);
    f.field("CreateIndex").uint(state.create_index);
    f.field("Datacenter").str(&state.datacenter);
    let gateways = f.field("MeshGateways");
    if state.mesh_gateways.is_empty() {
        gateways.nil();
    } else {
        gateways.array_len(state.mesh_gateways.len());
        for gateway in &state.mesh_gateways {
            // The store wrote this JSON itself: it parses.
            let value: serde_json::Value =
                serde_json::from_str(&gateway.json).unwrap_or(serde_json::Value::Null);
            write_json(gateways, &value);
        }
    }
    f.field("ModifyIndex").uint(state.modify_index);
    f.field("PrimaryModifyIndex")
        .uint(state.primary_modify_index);
    let updated_at_ns = rfc3339::parse_ns(&state.updated_at).unwrap_or(0);
    f.field("UpdatedAt").bytes(&go_time_binary(updated_at_ns));
    f.finish();
}

/// Reads one `FederationState`; a state without a datacenter is refused, as Consul refuses
/// to store one.
pub fn read_state(r: &mut Reader) -> Result<FederationState, WireError> {
    let mut datacenter = "";
    let mut gateways = Vec::new();
    let mut updated_at_ns = 0;
    let (mut primary_modify_index, mut create_index, mut modify_index) = (0, 0, 0);
    each_field(r, |name, r| {
        match name {
            "Datacenter" => datacenter = r.str()?,
            "MeshGateways" => {
                if r.try_nil()? {
                    return Ok(true);
                }
                let count = r.array_len()?;
                if count > MESH_GATEWAYS_PER_DATACENTER_MAX {
                    return Err(WireError::TooLarge {
                        what: "mesh gateways of one datacenter",
                        limit: MESH_GATEWAYS_PER_DATACENTER_MAX,
                    });
                }
                gateways.reserve(count);
                for _ in 0..count {
                    let value = read_json(r)?;
                    let gateway = gateway_from_value(&value).map_err(|_| {
                        WireError::Invalid("a mesh gateway without its Node or Service")
                    })?;
                    gateways.push(gateway);
                }
            }
            "UpdatedAt" => updated_at_ns = go_time_unix_ns(r.bytes()?)?,
            "PrimaryModifyIndex" => primary_modify_index = r.u64("PrimaryModifyIndex")?,
            "CreateIndex" => create_index = r.u64("CreateIndex")?,
            "ModifyIndex" => modify_index = r.u64("ModifyIndex")?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    if datacenter.is_empty() {
        return Err(WireError::Invalid(
            "a federation state without its datacenter",
        ));
    }
    if datacenter.len() > DATACENTER_NAME_BYTES_MAX {
        return Err(WireError::TooLarge {
            what: "datacenter name bytes",
            limit: DATACENTER_NAME_BYTES_MAX,
        });
    }
    Ok(FederationState {
        datacenter: ArcStr::from(datacenter),
        mesh_gateways: gateways,
        updated_at: ArcStr::from(rfc3339::format_ns(updated_at_ns)),
        primary_modify_index,
        create_index,
        modify_index,
    })
}

/// `IndexedFederationStates`: every state, and the query's metadata.
pub fn write_states_reply<'s>(
    w: &mut Writer,
    meta: &QueryMeta,
    states: impl ExactSizeIterator<Item = &'s FederationState>,
) {
    let mut states = Some(states);
    meta.write_reply(w, &["States"], |_, w| {
        let states = states.take().expect("one States field");
        if states.len() == 0 {
            w.nil();
            return;
        }
        w.array_len(states.len());
        for state in states {
            write_state(w, state);
        }
    });
}

/// Reads an `IndexedFederationStates` reply.
pub fn read_states_reply(body: &[u8]) -> Result<(QueryMeta, Vec<FederationState>), WireError> {
    let mut states = Vec::new();
    let meta = read_reply(body, |name, r| {
        if name != "States" {
            return Ok(false);
        }
        if r.try_nil()? {
            return Ok(true);
        }
        let count = r.array_len()?;
        if count > STATES_PER_ANSWER_MAX {
            return Err(WireError::TooLarge {
                what: "federation states of one answer",
                limit: STATES_PER_ANSWER_MAX,
            });
        }
        states.reserve(count);
        for _ in 0..count {
            states.push(read_state(r)?);
        }
        Ok(true)
    })?;
    Ok((meta, states))
}

/// `FederationStateQuery` (`FederationState.Get`): one datacenter's state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateQuery<'a> {
    /// The datacenter that serves the call.
    pub datacenter: &'a str,
    /// The datacenter whose state is read.
    pub target_datacenter: &'a str,
    pub options: super::QueryOptions<'a>,
}

impl<'a> StateQuery<'a> {
    pub fn decode(body: &'a [u8]) -> Result<StateQuery<'a>, WireError> {
        let mut request = StateQuery::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "TargetDatacenter" => request.target_datacenter = r.str()?,
                _ => return request.options.field(name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    /// The request as a client sends it.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.options.write_request(
            &mut w,
            &["Datacenter", "TargetDatacenter"],
            |name, w| match name {
                "Datacenter" => w.str(self.datacenter),
                _ => w.str(self.target_datacenter),
            },
        );
        w.into_inner()
    }
}

/// `FederationStateResponse`: one state (nil when the datacenter has none) and the query's
/// metadata.
pub fn write_state_reply(w: &mut Writer, meta: &QueryMeta, state: Option<&FederationState>) {
    meta.write_reply(w, &["State"], |_, w| match state {
        Some(state) => write_state(w, state),
        None => w.nil(),
    });
}

/// Reads a `FederationStateResponse`.
pub fn read_state_reply(body: &[u8]) -> Result<(QueryMeta, Option<FederationState>), WireError> {
    let mut state = None;
    let meta = read_reply(body, |name, r| {
        if name != "State" {
            return Ok(false);
        }
        if !r.try_nil()? {
            state = Some(read_state(r)?);
        }
        Ok(true)
    })?;
    Ok((meta, state))
}

/// `DatacenterIndexedCheckServiceNodes` (`FederationState.ListMeshGateways`): each
/// datacenter's mesh gateways as `CheckServiceNode`s (the stored JSON's fields), in the
/// order given.
pub fn write_mesh_gateways_reply(
    w: &mut Writer,
    meta: &QueryMeta,
    datacenters: &[(&str, Vec<&crate::store::federation::MeshGateway>)],
) {
    meta.write_reply(w, &["DatacenterNodes"], |_, w| {
        if datacenters.is_empty() {
            w.nil();
            return;
        }
        w.map_len(datacenters.len());
        for (datacenter, gateways) in datacenters {
            w.str(datacenter);
            w.array_len(gateways.len());
            for gateway in gateways {
                // The store wrote this JSON itself: it parses.
                let value: serde_json::Value =
                    serde_json::from_str(&gateway.json).unwrap_or(serde_json::Value::Null);
                write_json(w, &value);
            }
        }
    });
}

/// A datacenter's mesh gateways as `ListMeshGateways` answers them.
pub type DatacenterGateways<'a> = Vec<(&'a str, Vec<crate::store::federation::MeshGateway>)>;

/// Reads a `DatacenterIndexedCheckServiceNodes` reply: at most [`STATES_PER_ANSWER_MAX`]
/// datacenters of at most [`MESH_GATEWAYS_PER_DATACENTER_MAX`] gateways each.
pub fn read_mesh_gateways_reply(
    body: &[u8],
) -> Result<(QueryMeta, DatacenterGateways<'_>), WireError> {
    let mut datacenters = Vec::new();
    let meta = read_reply(body, |name, r| {
        if name != "DatacenterNodes" {
            return Ok(false);
        }
        if r.try_nil()? {
            return Ok(true);
        }
        let count = r.map_len()?;
        if count > STATES_PER_ANSWER_MAX {
            return Err(WireError::TooLarge {
                what: "datacenters of one answer",
                limit: STATES_PER_ANSWER_MAX,
            });
        }
        for _ in 0..count {
            let datacenter = r.str()?;
            let mut gateways = Vec::new();
            if !r.try_nil()? {
                let gateway_count = r.array_len()?;
                if gateway_count > MESH_GATEWAYS_PER_DATACENTER_MAX {
                    return Err(WireError::TooLarge {
                        what: "mesh gateways of one datacenter",
                        limit: MESH_GATEWAYS_PER_DATACENTER_MAX,
                    });
                }
                for _ in 0..gateway_count {
                    let value = read_json(r)?;
                    gateways.push(gateway_from_value(&value).map_err(|_| {
                        WireError::Invalid("a mesh gateway without its Node or Service")
                    })?);
                }
            }
            datacenters.push((datacenter, gateways));
        }
        Ok(true)
    })?;
    Ok((meta, datacenters))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::federation::MeshGateway;

    fn gateway() -> MeshGateway {
        let json = serde_json::json!({
            "Node": {"Node": "gw-node", "Address": "10.0.0.9", "TaggedAddresses": {"wan": "192.0.2.9"}},
            "Service": {"ID": "gw", "Service": "gw", "Kind": "mesh-gateway", "Port": 8443,
                        "Meta": {"consul-wan-federation": "1"}},
            "Checks": [{"Status": "passing"}]
        });
        gateway_from_value(&json).unwrap()
    }

    fn state() -> FederationState {
        FederationState {
            datacenter: ArcStr::from("dc2"),
            mesh_gateways: vec![gateway()],
            updated_at: ArcStr::from(rfc3339::format_ns(1_700_000_000_123_000_000)),
            primary_modify_index: 7,
            create_index: 5,
            modify_index: 9,
        }
    }

    #[test]
    fn an_apply_request_goes_there_and_back_unchanged() {
        let request = ApplyRequest {
            datacenter: "dc1",
            op: "upsert",
            state: Some(state()),
            token: "secret",
        };
        let body = request.encode();
        let decoded = ApplyRequest::decode(&body).unwrap();
        assert_eq!(decoded, request);
        assert!(decoded.state.unwrap().is_same(&state()));
    }

    #[test]
    fn a_list_reply_goes_there_and_back_and_bad_ones_are_refused() {
        let states = [state()];
        let mut w = Writer::new();
        let meta = QueryMeta {
            index: 12,
            ..QueryMeta::default()
        };
        write_states_reply(&mut w, &meta, states.iter());
        let (read_meta, read) = read_states_reply(&w.into_inner()).unwrap();
        assert_eq!(read_meta.index, 12);
        assert_eq!(read, states.to_vec());
        // No states at all is nil, and reads as none.
        let mut w = Writer::new();
        write_states_reply(&mut w, &meta, [].iter());
        assert!(read_states_reply(&w.into_inner()).unwrap().1.is_empty());
        // A state without its datacenter.
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 1);
        f.field("ModifyIndex").uint(1);
        f.finish();
        assert!(read_state(&mut Reader::new(&w.into_inner())).is_err());
        // Garbage never panics.
        for cut in 0..40 {
            let body = ApplyRequest {
                state: Some(state()),
                ..ApplyRequest::default()
            }
            .encode();
            let _ = ApplyRequest::decode(&body[..cut.min(body.len())]);
        }
    }
}
