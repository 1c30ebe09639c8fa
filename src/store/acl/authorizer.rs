//! The compiled authorizer: a token's effective policies merged into one lookup structure
//! that answers "may this token do X to Y" with Consul's semantics.
//!
//! Compilation ([`Authorizer::compile`]) merges every policy's rules per resource kind and
//! segment with Consul's precedence (for the same kind, segment and exact/prefix form: deny
//! beats write beats list beats read), then builds per kind a hash map of exact rules and a
//! compressed prefix tree of all rules. A check then costs one hash lookup and, when no exact
//! rule matches, one walk down the tree along the name's bytes, keeping the deepest prefix rule
//! passed — Consul's "exact beats the longest prefix". Neither allocates. Decisions that look
//! at every rule (`service_read_all`, `intention_write("*")`, …) are computed once at compile.
//!
//! A rule's decision is final when it exists (an explicit deny is never overridden by the
//! default); where no rule matches, the default policy decides, except that a default of
//! `allow` never grants `acl:*` or snapshots (Consul's `allowAll` authorizer). `mesh` and
//! `peering` fall back to `operator` when unset.
//!
//! Denials carry what Consul's error names, [`Denial::message`] renders
//! `Permission denied: token with AccessorID '…' lacks permission 'key:read' on "app/x"`.

use super::rules::{Access, GlobalKind, PolicyRules, SegmentKind};
use ahash::AHashMap;
use std::collections::BTreeMap;

/// What one authorizer layer says about a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny,
    /// No rule applies: defer to the default policy.
    Default,
}

/// `acl.default_policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum DefaultPolicy {
    Allow,
    Deny,
}

/// The resource names Consul's permission errors use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Resource {
    Acl,
    Agent,
    Event,
    Intention,
    Key,
    Keyring,
    Mesh,
    Node,
    Operator,
    Peering,
    Query,
    Service,
    Session,
}

impl Resource {
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Acl => "acl",
            Resource::Agent => "agent",
            Resource::Event => "event",
            Resource::Intention => "intention",
            Resource::Key => "key",
            Resource::Keyring => "keyring",
            Resource::Mesh => "mesh",
            Resource::Node => "node",
            Resource::Operator => "operator",
            Resource::Peering => "peering",
            Resource::Query => "query",
            Resource::Service => "service",
            Resource::Session => "session",
        }
    }
}

/// Why a request was refused: the permission it lacked and on what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Denial<'a> {
    pub resource: Resource,
    pub access: Access,
    /// The segment checked (`None` for global permissions such as `operator:read`).
    pub name: Option<&'a str>,
}

impl Denial<'_> {
    /// `key:read`.
    pub fn permission(&self) -> String {
        format!("{}:{}", self.resource.as_str(), self.access.as_str())
    }

    /// Consul's error text; `accessor_id` is `None` when the token is not known by accessor.
    pub fn message(&self, accessor_id: Option<&str>) -> String {
        let who = match accessor_id {
            Some(id) => format!("token with AccessorID '{id}'"),
            None => "provided token".to_string(),
        };
        let mut text = format!(
            "Permission denied: {who} lacks permission '{}'",
            self.permission()
        );
        if let Some(name) = self.name.filter(|n| !n.is_empty()) {
            text.push_str(&format!(" on \"{name}\""));
        }
        text
    }
}

/// The result of every check: `Ok` when allowed.
pub type Check<'a> = Result<(), Denial<'a>>;

/// Index of each segment table in [`Authorizer::tables`]: the seven rule kinds plus the
/// intentions table derived from service rules.
const INTENTION_TABLE: usize = 7;
const TABLE_COUNT: usize = 8;

/// Consul's enforcement of one rule against the access a request needs.
fn enforce(rule: Access, required: Access) -> Decision {
    let allowed = match rule {
        Access::Write => true,
        Access::List => matches!(required, Access::List | Access::Read),
        Access::Read => required == Access::Read,
        Access::Deny => false,
    };
    if allowed {
        Decision::Allow
    } else {
        Decision::Deny
    }
}

/// Rules of one kind merged by segment.
#[derive(Clone, Copy, Debug, Default)]
struct MergedLeaf {
    exact: Option<Access>,
    prefix: Option<Access>,
    /// Service rules only: explicit `intentions` levels, merged like the policy levels.
    exact_intentions: Option<Access>,
    prefix_intentions: Option<Access>,
}

fn merge(slot: &mut Option<Access>, access: Option<Access>) {
    if let Some(access) = access {
        if access.takes_precedence_over(*slot) {
            *slot = Some(access);
        }
    }
}

/// A service rule's intentions level when the policy names none: read for read or write
/// rules, deny otherwise (Consul's `loadRules`).
fn derived_intentions(policy: Access) -> Access {
    match policy {
        Access::Read | Access::Write => Access::Read,
        _ => Access::Deny,
    }
}

/// One node of a compressed prefix tree over segment bytes.
#[derive(Clone, Debug)]
struct TreeNode {
    /// The bytes on the edge from the parent (empty for the root).
    label: Box<[u8]>,
    /// Child indexes, sorted by the first byte of their labels.
    children: Vec<u32>,
    exact: Option<Access>,
    prefix: Option<Access>,
    /// Some rule at or below this node grants less than write (for `key_write_prefix`).
    non_write_below: bool,
}

/// All rules of one kind, keyed by segment bytes. Node 0 is the root (the empty segment).
#[derive(Clone, Debug)]
struct PrefixTree {
    nodes: Vec<TreeNode>,
}

impl PrefixTree {
    fn new() -> PrefixTree {
        PrefixTree {
            nodes: vec![TreeNode {
                label: Box::new([]),
                children: Vec::new(),
                exact: None,
                prefix: None,
                non_write_below: false,
            }],
        }
    }

    fn child(&self, node: usize, byte: u8) -> Option<usize> {
        let children = &self.nodes[node].children;
        children
            .binary_search_by_key(&byte, |c| self.nodes[*c as usize].label[0])
            .ok()
            .map(|i| children[i] as usize)
    }

    fn insert(&mut self, path: &[u8], exact: Option<Access>, prefix: Option<Access>) {
        let mut node = 0usize;
        let mut rest = path;
        while !rest.is_empty() {
            let Some(child) = self.child(node, rest[0]) else {
                let index = self.nodes.len() as u32;
                self.nodes.push(TreeNode {
                    label: rest.into(),
                    children: Vec::new(),
                    exact: None,
                    prefix: None,
                    non_write_below: false,
                });
                self.add_child(node, index);
                node = index as usize;
                break;
            };
            let label = &self.nodes[child].label;
            let common = label.iter().zip(rest).take_while(|(a, b)| a == b).count();
            debug_assert!(common >= 1, "children are found by their first byte");
            if common < label.len() {
                // Split the edge: a new node takes the common part, the old child keeps the
                // remainder below it.
                let mid = self.nodes.len() as u32;
                let (head, tail) = label.split_at(common);
                let (head, tail): (Box<[u8]>, Box<[u8]>) = (head.into(), tail.into());
                self.nodes[child].label = tail;
                self.nodes.push(TreeNode {
                    label: head,
                    children: vec![child as u32],
                    exact: None,
                    prefix: None,
                    non_write_below: false,
                });
                let slot = self.nodes[node]
                    .children
                    .iter_mut()
                    .find(|c| **c as usize == child)
                    .expect("the split child hangs under this node");
                *slot = mid;
                node = mid as usize;
            } else {
                node = child;
            }
            rest = &rest[common..];
        }
        let target = &mut self.nodes[node];
        target.exact = exact;
        target.prefix = prefix;
    }

    fn add_child(&mut self, node: usize, index: u32) {
        let byte = self.nodes[index as usize].label[0];
        let position = self.nodes[node]
            .children
            .binary_search_by_key(&byte, |c| self.nodes[*c as usize].label[0])
            .expect_err("a new child's first byte is not taken");
        self.nodes[node].children.insert(position, index);
    }

    /// Fills `non_write_below` bottom-up, without recursion.
    fn finish(&mut self) {
        let mut order = Vec::with_capacity(self.nodes.len());
        let mut stack = vec![0u32];
        while let Some(node) = stack.pop() {
            order.push(node);
            stack.extend_from_slice(&self.nodes[node as usize].children);
        }
        debug_assert_eq!(order.len(), self.nodes.len(), "every node is reachable");
        for node in order.into_iter().rev() {
            let n = &self.nodes[node as usize];
            let own = n.exact.is_some_and(|a| a != Access::Write)
                || n.prefix.is_some_and(|a| a != Access::Write);
            let below = n
                .children
                .iter()
                .any(|c| self.nodes[*c as usize].non_write_below);
            self.nodes[node as usize].non_write_below = own || below;
        }
    }

    /// The deepest prefix rule whose segment is a prefix of `name` (inclusive).
    fn longest_prefix(&self, name: &[u8]) -> Option<Access> {
        let mut best = self.nodes[0].prefix;
        let mut node = 0usize;
        let mut rest = name;
        while let Some(&first) = rest.first() {
            let Some(child) = self.child(node, first) else {
                break;
            };
            let label = &self.nodes[child].label;
            if !rest.starts_with(label) {
                break;
            }
            rest = &rest[label.len()..];
            node = child;
            if let Some(access) = self.nodes[child].prefix {
                best = Some(access);
            }
        }
        best
    }

    /// Whether any rule whose segment starts with `prefix` grants less than write.
    fn non_write_under(&self, prefix: &[u8]) -> bool {
        let mut node = 0usize;
        let mut rest = prefix;
        loop {
            let Some(&first) = rest.first() else {
                return self.nodes[node].non_write_below;
            };
            let Some(child) = self.child(node, first) else {
                return false;
            };
            let label = &self.nodes[child].label;
            if rest.len() < label.len() {
                // The prefix ends inside this edge: everything below the child extends it.
                return label.starts_with(rest) && self.nodes[child].non_write_below;
            }
            if !rest.starts_with(label) {
                return false;
            }
            rest = &rest[label.len()..];
            node = child;
        }
    }

    fn heap_bytes(&self) -> usize {
        self.nodes
            .iter()
            .map(|n| std::mem::size_of::<TreeNode>() + n.label.len() + n.children.capacity() * 4)
            .sum()
    }
}

/// The compiled rules of one kind.
#[derive(Clone, Debug)]
struct SegmentTable {
    exact: AHashMap<Box<str>, Access>,
    tree: PrefixTree,
    /// No rule at all: every lookup is `Default` without touching the structures.
    empty: bool,
}

impl SegmentTable {
    fn build(leaves: &BTreeMap<String, MergedLeaf>) -> SegmentTable {
        let mut exact = AHashMap::with_capacity(leaves.len());
        let mut tree = PrefixTree::new();
        for (name, leaf) in leaves {
            if let Some(access) = leaf.exact {
                exact.insert(name.as_str().into(), access);
            }
            tree.insert(name.as_bytes(), leaf.exact, leaf.prefix);
        }
        tree.finish();
        SegmentTable {
            empty: leaves.is_empty(),
            exact,
            tree,
        }
    }

    /// Consul's `getPolicy`: the exact rule, else the longest prefix rule.
    #[inline]
    fn lookup(&self, name: &str) -> Option<Access> {
        if self.empty {
            return None;
        }
        if !self.exact.is_empty() {
            if let Some(access) = self.exact.get(name) {
                return Some(*access);
            }
        }
        self.tree.longest_prefix(name.as_bytes())
    }

    fn heap_bytes(&self) -> usize {
        self.tree.heap_bytes()
            + self
                .exact
                .keys()
                .map(|k| k.len() + 2 * std::mem::size_of::<usize>() + 8)
                .sum::<usize>()
    }
}

/// Consul's `allAllowed`: every rule of the kind grants `required` (a root prefix rule that
/// denies decides at once).
fn all_allowed(leaves: &BTreeMap<String, MergedLeaf>, required: Access) -> Decision {
    let mut decision = Decision::Default;
    if let Some(root) = leaves.get("") {
        decision = root
            .prefix
            .map_or(Decision::Default, |a| enforce(a, required));
        if decision == Decision::Deny {
            return Decision::Deny;
        }
    }
    for leaf in leaves.values() {
        let prefix = leaf
            .prefix
            .map_or(Decision::Default, |a| enforce(a, required));
        let leaf_decision = match leaf.exact {
            Some(exact) if prefix != Decision::Deny => enforce(exact, required),
            _ => prefix,
        };
        if leaf_decision == Decision::Deny {
            return Decision::Deny;
        }
    }
    decision
}

/// Consul's `anyAllowed`: some rule of the kind grants `required`.
fn any_allowed(leaves: &BTreeMap<String, MergedLeaf>, required: Access) -> Decision {
    let mut decision = Decision::Default;
    if let Some(root) = leaves.get("") {
        decision = root
            .prefix
            .map_or(Decision::Default, |a| enforce(a, required));
        if decision == Decision::Allow {
            return Decision::Allow;
        }
    }
    for leaf in leaves.values() {
        let prefix = leaf
            .prefix
            .map_or(Decision::Default, |a| enforce(a, required));
        let leaf_decision = match leaf.exact {
            Some(exact) if prefix != Decision::Allow => enforce(exact, required),
            _ => prefix,
        };
        if leaf_decision == Decision::Allow {
            return Decision::Allow;
        }
    }
    decision
}

/// Decisions over whole kinds, computed at compile.
#[derive(Clone, Copy, Debug)]
struct WholeKindDecisions {
    service_read_all: Decision,
    service_write_any: Decision,
    node_read_all: Decision,
    intention_read_any: Decision,
    intention_write_all: Decision,
}

/// A token's compiled permissions. Immutable and shared (`Arc`) between the requests and
/// shards that use it.
#[derive(Clone, Debug)]
pub struct Authorizer {
    tables: [SegmentTable; TABLE_COUNT],
    globals: [Option<Access>; 5],
    whole: WholeKindDecisions,
    default_policy: DefaultPolicy,
    heap_bytes: usize,
}

impl Authorizer {
    /// Merges `policies` and builds the lookup structures.
    pub fn compile(policies: &[&PolicyRules], default_policy: DefaultPolicy) -> Authorizer {
        let mut merged: [BTreeMap<String, MergedLeaf>; 7] = Default::default();
        let mut globals: [Option<Access>; 5] = [None; 5];
        for policy in policies {
            for (slot, access) in globals.iter_mut().zip(policy.globals) {
                merge(slot, access);
            }
            for rule in &policy.segments {
                let leaf = merged[rule.kind as usize]
                    .entry(rule.name.clone())
                    .or_default();
                if rule.prefix {
                    merge(&mut leaf.prefix, Some(rule.access));
                    merge(&mut leaf.prefix_intentions, rule.intentions);
                } else {
                    merge(&mut leaf.exact, Some(rule.access));
                    merge(&mut leaf.exact_intentions, rule.intentions);
                }
            }
        }
        let services = &merged[SegmentKind::Service as usize];
        // The intentions table has the service table's segments with intention levels.
        let intention_leaves: BTreeMap<String, MergedLeaf> = services
            .iter()
            .map(|(name, leaf)| {
                let intention = MergedLeaf {
                    exact: leaf
                        .exact
                        .map(|p| leaf.exact_intentions.unwrap_or(derived_intentions(p))),
                    prefix: leaf
                        .prefix
                        .map(|p| leaf.prefix_intentions.unwrap_or(derived_intentions(p))),
                    ..MergedLeaf::default()
                };
                (name.clone(), intention)
            })
            .collect();
        let whole = WholeKindDecisions {
            service_read_all: all_allowed(services, Access::Read),
            service_write_any: any_allowed(services, Access::Write),
            node_read_all: all_allowed(&merged[SegmentKind::Node as usize], Access::Read),
            intention_read_any: any_allowed(&intention_leaves, Access::Read),
            intention_write_all: all_allowed(&intention_leaves, Access::Write),
        };
        let tables: [SegmentTable; TABLE_COUNT] = std::array::from_fn(|i| {
            if i == INTENTION_TABLE {
                SegmentTable::build(&intention_leaves)
            } else {
                SegmentTable::build(&merged[i])
            }
        });
        let heap_bytes = tables.iter().map(SegmentTable::heap_bytes).sum::<usize>()
            + std::mem::size_of::<Authorizer>();
        Authorizer {
            tables,
            globals,
            whole,
            default_policy,
            heap_bytes,
        }
    }

    /// An authorizer with no rules: the default policy decides everything.
    pub fn default_only(default_policy: DefaultPolicy) -> Authorizer {
        Authorizer::compile(&[], default_policy)
    }

    /// Approximate heap bytes held, for cache accounting.
    pub fn heap_bytes(&self) -> usize {
        self.heap_bytes
    }

    pub fn default_policy(&self) -> DefaultPolicy {
        self.default_policy
    }

    /// The decision chain: a rule's decision, else the default authorizer's.
    #[inline]
    fn finish<'a>(
        &self,
        decision: Decision,
        resource: Resource,
        access: Access,
        name: Option<&'a str>,
    ) -> Check<'a> {
        let allowed = match decision {
            Decision::Allow => true,
            Decision::Deny => false,
            // `allowAll` never manages ACLs (snapshots check acl:write too).
            Decision::Default => {
                self.default_policy == DefaultPolicy::Allow && resource != Resource::Acl
            }
        };
        if allowed {
            Ok(())
        } else {
            Err(Denial {
                resource,
                access,
                name,
            })
        }
    }

    #[inline]
    fn segment<'a>(
        &self,
        kind: usize,
        resource: Resource,
        name: &'a str,
        required: Access,
    ) -> Check<'a> {
        let decision = self.tables[kind]
            .lookup(name)
            .map_or(Decision::Default, |rule| enforce(rule, required));
        self.finish(decision, resource, required, Some(name))
    }

    fn global_decision(&self, kind: GlobalKind, required: Access) -> Decision {
        self.globals[kind as usize].map_or(Decision::Default, |rule| enforce(rule, required))
    }

    fn global<'a>(&self, kind: GlobalKind, resource: Resource, required: Access) -> Check<'a> {
        self.finish(
            self.global_decision(kind, required),
            resource,
            required,
            None,
        )
    }

    /// `mesh` and `peering` defer to `operator` when the policy does not name them.
    fn global_or_operator<'a>(
        &self,
        kind: GlobalKind,
        resource: Resource,
        required: Access,
    ) -> Check<'a> {
        let decision = match self.globals[kind as usize] {
            Some(rule) => enforce(rule, required),
            None => self.global_decision(GlobalKind::Operator, required),
        };
        self.finish(decision, resource, required, None)
    }

    pub fn key_read<'a>(&self, key: &'a str) -> Check<'a> {
        self.segment(SegmentKind::Key as usize, Resource::Key, key, Access::Read)
    }

    /// Listing keys under `prefix` (`?keys`, `?recurse` on a prefix).
    pub fn key_list<'a>(&self, prefix: &'a str) -> Check<'a> {
        self.segment(
            SegmentKind::Key as usize,
            Resource::Key,
            prefix,
            Access::List,
        )
    }

    pub fn key_write<'a>(&self, key: &'a str) -> Check<'a> {
        self.segment(SegmentKind::Key as usize, Resource::Key, key, Access::Write)
    }

    /// Writing everything under `prefix` (a recursive delete): the longest prefix rule at or
    /// above `prefix` must grant write and no rule under it may grant less.
    pub fn key_write_prefix<'a>(&self, prefix: &'a str) -> Check<'a> {
        let table = &self.tables[SegmentKind::Key as usize];
        let decision = if table.empty {
            Decision::Default
        } else {
            match table.tree.longest_prefix(prefix.as_bytes()) {
                Some(access) if access != Access::Write => Decision::Deny,
                _ if table.tree.non_write_under(prefix.as_bytes()) => Decision::Deny,
                Some(_) => Decision::Allow,
                None => Decision::Default,
            }
        };
        self.finish(decision, Resource::Key, Access::Write, Some(prefix))
    }

    pub fn service_read<'a>(&self, name: &'a str) -> Check<'a> {
        self.segment(
            SegmentKind::Service as usize,
            Resource::Service,
            name,
            Access::Read,
        )
    }

    pub fn service_write<'a>(&self, name: &'a str) -> Check<'a> {
        self.segment(
            SegmentKind::Service as usize,
            Resource::Service,
            name,
            Access::Write,
        )
    }

    /// Read on every service (Consul gates some UI and metrics views on it).
    pub fn service_read_all(&self) -> Check<'static> {
        self.finish(
            self.whole.service_read_all,
            Resource::Service,
            Access::Read,
            Some("all services"),
        )
    }

    /// Write on some service.
    pub fn service_write_any(&self) -> Check<'static> {
        self.finish(
            self.whole.service_write_any,
            Resource::Service,
            Access::Write,
            Some("any service"),
        )
    }

    pub fn node_read<'a>(&self, name: &'a str) -> Check<'a> {
        self.segment(
            SegmentKind::Node as usize,
            Resource::Node,
            name,
            Access::Read,
        )
    }

    pub fn node_write<'a>(&self, name: &'a str) -> Check<'a> {
        self.segment(
            SegmentKind::Node as usize,
            Resource::Node,
            name,
            Access::Write,
        )
    }

    pub fn node_read_all(&self) -> Check<'static> {
        self.finish(
            self.whole.node_read_all,
            Resource::Node,
            Access::Read,
            Some("all nodes"),
        )
    }

    /// Sessions on node `node`.
    pub fn session_read<'a>(&self, node: &'a str) -> Check<'a> {
        self.segment(
            SegmentKind::Session as usize,
            Resource::Session,
            node,
            Access::Read,
        )
    }

    pub fn session_write<'a>(&self, node: &'a str) -> Check<'a> {
        self.segment(
            SegmentKind::Session as usize,
            Resource::Session,
            node,
            Access::Write,
        )
    }

    pub fn event_read<'a>(&self, name: &'a str) -> Check<'a> {
        self.segment(
            SegmentKind::Event as usize,
            Resource::Event,
            name,
            Access::Read,
        )
    }

    pub fn event_write<'a>(&self, name: &'a str) -> Check<'a> {
        self.segment(
            SegmentKind::Event as usize,
            Resource::Event,
            name,
            Access::Write,
        )
    }

    /// Reading a prepared query's definition (not executing it).
    pub fn query_read<'a>(&self, name: &'a str) -> Check<'a> {
        self.segment(
            SegmentKind::Query as usize,
            Resource::Query,
            name,
            Access::Read,
        )
    }

    pub fn query_write<'a>(&self, name: &'a str) -> Check<'a> {
        self.segment(
            SegmentKind::Query as usize,
            Resource::Query,
            name,
            Access::Write,
        )
    }

    /// Agent endpoints of node `node`.
    pub fn agent_read<'a>(&self, node: &'a str) -> Check<'a> {
        self.segment(
            SegmentKind::Agent as usize,
            Resource::Agent,
            node,
            Access::Read,
        )
    }

    pub fn agent_write<'a>(&self, node: &'a str) -> Check<'a> {
        self.segment(
            SegmentKind::Agent as usize,
            Resource::Agent,
            node,
            Access::Write,
        )
    }

    /// Intentions whose destination is `name`; `"*"` asks about every destination (read:
    /// any rule grants it; write: every rule grants it).
    pub fn intention_read<'a>(&self, name: &'a str) -> Check<'a> {
        if name == "*" {
            return self.finish(
                self.whole.intention_read_any,
                Resource::Intention,
                Access::Read,
                Some(name),
            );
        }
        self.segment(INTENTION_TABLE, Resource::Intention, name, Access::Read)
    }

    pub fn intention_write<'a>(&self, name: &'a str) -> Check<'a> {
        if name == "*" {
            return self.finish(
                self.whole.intention_write_all,
                Resource::Intention,
                Access::Write,
                Some(name),
            );
        }
        self.segment(INTENTION_TABLE, Resource::Intention, name, Access::Write)
    }

    pub fn operator_read(&self) -> Check<'static> {
        self.global(GlobalKind::Operator, Resource::Operator, Access::Read)
    }

    pub fn operator_write(&self) -> Check<'static> {
        self.global(GlobalKind::Operator, Resource::Operator, Access::Write)
    }

    pub fn keyring_read(&self) -> Check<'static> {
        self.global(GlobalKind::Keyring, Resource::Keyring, Access::Read)
    }

    pub fn keyring_write(&self) -> Check<'static> {
        self.global(GlobalKind::Keyring, Resource::Keyring, Access::Write)
    }

    pub fn acl_read(&self) -> Check<'static> {
        self.global(GlobalKind::Acl, Resource::Acl, Access::Read)
    }

    pub fn acl_write(&self) -> Check<'static> {
        self.global(GlobalKind::Acl, Resource::Acl, Access::Write)
    }

    pub fn mesh_read(&self) -> Check<'static> {
        self.global_or_operator(GlobalKind::Mesh, Resource::Mesh, Access::Read)
    }

    pub fn mesh_write(&self) -> Check<'static> {
        self.global_or_operator(GlobalKind::Mesh, Resource::Mesh, Access::Write)
    }

    pub fn peering_read(&self) -> Check<'static> {
        self.global_or_operator(GlobalKind::Peering, Resource::Peering, Access::Read)
    }

    pub fn peering_write(&self) -> Check<'static> {
        self.global_or_operator(GlobalKind::Peering, Resource::Peering, Access::Write)
    }

    /// Taking or restoring a snapshot: Consul checks `acl:write` (a management token has
    /// it), and a denial names `acl:write`.
    pub fn snapshot(&self) -> Check<'static> {
        self.acl_write()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::acl::rules::parse;

    fn authz(texts: &[&str], default_policy: DefaultPolicy) -> Authorizer {
        let parsed: Vec<PolicyRules> = texts.iter().map(|t| parse(t).unwrap()).collect();
        let refs: Vec<&PolicyRules> = parsed.iter().collect();
        Authorizer::compile(&refs, default_policy)
    }

    fn allowed(check: Check<'_>) -> bool {
        check.is_ok()
    }

    #[test]
    fn exact_beats_the_longest_prefix() {
        let a = authz(
            &[r#"
            key_prefix "" { policy = "read" }
            key_prefix "app/" { policy = "write" }
            key_prefix "app/private/" { policy = "deny" }
            key "app/private/open" { policy = "write" }
            key "app/exact" { policy = "deny" }
            "#],
            DefaultPolicy::Deny,
        );
        // Table: key → (read, write).
        for (key, read, write) in [
            ("other", true, false),
            ("", true, false),
            ("app", true, false),
            ("app/", true, true),
            ("app/x", true, true),
            ("app/private", true, true),
            ("app/private/", false, false),
            ("app/private/x", false, false),
            ("app/private/open", true, true),
            ("app/private/openx", false, false),
            ("app/exact", false, false),
            ("app/exactly", true, true),
        ] {
            assert_eq!(allowed(a.key_read(key)), read, "read {key:?}");
            assert_eq!(allowed(a.key_write(key)), write, "write {key:?}");
        }
    }

    #[test]
    fn merging_the_same_segment_follows_consuls_precedence() {
        use Access::*;
        // Two policies naming the same segment: the stronger level per Consul's order wins.
        for (a, b, winner) in [
            (Read, Write, Write),
            (Write, Deny, Deny),
            (Read, List, List),
            (List, Write, Write),
            (Deny, Read, Deny),
        ] {
            let p1 = format!("key_prefix \"x/\" {{ policy = \"{}\" }}", a.as_str());
            let p2 = format!("key_prefix \"x/\" {{ policy = \"{}\" }}", b.as_str());
            let authz = authz(&[&p1, &p2], DefaultPolicy::Allow);
            let expected = |required: Access| enforce(winner, required) == Decision::Allow;
            assert_eq!(
                allowed(authz.key_read("x/1")),
                expected(Read),
                "{a:?}+{b:?}"
            );
            assert_eq!(
                allowed(authz.key_list("x/1")),
                expected(List),
                "{a:?}+{b:?}"
            );
            assert_eq!(
                allowed(authz.key_write("x/1")),
                expected(Write),
                "{a:?}+{b:?}"
            );
        }
    }

    #[test]
    fn a_longer_prefix_overrides_a_shorter_deny_as_in_consul() {
        let a = authz(
            &[
                r#"key_prefix "" { policy = "deny" }"#,
                r#"key_prefix "team/" { policy = "read" }"#,
            ],
            DefaultPolicy::Allow,
        );
        assert!(a.key_read("team/a").is_ok());
        assert!(a.key_read("other").is_err());
        // An explicit deny is final; the default (allow) only fills in where no rule applies.
        assert!(a.service_read("anything").is_ok());
    }

    #[test]
    fn list_is_between_read_and_write() {
        let a = authz(
            &[r#"key_prefix "l/" { policy = "list" }"#],
            DefaultPolicy::Deny,
        );
        assert!(a.key_list("l/").is_ok());
        assert!(a.key_read("l/a").is_ok());
        assert!(a.key_write("l/a").is_err());
        let r = authz(
            &[r#"key_prefix "r/" { policy = "read" }"#],
            DefaultPolicy::Deny,
        );
        assert!(r.key_read("r/a").is_ok());
        assert!(r.key_list("r/").is_err());
    }

    #[test]
    fn key_write_prefix_needs_write_everywhere_below() {
        let a = authz(
            &[r#"
            key_prefix "app/" { policy = "write" }
            key "app/locked" { policy = "read" }
            key_prefix "app/sub/" { policy = "write" }
            "#],
            DefaultPolicy::Deny,
        );
        assert!(a.key_write_prefix("app/sub/").is_ok());
        assert!(a.key_write_prefix("app/sub").is_ok());
        assert!(
            a.key_write_prefix("app/").is_err(),
            "app/locked is read-only"
        );
        assert!(a.key_write_prefix("app/lo").is_err(), "ends inside an edge");
        assert!(a.key_write_prefix("app/x").is_ok());
        assert!(a.key_write_prefix("other/").is_err(), "default deny");
        let allow = authz(&[r#"key "a/b" { policy = "deny" }"#], DefaultPolicy::Allow);
        assert!(allow.key_write_prefix("a/").is_err(), "a deny below denies");
        assert!(allow.key_write_prefix("b/").is_ok(), "default allow");
        assert!(allow.key_write_prefix("").is_err());
        let denied = a.key_write_prefix("app/").unwrap_err();
        assert_eq!(denied.permission(), "key:write");
        assert_eq!(denied.name, Some("app/"));
    }

    #[test]
    fn default_policy_fills_in_but_never_grants_acl() {
        let allow = Authorizer::default_only(DefaultPolicy::Allow);
        assert!(allow.key_write("x").is_ok());
        assert!(allow.operator_write().is_ok());
        assert!(allow.service_read_all().is_ok());
        assert!(allow.acl_read().is_err());
        assert!(allow.acl_write().is_err());
        assert!(allow.snapshot().is_err());
        let deny = Authorizer::default_only(DefaultPolicy::Deny);
        for check in [
            deny.key_read("x"),
            deny.node_read("n"),
            deny.agent_read("n"),
            deny.event_write("e"),
            deny.query_read("q"),
            deny.session_write("n"),
            deny.keyring_read(),
            deny.mesh_read(),
            deny.peering_write(),
            deny.intention_read("web"),
        ] {
            assert!(check.is_err());
        }
    }

    #[test]
    fn global_management_allows_everything() {
        let a = authz(
            &[crate::store::acl::builtin::GLOBAL_MANAGEMENT_RULES],
            DefaultPolicy::Deny,
        );
        for check in [
            a.key_write("any/key"),
            a.key_write_prefix(""),
            a.key_list(""),
            a.service_write("web"),
            a.service_read_all(),
            a.service_write_any(),
            a.node_write("n"),
            a.node_read_all(),
            a.session_write("n"),
            a.event_write("e"),
            a.query_write("q"),
            a.agent_write("n"),
            a.intention_write("web"),
            a.intention_write("*"),
            a.intention_read("*"),
            a.operator_write(),
            a.keyring_write(),
            a.acl_write(),
            a.mesh_write(),
            a.peering_write(),
            a.snapshot(),
        ] {
            assert!(check.is_ok(), "{check:?}");
        }
        let ro = authz(
            &[crate::store::acl::builtin::GLOBAL_READ_ONLY_RULES],
            DefaultPolicy::Deny,
        );
        assert!(ro.key_read("k").is_ok());
        assert!(ro.key_write("k").is_err());
        assert!(ro.acl_read().is_ok());
        assert!(ro.snapshot().is_err());
    }

    #[test]
    fn intentions_derive_from_service_rules_unless_named() {
        let a = authz(
            &[r#"
            service "web" { policy = "write" }
            service "db" { policy = "deny" }
            service_prefix "api" {
              policy = "read"
              intentions = "write"
            }
            "#],
            DefaultPolicy::Deny,
        );
        assert!(a.intention_read("web").is_ok());
        assert!(
            a.intention_write("web").is_err(),
            "write policy derives read"
        );
        assert!(a.intention_read("db").is_err());
        assert!(a.intention_write("api-v2").is_ok());
        assert!(a.intention_read("*").is_ok(), "some rule grants read");
        assert!(
            a.intention_write("*").is_err(),
            "not every rule grants write"
        );
    }

    #[test]
    fn whole_kind_decisions_follow_consul() {
        let a = authz(
            &[r#"
            service_prefix "" { policy = "read" }
            service "secret" { policy = "deny" }
            node_prefix "" { policy = "read" }
            "#],
            DefaultPolicy::Deny,
        );
        assert!(a.service_read_all().is_err(), "one service is denied");
        assert!(a.node_read_all().is_ok());
        assert!(a.service_write_any().is_err());
        let w = authz(
            &[r#"service "web" { policy = "write" }"#],
            DefaultPolicy::Deny,
        );
        assert!(w.service_write_any().is_ok());
        assert_eq!(
            w.service_read_all().unwrap_err().message(Some("abc")),
            "Permission denied: token with AccessorID 'abc' lacks permission 'service:read' on \"all services\""
        );
    }

    #[test]
    fn mesh_and_peering_fall_back_to_operator() {
        let a = authz(&[r#"operator = "write""#], DefaultPolicy::Deny);
        assert!(a.mesh_write().is_ok());
        assert!(a.peering_read().is_ok());
        let b = authz(
            &["operator = \"write\"\nmesh = \"deny\""],
            DefaultPolicy::Deny,
        );
        assert!(b.mesh_read().is_err());
        assert!(b.peering_write().is_ok());
    }

    #[test]
    fn denials_render_consuls_message() {
        let a = Authorizer::default_only(DefaultPolicy::Deny);
        let denied = a.key_read("app/x").unwrap_err();
        assert_eq!(
            denied.message(Some("00000000-0000-0000-0000-000000000002")),
            "Permission denied: token with AccessorID '00000000-0000-0000-0000-000000000002' lacks permission 'key:read' on \"app/x\""
        );
        assert_eq!(
            a.operator_read().unwrap_err().message(None),
            "Permission denied: provided token lacks permission 'operator:read'"
        );
        assert_eq!(a.snapshot().unwrap_err().permission(), "acl:write");
    }

    #[test]
    fn every_kind_has_its_own_table() {
        let a = authz(
            &[r#"
            agent "n1" { policy = "write" }
            node "n1" { policy = "read" }
            session_prefix "n" { policy = "write" }
            event "deploy" { policy = "read" }
            query_prefix "q-" { policy = "write" }
            "#],
            DefaultPolicy::Deny,
        );
        assert!(a.agent_write("n1").is_ok());
        assert!(a.node_write("n1").is_err());
        assert!(a.node_read("n1").is_ok());
        assert!(a.session_write("n2").is_ok());
        assert!(a.event_read("deploy").is_ok());
        assert!(a.event_write("deploy").is_err());
        assert!(a.query_write("q-1").is_ok());
        assert!(a.key_read("n1").is_err());
        assert!(a.service_read("n1").is_err());
    }

    #[test]
    fn the_prefix_tree_agrees_with_a_linear_scan() {
        // Many overlapping prefixes exercise edge splits in every order.
        let names = [
            "", "a", "ab", "abc", "abd", "b", "ba", "abcdef", "abx", "z/y/x", "z/", "z/y",
        ];
        let mut text = String::new();
        for (i, name) in names.iter().enumerate() {
            let level = ["read", "write", "deny", "list"][i % 4];
            text.push_str(&format!(
                "key_prefix \"{name}\" {{ policy = \"{level}\" }}\n"
            ));
        }
        let rules = parse(&text).unwrap();
        let a = Authorizer::compile(&[&rules], DefaultPolicy::Deny);
        let probes = [
            "", "a", "ab", "abc", "abcd", "abcdefg", "abd", "abe", "b", "bb", "ba", "c", "z", "z/",
            "z/y", "z/y/", "z/y/x/w", "abx", "abxy",
        ];
        for probe in probes {
            let expected = rules
                .segments
                .iter()
                .filter(|r| probe.starts_with(r.name.as_str()))
                .max_by_key(|r| r.name.len())
                .map(|r| r.access);
            let table = &a.tables[SegmentKind::Key as usize];
            assert_eq!(table.lookup(probe), expected, "{probe:?}");
        }
    }
}
