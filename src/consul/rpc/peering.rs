//! Cluster peering on the wire: the requests and replies of praetor's own `Peering.*`
//! methods, and Consul's `ConfigEntry.GetResolvedExportedServices`
//! (`PartitionSpecificRequest` → `IndexedResolvedExportedServiceList`).
//!
//! Consul's agents reach peering through gRPC (`pbpeering.PeeringService`), so Consul has
//! no net/rpc method to copy; praetor's methods take requests shaped as Consul's net/rpc
//! structs are: the `pbpeering` request's fields (`PeerName`, `Meta`, `Partition`, …) next
//! to `Datacenter` and, for reads, the flattened `QueryOptions` (replies with `QueryMeta`),
//! for writes `WriteRequest`'s `Token`. A peering crosses as a map of `pbpeering.Peering`'s
//! field names, its `State` as the state's name (`"ACTIVE"`) and its times as the RFC 3339
//! text praetor stores, read back into the store's row so that a client agent renders it
//! with the server's renderer. Pure: bytes in, values out; every reader is bounded by the
//! body's size and the reader's container limits.

use super::{each_field, read_reply, string_list, string_map, Fields, QueryMeta, QueryOptions};
use crate::proto::msgpack::{Reader, WireError, Writer};
use crate::store::peering::{Peering, PeeringRemote, PeeringState, StreamStatus};
use std::collections::BTreeMap;

/// `Peering.GenerateToken`'s request: `pbpeering.GenerateTokenRequest` with `Datacenter` and
/// the token.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GenerateTokenRequest<'a> {
    pub datacenter: &'a str,
    pub meta: Vec<(&'a str, &'a str)>,
    pub partition: &'a str,
    pub peer_name: &'a str,
    pub server_external_addresses: Vec<&'a str>,
    pub token: &'a str,
}

impl<'a> GenerateTokenRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<GenerateTokenRequest<'a>, WireError> {
        let mut request = GenerateTokenRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "Meta" => request.meta = string_map(r)?,
                "Partition" => request.partition = r.str()?,
                "PeerName" => request.peer_name = r.str()?,
                "ServerExternalAddresses" => request.server_external_addresses = string_list(r)?,
                _ => return super::write_request_field(&mut request.token, name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 6);
        f.field("Datacenter").str(self.datacenter);
        super::write_string_map(f.field("Meta"), self.meta.iter().copied(), true);
        f.field("Partition").str(self.partition);
        f.field("PeerName").str(self.peer_name);
        super::write_string_list(
            f.field("ServerExternalAddresses"),
            self.server_external_addresses.iter().copied(),
            true,
        );
        f.field("Token").str(self.token);
        f.finish();
        w.into_inner()
    }
}

/// `Peering.GenerateToken`'s reply: `{PeeringToken}`, the token's base64 text.
pub fn encode_token_reply(token: &str) -> Vec<u8> {
    let mut w = Writer::new();
    let mut f = Fields::new(&mut w, 1);
    f.field("PeeringToken").str(token);
    f.finish();
    w.into_inner()
}

/// Reads `Peering.GenerateToken`'s reply back into the token's text.
pub fn decode_token_reply(body: &[u8]) -> Result<&str, WireError> {
    let mut token = "";
    each_field(&mut Reader::new(body), |name, r| {
        if name == "PeeringToken" {
            token = r.str()?;
            return Ok(true);
        }
        Ok(false)
    })?;
    Ok(token)
}

/// `Peering.Establish`'s request: `pbpeering.EstablishRequest` with `Datacenter` and the
/// token.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EstablishRequest<'a> {
    pub datacenter: &'a str,
    pub meta: Vec<(&'a str, &'a str)>,
    pub partition: &'a str,
    pub peer_name: &'a str,
    pub peering_token: &'a str,
    pub token: &'a str,
}

impl<'a> EstablishRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<EstablishRequest<'a>, WireError> {
        let mut request = EstablishRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "Meta" => request.meta = string_map(r)?,
                "Partition" => request.partition = r.str()?,
                "PeerName" => request.peer_name = r.str()?,
                "PeeringToken" => request.peering_token = r.str()?,
                _ => return super::write_request_field(&mut request.token, name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 6);
        f.field("Datacenter").str(self.datacenter);
        super::write_string_map(f.field("Meta"), self.meta.iter().copied(), true);
        f.field("Partition").str(self.partition);
        f.field("PeerName").str(self.peer_name);
        f.field("PeeringToken").str(self.peering_token);
        f.field("Token").str(self.token);
        f.finish();
        w.into_inner()
    }
}

/// The empty reply of `Peering.Establish` and `Peering.Delete` (`pbpeering`'s empty
/// responses): an empty map.
pub fn empty_reply() -> Vec<u8> {
    let mut w = Writer::new();
    w.map_len(0);
    w.into_inner()
}

/// `Peering.Read`'s and `Peering.Delete`'s request: the peering's name (`Name`), with
/// `QueryOptions` for the read and `Token` alone for the delete.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeeringNameRequest<'a> {
    pub datacenter: &'a str,
    pub name: &'a str,
    pub partition: &'a str,
    pub options: QueryOptions<'a>,
}

impl<'a> PeeringNameRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<PeeringNameRequest<'a>, WireError> {
        let mut request = PeeringNameRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "Name" => request.name = r.str()?,
                "Partition" => request.partition = r.str()?,
                _ => return request.options.field(name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    /// The read's request, `QueryOptions` flattened in.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.options
            .write_request(
                &mut w,
                &["Datacenter", "Name", "Partition"],
                |name, w| match name {
                    "Datacenter" => w.str(self.datacenter),
                    "Name" => w.str(self.name),
                    _ => w.str(self.partition),
                },
            );
        w.into_inner()
    }

    /// The delete's request: `WriteRequest`'s `Token` alone.
    pub fn encode_write(&self) -> Vec<u8> {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 4);
        f.field("Datacenter").str(self.datacenter);
        f.field("Name").str(self.name);
        f.field("Partition").str(self.partition);
        f.field("Token").str(self.options.token);
        f.finish();
        w.into_inner()
    }
}

/// `Peering.List`'s and `ConfigEntry.GetResolvedExportedServices`' request (Consul's
/// `PartitionSpecificRequest`; `Partition` is praetor's `pbpeering.PeeringListRequest`
/// field, empty or `default` in CE).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionRequest<'a> {
    pub datacenter: &'a str,
    pub partition: &'a str,
    pub options: QueryOptions<'a>,
}

impl<'a> PartitionRequest<'a> {
    pub fn decode(body: &'a [u8]) -> Result<PartitionRequest<'a>, WireError> {
        let mut request = PartitionRequest::default();
        each_field(&mut Reader::new(body), |name, r| {
            match name {
                "Datacenter" => request.datacenter = r.str()?,
                "Partition" => request.partition = r.str()?,
                _ => return request.options.field(name, r),
            }
            Ok(true)
        })?;
        Ok(request)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.options
            .write_request(&mut w, &["Datacenter", "Partition"], |name, w| match name {
                "Datacenter" => w.str(self.datacenter),
                _ => w.str(self.partition),
            });
        w.into_inner()
    }
}

/// How many of `pbpeering.Peering`'s fields a peering crosses with.
const PEERING_FIELDS: usize = 15;

/// Writes one peering as the map of `pbpeering.Peering`'s fields.
pub fn write_peering(w: &mut Writer, peering: &Peering) {
    let optional = |w: &mut Writer, text: &Option<String>| match text {
        Some(text) => w.str(text),
        None => w.nil(),
    };
    let list = |w: &mut Writer, items: &[String]| {
        super::write_string_list(w, items.iter().map(String::as_str), true)
    };
    let mut f = Fields::new(w, PEERING_FIELDS);
    f.field("CreateIndex").uint(peering.create_index);
    optional(f.field("DeletedAt"), &peering.deleted_at);
    f.field("ID").str(&peering.id);
    list(
        f.field("ManualServerAddresses"),
        &peering.manual_server_addresses,
    );
    super::write_string_map(
        f.field("Meta"),
        peering.meta.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        true,
    );
    f.field("ModifyIndex").uint(peering.modify_index);
    f.field("Name").str(&peering.name);
    f.field("Partition").str(&peering.partition);
    list(f.field("PeerCAPems"), &peering.peer_ca_pems);
    f.field("PeerID").str(&peering.peer_id);
    list(
        f.field("PeerServerAddresses"),
        &peering.peer_server_addresses,
    );
    f.field("PeerServerName").str(&peering.peer_server_name);
    {
        let w = f.field("Remote");
        let mut remote = Fields::new(w, 2);
        remote.field("Datacenter").str(&peering.remote.datacenter);
        remote.field("Partition").str(&peering.remote.partition);
        remote.finish();
    }
    f.field("State").str(peering.state.as_str());
    {
        let status = &peering.stream_status;
        let w = f.field("StreamStatus");
        let mut s = Fields::new(w, 5);
        list(s.field("ExportedServices"), &status.exported_services);
        list(s.field("ImportedServices"), &status.imported_services);
        optional(s.field("LastHeartbeat"), &status.last_heartbeat);
        optional(s.field("LastReceive"), &status.last_receive);
        optional(s.field("LastSend"), &status.last_send);
        s.finish();
    }
    f.finish();
}

fn owned_list(r: &mut Reader) -> Result<Vec<String>, WireError> {
    Ok(string_list(r)?.into_iter().map(str::to_string).collect())
}

fn optional_text(r: &mut Reader) -> Result<Option<String>, WireError> {
    if r.try_nil()? {
        return Ok(None);
    }
    Ok(Some(r.str()?.to_string()))
}

/// A peering state by its name; a name praetor does not know is refused.
fn state_of(name: &str) -> Result<PeeringState, WireError> {
    Ok(match name {
        "UNDEFINED" | "" => PeeringState::Undefined,
        "PENDING" => PeeringState::Pending,
        "ESTABLISHING" => PeeringState::Establishing,
        "ACTIVE" => PeeringState::Active,
        "FAILING" => PeeringState::Failing,
        "DELETING" => PeeringState::Deleting,
        "TERMINATED" => PeeringState::Terminated,
        _ => return Err(WireError::Invalid("unknown peering State")),
    })
}

/// Reads one peering back into the store's row.
pub fn read_peering(r: &mut Reader) -> Result<Peering, WireError> {
    let mut peering = Peering::default();
    each_field(r, |name, r| {
        match name {
            "CreateIndex" => peering.create_index = r.u64("CreateIndex")?,
            "DeletedAt" => peering.deleted_at = optional_text(r)?,
            "ID" => peering.id = r.str()?.to_string(),
            "ManualServerAddresses" => peering.manual_server_addresses = owned_list(r)?,
            "Meta" => {
                peering.meta = string_map(r)?
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>()
            }
            "ModifyIndex" => peering.modify_index = r.u64("ModifyIndex")?,
            "Name" => peering.name = r.str()?.to_string(),
            "Partition" => peering.partition = r.str()?.to_string(),
            "PeerCAPems" => peering.peer_ca_pems = owned_list(r)?,
            "PeerID" => peering.peer_id = r.str()?.to_string(),
            "PeerServerAddresses" => peering.peer_server_addresses = owned_list(r)?,
            "PeerServerName" => peering.peer_server_name = r.str()?.to_string(),
            "Remote" => peering.remote = read_remote(r)?,
            "State" => peering.state = state_of(r.str()?)?,
            "StreamStatus" => peering.stream_status = read_stream_status(r)?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(peering)
}

fn read_remote(r: &mut Reader) -> Result<PeeringRemote, WireError> {
    let mut remote = PeeringRemote::default();
    each_field(r, |name, r| {
        match name {
            "Datacenter" => remote.datacenter = r.str()?.to_string(),
            "Partition" => remote.partition = r.str()?.to_string(),
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(remote)
}

fn read_stream_status(r: &mut Reader) -> Result<StreamStatus, WireError> {
    let mut status = StreamStatus::default();
    each_field(r, |name, r| {
        match name {
            "ExportedServices" => status.exported_services = owned_list(r)?,
            "ImportedServices" => status.imported_services = owned_list(r)?,
            "LastHeartbeat" => status.last_heartbeat = optional_text(r)?,
            "LastReceive" => status.last_receive = optional_text(r)?,
            "LastSend" => status.last_send = optional_text(r)?,
            _ => return Ok(false),
        }
        Ok(true)
    })?;
    Ok(status)
}

/// `Peering.Read`'s reply: `{Peering}` (nil when there is none) and `QueryMeta`.
pub fn encode_read_reply(meta: &QueryMeta, peering: Option<&Peering>) -> Vec<u8> {
    let mut w = Writer::new();
    meta.write_reply(&mut w, &["Peering"], |_, w| match peering {
        Some(peering) => write_peering(w, peering),
        None => w.nil(),
    });
    w.into_inner()
}

/// Reads `Peering.Read`'s reply.
pub fn decode_read_reply(body: &[u8]) -> Result<(QueryMeta, Option<Peering>), WireError> {
    let mut peering = None;
    let meta = read_reply(body, |name, r| {
        if name != "Peering" {
            return Ok(false);
        }
        if !r.try_nil()? {
            peering = Some(read_peering(r)?);
        }
        Ok(true)
    })?;
    Ok((meta, peering))
}

/// `Peering.List`'s reply: `{Peerings}` and `QueryMeta`.
pub fn encode_list_reply<'p>(
    meta: &QueryMeta,
    peerings: impl ExactSizeIterator<Item = &'p Peering>,
) -> Vec<u8> {
    let mut w = Writer::new();
    let mut peerings = Some(peerings);
    meta.write_reply(&mut w, &["Peerings"], |_, w| {
        let peerings = peerings.take().expect("one Peerings field");
        w.array_len(peerings.len());
        for peering in peerings {
            write_peering(w, peering);
        }
    });
    w.into_inner()
}

/// Reads `Peering.List`'s reply.
pub fn decode_list_reply(body: &[u8]) -> Result<(QueryMeta, Vec<Peering>), WireError> {
    let mut peerings = Vec::new();
    let meta = read_reply(body, |name, r| {
        if name != "Peerings" {
            return Ok(false);
        }
        if r.try_nil()? {
            return Ok(true);
        }
        let count = r.array_len()?;
        for _ in 0..count {
            peerings.push(read_peering(r)?);
        }
        Ok(true)
    })?;
    Ok((meta, peerings))
}

/// One exported service and who may import it (Consul's `ResolvedExportedService` with its
/// `ResolvedConsumers`): peers and partitions, sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportedService {
    pub service: String,
    pub peers: Vec<String>,
    pub partitions: Vec<String>,
}

/// `IndexedResolvedExportedServiceList`: `{Services: [{Consumers: {Partitions, Peers},
/// Service}]}` and `QueryMeta`.
pub fn encode_exported_services(meta: &QueryMeta, services: &[ExportedService]) -> Vec<u8> {
    let mut w = Writer::new();
    meta.write_reply(&mut w, &["Services"], |_, w| {
        if services.is_empty() {
            w.nil();
            return;
        }
        w.array_len(services.len());
        for service in services {
            let mut f = Fields::new(w, 2);
            {
                let w = f.field("Consumers");
                let mut c = Fields::new(w, 2);
                super::write_string_list(
                    c.field("Partitions"),
                    service.partitions.iter().map(String::as_str),
                    true,
                );
                super::write_string_list(
                    c.field("Peers"),
                    service.peers.iter().map(String::as_str),
                    true,
                );
                c.finish();
            }
            f.field("Service").str(&service.service);
            f.finish();
        }
    });
    w.into_inner()
}

/// Reads an `IndexedResolvedExportedServiceList`.
pub fn decode_exported_services(
    body: &[u8],
) -> Result<(QueryMeta, Vec<ExportedService>), WireError> {
    let mut services = Vec::new();
    let meta = read_reply(body, |name, r| {
        if name != "Services" {
            return Ok(false);
        }
        if r.try_nil()? {
            return Ok(true);
        }
        let count = r.array_len()?;
        for _ in 0..count {
            let mut service = ExportedService::default();
            each_field(r, |name, r| {
                match name {
                    "Service" => service.service = r.str()?.to_string(),
                    "Consumers" => each_field(r, |name, r| {
                        match name {
                            "Peers" => service.peers = owned_list(r)?,
                            "Partitions" => service.partitions = owned_list(r)?,
                            _ => return Ok(false),
                        }
                        Ok(true)
                    })?,
                    _ => return Ok(false),
                }
                Ok(true)
            })?;
            services.push(service);
        }
        Ok(true)
    })?;
    Ok((meta, services))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Peering {
        Peering {
            id: "id-1".into(),
            name: "cluster-b".into(),
            meta: [("env".to_string(), "test".to_string())].into(),
            state: PeeringState::Establishing,
            peer_id: "peer-1".into(),
            peer_ca_pems: vec!["PEM".into()],
            peer_server_name: "server.dc2.peering.example".into(),
            peer_server_addresses: vec!["10.0.0.1:8503".into()],
            manual_server_addresses: vec!["lb:8503".into()],
            stream_status: StreamStatus {
                imported_services: vec!["web".into()],
                exported_services: Vec::new(),
                last_heartbeat: Some("2026-12-07T12:00:00Z".into()),
                last_receive: None,
                last_send: None,
            },
            remote: PeeringRemote {
                datacenter: "dc2".into(),
                partition: "default".into(),
            },
            deleted_at: None,
            create_index: 7,
            modify_index: 9,
            ..Peering::default()
        }
    }

    #[test]
    fn a_peering_crosses_whole() {
        let meta = QueryMeta {
            index: 9,
            known_leader: true,
            consistency_level: "leader",
            ..QueryMeta::default()
        };
        let row = sample();
        let (read_meta, read) = decode_read_reply(&encode_read_reply(&meta, Some(&row))).unwrap();
        assert_eq!((read_meta, read), (meta.clone(), Some(row.clone())));
        let (_, none) = decode_read_reply(&encode_read_reply(&meta, None)).unwrap();
        assert_eq!(none, None);
        let (_, list) =
            decode_list_reply(&encode_list_reply(&meta, [&row, &row].into_iter())).unwrap();
        assert_eq!(list, vec![row.clone(), row]);
    }

    #[test]
    fn requests_cross_whole() {
        let token = GenerateTokenRequest {
            datacenter: "dc1",
            meta: vec![("env", "test")],
            partition: "",
            peer_name: "b",
            server_external_addresses: vec!["lb:8503"],
            token: "secret",
        };
        assert_eq!(
            GenerateTokenRequest::decode(&token.encode()).unwrap(),
            token
        );
        let establish = EstablishRequest {
            datacenter: "dc2",
            peer_name: "a",
            peering_token: "e30=",
            token: "t",
            ..EstablishRequest::default()
        };
        assert_eq!(
            EstablishRequest::decode(&establish.encode()).unwrap(),
            establish
        );
        let read = PeeringNameRequest {
            datacenter: "dc1",
            name: "b",
            partition: "",
            options: QueryOptions {
                token: "t",
                min_query_index: 4,
                ..QueryOptions::default()
            },
        };
        assert_eq!(PeeringNameRequest::decode(&read.encode()).unwrap(), read);
        let write = read.encode_write();
        let delete = PeeringNameRequest::decode(&write).unwrap();
        assert_eq!((delete.name, delete.options.token), ("b", "t"));
        let list = PartitionRequest {
            datacenter: "dc2",
            ..PartitionRequest::default()
        };
        assert_eq!(PartitionRequest::decode(&list.encode()).unwrap(), list);
        assert_eq!(
            decode_token_reply(&encode_token_reply("abc")).unwrap(),
            "abc"
        );
    }

    #[test]
    fn exported_services_cross_whole() {
        let services = vec![ExportedService {
            service: "web".into(),
            peers: vec!["a".into(), "b".into()],
            partitions: Vec::new(),
        }];
        let meta = QueryMeta {
            index: 3,
            ..QueryMeta::default()
        };
        let (read_meta, read) =
            decode_exported_services(&encode_exported_services(&meta, &services)).unwrap();
        assert_eq!((read_meta.index, read), (3, services));
        let (_, none) = decode_exported_services(&encode_exported_services(&meta, &[])).unwrap();
        assert!(none.is_empty());
    }

    #[test]
    fn an_unknown_state_is_refused() {
        let mut w = Writer::new();
        let mut f = Fields::new(&mut w, 1);
        f.field("State").str("SIDEWAYS");
        f.finish();
        assert!(read_peering(&mut Reader::new(&w.into_inner())).is_err());
    }
}
