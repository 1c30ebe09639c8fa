//! Resolution: a question (lowercased name, type) plus a catalog view → an [`Answer`], or the
//! decision to forward the question to a recursor, or to refuse it.
//!
//! Consul's semantics, name form by name form:
//! - services: instances whose aggregated health is passing, or warning unless
//!   `only_passing`; tag filter case-insensitive; A/AAAA per address family (a host-name
//!   address becomes a CNAME, used only when no instance has an address record); SRV with
//!   priority 1, the instance's weight for its health, and the target's address in the
//!   additional section (`<node>.node.<dc>.<domain>` for node addresses,
//!   `<hex>.addr.<dc>.<domain>` for service addresses); answers are shuffled per response;
//!   TTL from `service_ttl`.
//! - nodes: A/AAAA for the address, TXT from node metadata (answer for TXT/ANY, additional
//!   for A/AAAA when `enable_additional_node_meta_txt`); TTL `node_ttl`.
//! - `<hex>.addr`: the address itself (in the additional section if the type does not match).
//! - SOA and NS for any name in the domain answer the zone's SOA and name servers (the
//!   `consul` service's instances, else this agent), with glue.
//! - PTR: a node with that address, else a service instance with that address; else the
//!   recursors, else NXDOMAIN.
//! - `<svc>.service.<dc>`, `<node>.node.<dc>` for another datacenter: the same answers from
//!   that datacenter's rows, which the view fetches from its servers (never cached);
//!   `translate_wan_addrs` swaps in their WAN addresses.
//! - `<query>.query[.<dc>]`: the prepared query's execution (which may fail over to
//!   other datacenters), its `DNS.TTL` or the service's TTL, no further health filter.
//! - NXDOMAIN and NODATA carry the SOA in the authority section.

use super::answer::{Answer, Owner, Record, RecordData, Unit};
use super::name::{self, DomainUsed, Domains, Lookup};
use super::remote::{self, LookupResult};
use super::view::{CatalogView, Health, NodeRecord, ReadSet, ServiceInstance};
use crate::config::DnsConfig;
use crate::proto::dns::{rcode, rtype, WireName};
use arcstr::ArcStr;
use std::net::IpAddr;
use std::sync::Arc;

/// Most name servers listed for the zone, as Consul does.
pub const NAME_SERVERS_MAX: usize = 3;

/// The agent answering, for NS and SOA when the catalog lists no servers.
#[derive(Clone, Debug)]
pub struct LocalAgent {
    pub node_name: String,
    pub datacenter: String,
    pub address: IpAddr,
}

/// What to do with a question.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolution {
    Answer(Answer),
    /// Forward to the recursors.
    Recurse,
    /// Outside our domains with no recursor configured: REFUSED.
    Refused,
}

/// The parts of a service name form, borrowed from the parsed name.
struct ServiceFound<'n> {
    service: &'n str,
    tag: Option<&'n str>,
    datacenter: Option<&'n str>,
}

/// Everything resolution needs besides the catalog.
pub struct Resolver<'a> {
    pub config: &'a DnsConfig,
    pub domains: &'a Domains,
    pub local: &'a LocalAgent,
    /// SOA serial: Consul uses the current Unix time.
    pub serial: u32,
}

fn seconds(duration: std::time::Duration) -> u32 {
    duration.as_secs().min(u32::MAX as u64) as u32
}

fn wire(text: &str) -> Option<WireName> {
    WireName::from_dotted(text).ok()
}

impl Resolver<'_> {
    /// Resolves a question whose name is already lowercased: one step per name form.
    pub fn resolve(
        &self,
        name: &WireName,
        qtype: u16,
        view: &dyn CatalogView,
        reads: &mut ReadSet,
    ) -> Resolution {
        let parsed = name::parse(name, qtype, self.domains);
        let domain = parsed.domain;
        match parsed.lookup {
            Lookup::Outside => {
                if self.config.recursors.is_empty() {
                    Resolution::Refused
                } else {
                    Resolution::Recurse
                }
            }
            Lookup::Reverse(ip) => self.reverse(ip, view, reads),
            _ if qtype == rtype::SOA => Resolution::Answer(self.soa_answer(domain, view, reads)),
            _ if qtype == rtype::NS => {
                let mut answer = Answer::empty(rcode::NOERROR);
                answer.units = self.name_servers(domain, view, reads);
                Resolution::Answer(answer)
            }
            Lookup::Apex => Resolution::Answer(self.no_data(domain)),
            Lookup::Service {
                service,
                tag,
                datacenter,
            } => {
                let found = ServiceFound {
                    service: &service,
                    tag: tag.as_deref(),
                    datacenter: datacenter.as_deref(),
                };
                Resolution::Answer(self.service_lookup(found, qtype, domain, view, reads))
            }
            Lookup::Connect {
                service,
                datacenter,
            } => {
                // Another datacenter's servers answer for its proxies, as for its services
                // (Consul forwards the health query there).
                let lookup = remote::Lookup::connect_instances(&service);
                let instances = self.instances(view, datacenter.as_deref(), lookup, reads);
                self.healthy_instances_answer(instances, &service, qtype, domain)
            }
            Lookup::Ingress {
                service,
                datacenter,
            } => {
                // The ingress gateways' own addresses and ports, healthy ones first, as
                // Consul answers an ingress health query.
                let lookup = remote::Lookup::ingress_instances(&service);
                let instances = self.instances(view, datacenter.as_deref(), lookup, reads);
                self.healthy_instances_answer(instances, &service, qtype, domain)
            }
            Lookup::Node { node, datacenter } => Resolution::Answer(self.node_lookup(
                &node,
                datacenter.as_deref(),
                qtype,
                domain,
                view,
                reads,
            )),
            Lookup::PreparedQuery { query, datacenter } => Resolution::Answer(
                self.prepared_query_lookup(&query, datacenter, qtype, domain, view),
            ),
            Lookup::Addr(ip) => Resolution::Answer(self.addr_answer(ip, qtype, domain)),
            Lookup::Unsupported | Lookup::Invalid => Resolution::Answer(self.nx_domain(domain)),
        }
    }

    /// SOA for any name in the domain: the zone's SOA, its name servers in the authority
    /// section and their addresses as glue.
    fn soa_answer(
        &self,
        domain: DomainUsed,
        view: &dyn CatalogView,
        reads: &mut ReadSet,
    ) -> Answer {
        let mut answer = Answer::empty(rcode::NOERROR);
        answer.units.push(Unit {
            answer: self.soa(domain),
            extras: Vec::new(),
            extras_ttl: 0,
        });
        for unit in self.name_servers(domain, view, reads) {
            if let Some(glue) = unit.extras.first() {
                if let RecordData::Ns(target) = &unit.answer.data {
                    answer.additional.push(Record {
                        owner: Owner::Name(target.clone()),
                        ttl: unit.extras_ttl,
                        data: glue.clone(),
                    });
                }
            }
            answer.authority.push(unit.answer);
        }
        answer
    }

    /// `[tag.]<service>.service[.<dc>]`: the service's instances filtered by health and
    /// tag; NXDOMAIN when the datacenter cannot be asked.
    fn service_lookup(
        &self,
        found: ServiceFound<'_>,
        qtype: u16,
        domain: DomainUsed,
        view: &dyn CatalogView,
        reads: &mut ReadSet,
    ) -> Answer {
        let lookup = remote::Lookup::service_instances(found.service);
        let Some(instances) = self.instances(view, found.datacenter, lookup, reads) else {
            return self.nx_domain(domain);
        };
        let ttl = seconds(self.config.service_ttl(found.service));
        self.service_answer(
            found.tag,
            self.translated(instances),
            ttl,
            true,
            qtype,
            domain,
        )
    }

    /// `<node>.node[.<dc>]`: this datacenter's node from the view, another's from its
    /// servers; NXDOMAIN when there is none.
    fn node_lookup(
        &self,
        node: &str,
        datacenter: Option<&str>,
        qtype: u16,
        domain: DomainUsed,
        view: &dyn CatalogView,
        reads: &mut ReadSet,
    ) -> Answer {
        let record = match datacenter {
            Some(dc) if !self.is_local_datacenter(Some(dc)) => {
                let lookup = remote::Lookup::in_datacenter(dc, remote::Lookup::node(node));
                match view.elsewhere(&lookup) {
                    Some(LookupResult::Node(record)) => record,
                    _ => None,
                }
            }
            _ => view.node(node, reads),
        };
        match record {
            Some(record) => {
                let record = self.translated_node(record);
                self.node_answer(&record, qtype, domain)
            }
            None => self.nx_domain(domain),
        }
    }

    /// `<query>.query[.<dc>]`: the prepared query's execution, with its `DNS.TTL` or the
    /// service's; NXDOMAIN when the query is unknown or fails.
    fn prepared_query_lookup(
        &self,
        query: &str,
        datacenter: Option<String>,
        qtype: u16,
        domain: DomainUsed,
        view: &dyn CatalogView,
    ) -> Answer {
        let datacenter = datacenter.filter(|dc| !self.is_local_datacenter(Some(dc)));
        let lookup = remote::Lookup::prepared_query(query, datacenter.as_deref());
        match view.elsewhere(&lookup) {
            Some(LookupResult::Query(answer)) if answer.found => {
                let ttl = answer
                    .ttl_seconds
                    .unwrap_or_else(|| seconds(self.config.service_ttl(&answer.service)));
                // The query filtered health itself (`OnlyPassing`, ignored checks).
                self.service_answer(
                    None,
                    self.translated(answer.instances),
                    ttl,
                    false,
                    qtype,
                    domain,
                )
            }
            _ => self.nx_domain(domain),
        }
    }

    /// `<hex>.addr`: the address itself, in the answer when the type matches its family,
    /// else in the additional section with the SOA as authority.
    fn addr_answer(&self, ip: IpAddr, qtype: u16, domain: DomainUsed) -> Answer {
        let ttl = seconds(self.config.node_ttl);
        let data = match ip {
            IpAddr::V4(v4) => RecordData::A(v4),
            IpAddr::V6(v6) => RecordData::Aaaa(v6),
        };
        let matches = matches!(
            (ip, qtype),
            (IpAddr::V4(_), rtype::A) | (IpAddr::V6(_), rtype::AAAA) | (_, rtype::ANY)
        );
        let record = Record {
            owner: Owner::Question,
            ttl,
            data,
        };
        let mut answer = Answer::empty(rcode::NOERROR);
        if matches {
            answer.units.push(Unit {
                answer: record,
                extras: Vec::new(),
                extras_ttl: 0,
            });
        } else {
            answer.additional.push(record);
            answer.authority.push(self.soa(domain));
        }
        answer
    }

    /// With `translate_wan_addrs`, another datacenter's instances carry their WAN
    /// addresses: the node's `wan` tagged address, the service's own `wan` one.
    fn translated(&self, mut instances: Vec<ServiceInstance>) -> Vec<ServiceInstance> {
        if !self.config.translate_wan_addrs {
            return instances;
        }
        for instance in &mut instances {
            if instance
                .node
                .datacenter
                .eq_ignore_ascii_case(&self.local.datacenter)
            {
                continue;
            }
            instance.node = self.translated_node(instance.node.clone());
            if let Some((_, wan)) = instance
                .tagged_addresses
                .iter()
                .find(|(t, _)| &**t == "wan")
            {
                instance.address = wan.clone();
            }
        }
        instances
    }

    fn translated_node(&self, node: Arc<NodeRecord>) -> Arc<NodeRecord> {
        if !self.config.translate_wan_addrs
            || node.datacenter.eq_ignore_ascii_case(&self.local.datacenter)
        {
            return node;
        }
        match node.tagged_address("wan").filter(|a| !a.is_empty()) {
            Some(wan) => {
                let mut translated = (*node).clone();
                translated.address = ArcStr::from(wan);
                Arc::new(translated)
            }
            None => node,
        }
    }

    /// The healthy ones of `instances` (found here, or in another datacenter through its
    /// servers) as an answer with the service's TTL; NXDOMAIN when that datacenter could not
    /// be asked (`None`).
    fn healthy_instances_answer(
        &self,
        instances: Option<Vec<ServiceInstance>>,
        service: &str,
        qtype: u16,
        domain: DomainUsed,
    ) -> Resolution {
        let Some(instances) = instances else {
            return Resolution::Answer(self.nx_domain(domain));
        };
        let ttl = seconds(self.config.service_ttl(service));
        Resolution::Answer(self.service_answer(
            None,
            self.translated(instances),
            ttl,
            true,
            qtype,
            domain,
        ))
    }

    /// The instances an instance lookup (a local form) finds: in this datacenter's view,
    /// or, for another datacenter, from that datacenter's servers. `None` when the other
    /// datacenter's answer is not at hand: the view noted the lookup, and the answer built
    /// meanwhile is discarded.
    fn instances(
        &self,
        view: &dyn CatalogView,
        datacenter: Option<&str>,
        lookup: remote::Lookup,
        reads: &mut ReadSet,
    ) -> Option<Vec<ServiceInstance>> {
        let result = match datacenter {
            Some(dc) if !self.is_local_datacenter(Some(dc)) => {
                view.elsewhere(&remote::Lookup::in_datacenter(dc, lookup))?
            }
            _ => lookup.run(view, reads),
        };
        match result {
            LookupResult::Instances(instances) => Some(instances),
            _ => None,
        }
    }

    fn is_local_datacenter(&self, datacenter: Option<&str>) -> bool {
        datacenter.is_none_or(|dc| dc.eq_ignore_ascii_case(&self.local.datacenter))
    }

    fn domain_text(&self, used: DomainUsed) -> String {
        self.domains.text(used)
    }

    /// The zone's SOA record, as Consul writes it.
    pub fn soa(&self, used: DomainUsed) -> Record {
        let domain = self.domain_text(used);
        let soa = &self.config.soa;
        Record {
            owner: Owner::Name(wire(&domain).unwrap_or_default()),
            ttl: soa.min_ttl_seconds,
            data: RecordData::Soa {
                mname: wire(&format!("ns.{domain}")).unwrap_or_default(),
                rname: wire(&format!("hostmaster.{domain}")).unwrap_or_default(),
                serial: self.serial,
                refresh: soa.refresh_seconds,
                retry: soa.retry_seconds,
                expire: soa.expire_seconds,
                minimum: soa.min_ttl_seconds,
            },
        }
    }

    fn nx_domain(&self, used: DomainUsed) -> Answer {
        let mut answer = Answer::empty(rcode::NXDOMAIN);
        answer.authority.push(self.soa(used));
        answer
    }

    fn no_data(&self, used: DomainUsed) -> Answer {
        let mut answer = Answer::empty(rcode::NOERROR);
        answer.authority.push(self.soa(used));
        answer
    }

    fn node_fqdn(&self, node: &str, datacenter: &str, used: DomainUsed) -> Option<WireName> {
        wire(&format!(
            "{}.node.{}.{}",
            node.to_ascii_lowercase(),
            datacenter,
            self.domain_text(used)
        ))
    }

    /// NS units for the zone: up to three `consul` service instances, else this agent.
    fn name_servers(
        &self,
        used: DomainUsed,
        view: &dyn CatalogView,
        reads: &mut ReadSet,
    ) -> Vec<Unit> {
        let ttl = seconds(self.config.node_ttl);
        let owner = Owner::Name(wire(&self.domain_text(used)).unwrap_or_default());
        let mut servers: Vec<(String, String, IpAddr)> = Vec::new();
        for instance in view.service_instances("consul", reads) {
            if instance.health == Health::Critical {
                continue;
            }
            let Ok(ip) = instance.node.address.parse::<IpAddr>() else {
                continue;
            };
            if servers.iter().any(|(n, _, _)| n == &*instance.node.name) {
                continue;
            }
            servers.push((
                instance.node.name.to_string(),
                instance.node.datacenter.to_string(),
                ip,
            ));
            if servers.len() == NAME_SERVERS_MAX {
                break;
            }
        }
        if servers.is_empty() {
            servers.push((
                self.local.node_name.clone(),
                self.local.datacenter.clone(),
                self.local.address,
            ));
        }
        servers
            .into_iter()
            .filter_map(|(node, dc, ip)| {
                let target = self.node_fqdn(&node, &dc, used)?;
                Some(Unit {
                    answer: Record {
                        owner: owner.clone(),
                        ttl,
                        data: RecordData::Ns(target),
                    },
                    extras: vec![address_data(ip)],
                    extras_ttl: ttl,
                })
            })
            .collect()
    }

    fn reverse(
        &self,
        ip: Option<IpAddr>,
        view: &dyn CatalogView,
        reads: &mut ReadSet,
    ) -> Resolution {
        let used = DomainUsed::Primary;
        let target = ip.and_then(|ip| {
            if let Some(node) = view.node_by_address(ip, reads) {
                return self.node_fqdn(&node.name, &node.datacenter, used);
            }
            let service = view.service_by_address(ip, reads)?;
            wire(&format!(
                "{}.service.{}.{}",
                service.to_ascii_lowercase(),
                self.local.datacenter,
                self.domain_text(used)
            ))
        });
        match target {
            Some(target) => {
                let mut answer = Answer::empty(rcode::NOERROR);
                answer.units.push(Unit {
                    answer: Record {
                        owner: Owner::Question,
                        ttl: 0,
                        data: RecordData::Ptr(target),
                    },
                    extras: Vec::new(),
                    extras_ttl: 0,
                });
                Resolution::Answer(answer)
            }
            None if !self.config.recursors.is_empty() => Resolution::Recurse,
            None => Resolution::Answer(self.nx_domain(used)),
        }
    }

    fn healthy(&self, instance: &ServiceInstance) -> bool {
        match instance.health {
            Health::Passing => true,
            Health::Warning => !self.config.only_passing,
            Health::Critical => false,
        }
    }

    /// The answer about `instances` (those healthy by the DNS settings when
    /// `filter_health`, else all; with `tag` when one is asked) with records of `ttl`.
    fn service_answer(
        &self,
        tag: Option<&str>,
        instances: Vec<ServiceInstance>,
        ttl: u32,
        filter_health: bool,
        qtype: u16,
        used: DomainUsed,
    ) -> Answer {
        let selected: Vec<&ServiceInstance> = instances
            .iter()
            .filter(|i| !filter_health || self.healthy(i))
            .filter(|i| tag.is_none_or(|t| i.tags.iter().any(|x| x.eq_ignore_ascii_case(t))))
            .collect();
        if selected.is_empty() {
            return self.nx_domain(used);
        }
        let mut answer = Answer::empty(rcode::NOERROR);
        answer.shuffle = true;
        if qtype == rtype::SRV {
            let mut seen: Vec<(&str, &str, u16)> = Vec::new();
            for instance in &selected {
                let key = (&*instance.node.name, &*instance.address, instance.port);
                if seen.contains(&key) {
                    continue;
                }
                seen.push(key);
                if let Some(unit) = self.srv_unit(instance, ttl, used) {
                    answer.units.push(unit);
                }
            }
        } else {
            let mut cname: Option<Unit> = None;
            for instance in &selected {
                let Some(data) = instance_address_record(instance, qtype) else {
                    continue;
                };
                let unit = Unit {
                    answer: Record {
                        owner: Owner::Question,
                        ttl,
                        data,
                    },
                    extras: Vec::new(),
                    extras_ttl: 0,
                };
                if matches!(unit.answer.data, RecordData::Cname(_)) {
                    cname.get_or_insert(unit);
                    continue;
                }
                if answer.units.iter().any(|u| u.answer == unit.answer) {
                    continue;
                }
                answer.units.push(unit);
                if self.config.a_record_limit > 0
                    && answer.units.len() >= self.config.a_record_limit
                {
                    break;
                }
            }
            if answer.units.is_empty() {
                if let Some(unit) = cname {
                    answer.units.push(unit);
                    answer.shuffle = false;
                }
            }
        }
        if answer.units.is_empty() {
            answer.authority.push(self.soa(used));
        }
        answer
    }

    fn srv_unit(&self, instance: &ServiceInstance, ttl: u32, used: DomainUsed) -> Option<Unit> {
        let weight = match instance.health {
            Health::Warning => instance.weight_warning,
            _ => instance.weight_passing,
        };
        let (target, extras) = if !instance.address.is_empty() {
            match instance.address.parse::<IpAddr>() {
                Ok(ip) => (
                    wire(&format!(
                        "{}.addr.{}.{}",
                        name::hex_address(ip),
                        instance.node.datacenter,
                        self.domain_text(used)
                    ))?,
                    vec![address_data(ip)],
                ),
                Err(_) => (wire(&instance.address)?, Vec::new()),
            }
        } else {
            match instance.node.address.parse::<IpAddr>() {
                Ok(ip) => (
                    self.node_fqdn(&instance.node.name, &instance.node.datacenter, used)?,
                    vec![address_data(ip)],
                ),
                Err(_) => (wire(&instance.node.address)?, Vec::new()),
            }
        };
        Some(Unit {
            answer: Record {
                owner: Owner::Question,
                ttl,
                data: RecordData::Srv {
                    priority: 1,
                    weight,
                    port: instance.port,
                    target,
                },
            },
            extras,
            extras_ttl: ttl,
        })
    }

    fn node_answer(&self, node: &NodeRecord, qtype: u16, used: DomainUsed) -> Answer {
        let ttl = seconds(self.config.node_ttl);
        let mut answer = Answer::empty(rcode::NOERROR);
        let wants_address = matches!(qtype, rtype::A | rtype::AAAA | rtype::ANY);
        if wants_address {
            if let Some(data) = node_address_record(node, qtype) {
                answer.units.push(Unit {
                    answer: Record {
                        owner: Owner::Question,
                        ttl,
                        data,
                    },
                    extras: Vec::new(),
                    extras_ttl: 0,
                });
            }
        }
        let meta = node_meta_txt(node);
        if qtype == rtype::TXT || qtype == rtype::ANY {
            for data in meta {
                answer.units.push(Unit {
                    answer: Record {
                        owner: Owner::Question,
                        ttl,
                        data,
                    },
                    extras: Vec::new(),
                    extras_ttl: 0,
                });
            }
        } else if wants_address && self.config.enable_additional_node_meta_txt {
            for data in meta {
                answer.additional.push(Record {
                    owner: Owner::Question,
                    ttl,
                    data,
                });
            }
        }
        if answer.units.is_empty() {
            answer.authority.push(self.soa(used));
        }
        answer
    }
}

fn address_data(ip: IpAddr) -> RecordData {
    match ip {
        IpAddr::V4(v4) => RecordData::A(v4),
        IpAddr::V6(v6) => RecordData::Aaaa(v6),
    }
}

/// The address record for `address` in the family `qtype` asks for, trying the tagged
/// `lan_ipv4` / `lan_ipv6` address when the main one is of the other family; a host name
/// becomes a CNAME.
fn address_record(address: &str, tagged: &[(ArcStr, ArcStr)], qtype: u16) -> Option<RecordData> {
    let tagged_ip = |tag: &str| -> Option<IpAddr> {
        tagged
            .iter()
            .find(|(t, _)| &**t == tag)
            .and_then(|(_, a)| a.parse().ok())
    };
    match address.parse::<IpAddr>() {
        Ok(ip) => match (qtype, ip) {
            (rtype::A, IpAddr::V4(v4)) => Some(RecordData::A(v4)),
            (rtype::AAAA, IpAddr::V6(v6)) => Some(RecordData::Aaaa(v6)),
            (rtype::ANY, ip) => Some(address_data(ip)),
            (rtype::A, IpAddr::V6(_)) => match tagged_ip("lan_ipv4") {
                Some(IpAddr::V4(v4)) => Some(RecordData::A(v4)),
                _ => None,
            },
            (rtype::AAAA, IpAddr::V4(_)) => match tagged_ip("lan_ipv6") {
                Some(IpAddr::V6(v6)) => Some(RecordData::Aaaa(v6)),
                _ => None,
            },
            _ => None,
        },
        Err(_) if matches!(qtype, rtype::A | rtype::AAAA | rtype::ANY) => {
            WireName::from_dotted(address).ok().map(RecordData::Cname)
        }
        Err(_) => None,
    }
}

fn instance_address_record(instance: &ServiceInstance, qtype: u16) -> Option<RecordData> {
    if instance.address.is_empty() {
        address_record(
            &instance.node.address,
            &instance.node.tagged_addresses,
            qtype,
        )
    } else {
        address_record(&instance.address, &instance.tagged_addresses, qtype)
    }
}

fn node_address_record(node: &NodeRecord, qtype: u16) -> Option<RecordData> {
    address_record(&node.address, &node.tagged_addresses, qtype)
}

/// Node metadata as TXT strings: `key=value` escaped per RFC 1464, or the bare value for
/// keys starting with `rfc1035-`, as Consul writes them.
fn node_meta_txt(node: &NodeRecord) -> Vec<RecordData> {
    let mut meta: Vec<&(ArcStr, ArcStr)> = node.meta.iter().collect();
    meta.sort();
    meta.into_iter()
        .map(|(key, value)| {
            let text = if key.to_ascii_lowercase().starts_with("rfc1035-") {
                value.to_string()
            } else {
                rfc1464(key, value)
            };
            RecordData::Txt(vec![text.into_bytes()])
        })
        .collect()
}

fn rfc1464(key: &str, value: &str) -> String {
    let mut escaped = key.replace('`', "``").replace('=', "`=");
    let leading = escaped.len() - escaped.trim_start_matches(' ').len();
    let trailing = escaped.len() - escaped.trim_end_matches(' ').len();
    if leading > 0 || trailing > 0 {
        let core = escaped.trim_matches(' ').to_string();
        escaped = format!("{}{}{}", "` ".repeat(leading), core, "` ".repeat(trailing));
    }
    format!("{escaped}={}", value.replace('`', "``"))
}
