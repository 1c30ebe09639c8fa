//! How a WAN pool federated through mesh gateways reaches the servers of other
//! datacenters (Consul's `wanfed` transport, the sending side).
//!
//! The pool's core addresses its outputs by socket address. The driver asks
//! [`GatewayRoutes::route`] which member an address belongs to: the member list gives
//! each WAN member's name, `<node>.<datacenter>`, and a join hint gives a name to an
//! address that is not a member yet (a secondary joins its primary through
//! `*.<primary>/<placeholder>`, any server of the primary). A member of this datacenter,
//! or an address with no name, is reached directly as before; a member of another
//! datacenter through a gateway the locator picked. A ping's sender that is not a member
//! (yet) is named by the ping itself, which the core remembers (`Gossip::sender_name`), so
//! its ack finds the way back as memberlist's does:
//!
//! - packets go, length-prefixed, over one pooled native TLS connection per member
//!   (ALPN `consul/wan-gossip/packet`), opened on the first packet, closed after
//!   [`wanfed::PACKET_IDLE_MAX`] without one or on the first failure; packets queued
//!   while it dials are bounded by [`PACKET_QUEUE_MAX`], and beyond it, as for UDP, lost;
//! - a stream (push/pull, a join) gets a connection of its own (ALPN
//!   `consul/wan-gossip/stream`), which the driver then reads as a TCP stream.
//!
//! The receiving server relays both into its own pool (`shard::wanfed`).
//!
//! Invariants: touched only from the driver's thread; at most
//! [`PACKET_CONNECTIONS_MAX`] packet connections; a name maps to at most one live
//! connection, removed from the map by its task before the task ends.

use crate::proto::rpc_select::alpn;
use crate::shard::runtime::Shared as RuntimeShared;
use crate::shard::wanfed;
use crate::shard::wanfed::GatewayStream;
use monoio::io::{AsyncWriteRent, AsyncWriteRentExt};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

/// Packets queued for one member's connection (while it dials, say) before more are lost.
pub const PACKET_QUEUE_MAX: usize = 64;
/// Join addresses remembered with the names they were given.
pub const HINTS_MAX: usize = 256;
/// Packet connections kept open at once, one per member of another datacenter.
pub const PACKET_CONNECTIONS_MAX: usize = 512;

/// Picks the mesh gateway that carries traffic to a datacenter (the router's locator).
pub type PickGateway = Box<dyn Fn(&str) -> Option<SocketAddr> + Send>;

/// What the driver needs to send through gateways.
pub struct GatewaySettings {
    pub local_datacenter: String,
    pub pick_gateway: PickGateway,
    /// The agent's runtime state: its TLS configuration and bind address.
    pub runtime: Arc<RuntimeShared>,
}

/// A member of another datacenter, as a gateway is asked for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The member's WAN pool name, which keys its packet connection.
    pub name: String,
    /// Its node name (`*` for any server).
    pub node: String,
    pub datacenter: String,
}

/// The sending side's state; see the module documentation.
pub struct GatewayRoutes {
    settings: GatewaySettings,
    /// WAN members' names by address, refreshed from the member list.
    names: RefCell<HashMap<SocketAddr, String>>,
    /// Names given with join addresses (`name/address`), for addresses not yet members.
    hints: RefCell<HashMap<SocketAddr, String>>,
    /// Each member's packet connection, by member name.
    packets: RefCell<HashMap<String, PacketConnection>>,
    /// The number the next packet connection gets.
    next_connection: Cell<u64>,
}

/// A packet connection's number (which tells a replaced one from its successor) and the
/// queue its task drains.
type PacketConnection = (u64, flume::Sender<Vec<u8>>);

/// Splits a WAN pool name `<node>.<datacenter>` (Consul's `SplitNodeName`); the
/// datacenter is what follows the last dot.
pub fn split_wan_name(name: &str) -> Option<(&str, &str)> {
    let (node, datacenter) = name.rsplit_once('.')?;
    (!node.is_empty() && !datacenter.is_empty()).then_some((node, datacenter))
}

impl GatewayRoutes {
    pub fn new(settings: GatewaySettings) -> GatewayRoutes {
        GatewayRoutes {
            settings,
            names: RefCell::default(),
            hints: RefCell::default(),
            packets: RefCell::default(),
            next_connection: Cell::new(0),
        }
    }

    /// Replaces the member names with the pool's current members.
    pub fn set_members<'m>(&self, members: impl Iterator<Item = (SocketAddr, &'m str)>) {
        let names = members
            .map(|(addr, name)| (addr, name.to_string()))
            .collect();
        *self.names.borrow_mut() = names;
    }

    /// Remembers that `addr` stands for `name` (the latest join naming it says). At most
    /// [`HINTS_MAX`]: a full map starts afresh, which only costs joins in flight their route.
    pub fn add_hint(&self, addr: SocketAddr, name: String) {
        let mut hints = self.hints.borrow_mut();
        if hints.len() >= HINTS_MAX && !hints.contains_key(&addr) {
            hints.clear();
        }
        hints.insert(addr, name);
        debug_assert!(hints.len() <= HINTS_MAX);
    }

    /// The member of another datacenter at `to`; `None` to send directly. `sender` is the
    /// name the core learned from a ping sent from `to` (a sender not yet a member, say
    /// right after this server restarted), used when neither a member nor a hint names it.
    pub fn route(&self, to: SocketAddr, sender: Option<&str>) -> Option<Route> {
        let names = self.names.borrow();
        let hints = self.hints.borrow();
        let name = names
            .get(&to)
            .or_else(|| hints.get(&to))
            .map(String::as_str)
            .or(sender)?;
        let (node, datacenter) = split_wan_name(name)?;
        if datacenter == self.settings.local_datacenter {
            return None;
        }
        Some(Route {
            name: name.to_string(),
            node: node.to_string(),
            datacenter: datacenter.to_string(),
        })
    }

    /// Queues `packet` on `route`'s connection, opening one if there is none. A packet
    /// over the size limit, over the queue bound or beyond the connection bound is lost,
    /// as a datagram would be.
    pub fn send_packet(self: &Rc<Self>, route: Route, packet: &[u8]) {
        let Some(framed) = wanfed::frame_packet(packet) else {
            log::debug!(
                "wanfed: a {} byte packet to {} is too large",
                packet.len(),
                route.name
            );
            return;
        };
        let mut packets = self.packets.borrow_mut();
        let framed = match packets.get(&route.name) {
            Some((_, queue)) => match queue.try_send(framed) {
                Ok(()) => return,
                Err(flume::TrySendError::Full(_)) => return,
                // The connection's task ended without removing itself: replace it.
                Err(flume::TrySendError::Disconnected(framed)) => framed,
            },
            None => framed,
        };
        if packets.len() >= PACKET_CONNECTIONS_MAX && !packets.contains_key(&route.name) {
            log::debug!(
                "wanfed: {PACKET_CONNECTIONS_MAX} packet connections open; dropped a packet to {}",
                route.name
            );
            return;
        }
        let (queue, drained) = flume::bounded(PACKET_QUEUE_MAX);
        let queued = queue.try_send(framed);
        debug_assert!(queued.is_ok(), "a new queue takes its first packet");
        let number = self.next_connection.get() + 1;
        self.next_connection.set(number);
        packets.insert(route.name.clone(), (number, queue));
        debug_assert!(packets.len() <= PACKET_CONNECTIONS_MAX);
        drop(packets);
        monoio::spawn(self.clone().packet_connection(route, number, drained));
    }

    /// Dials `route` and writes its queued packets until the queue idles out or a write
    /// fails; then leaves the map, so the next packet dials again.
    async fn packet_connection(
        self: Rc<Self>,
        route: Route,
        number: u64,
        drained: flume::Receiver<Vec<u8>>,
    ) {
        if let Err(why) = self.write_packets(&route, &drained).await {
            log::debug!("wanfed: packets to {}: {why}", route.name);
        }
        // Only this task's own entry goes (with the queue still open, no sender has seen
        // it disconnected and replaced it, but the check keeps that true by construction).
        let mut packets = self.packets.borrow_mut();
        if packets.get(&route.name).is_some_and(|(n, _)| *n == number) {
            packets.remove(&route.name);
        }
    }

    async fn write_packets(
        &self,
        route: &Route,
        drained: &flume::Receiver<Vec<u8>>,
    ) -> Result<(), String> {
        let session = self.dial(route, alpn::WAN_GOSSIP_PACKET).await?;
        // The read half stays open: the receiver never writes, and a closed half would
        // end the connection.
        let (_unread, mut writer) = session.into_split();
        loop {
            let next = monoio::time::timeout(wanfed::PACKET_IDLE_MAX, drained.recv_async()).await;
            let Ok(Ok(framed)) = next else {
                return Ok(());
            };
            let (result, _) = writer.write_all(framed).await;
            result.map_err(|e| e.to_string())?;
            writer.flush().await.map_err(|e| e.to_string())?;
        }
    }

    /// Dials `route` for a stream and writes `request` on it; the caller reads the answer.
    pub async fn open_stream(
        &self,
        route: &Route,
        request: Vec<u8>,
    ) -> Result<GatewayStream, String> {
        let mut session = self.dial(route, alpn::WAN_GOSSIP_STREAM).await?;
        let (result, _) = session.write_all(request).await;
        result.map_err(|e| e.to_string())?;
        session.flush().await.map_err(|e| e.to_string())?;
        Ok(session)
    }

    async fn dial(&self, route: &Route, alpn: &str) -> Result<GatewayStream, String> {
        let Some(gateway) = (self.settings.pick_gateway)(&route.datacenter) else {
            return Err(format!(
                "no mesh gateway is known to reach datacenter {:?}",
                route.datacenter
            ));
        };
        let runtime = &self.settings.runtime;
        wanfed::dial_through_gateway(
            &runtime.tls,
            runtime.config.bind_addr,
            gateway,
            &route.node,
            &route.datacenter,
            alpn,
        )
        .await
        .map_err(|why| format!("through mesh gateway {gateway}: {why}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wan_names_split_at_the_last_dot() {
        assert_eq!(split_wan_name("s1.dc1"), Some(("s1", "dc1")));
        assert_eq!(split_wan_name("*.dc1"), Some(("*", "dc1")));
        assert_eq!(split_wan_name("web.east.dc2"), Some(("web.east", "dc2")));
        assert_eq!(split_wan_name("s1"), None);
        assert_eq!(split_wan_name(".dc1"), None);
        assert_eq!(split_wan_name("s1."), None);
    }
}
