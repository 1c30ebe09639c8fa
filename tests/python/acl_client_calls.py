"""ACL tokens, policies and roles through py-consul against a praetor client agent (which
answers them with Consul's typed ACL.* calls to its server), then one raw msgpack-rpc call
of the new methods on the server's port (consul_rpc.py's codec).

Usage: acl_client_calls.py CLIENT_IP CLIENT_PORT SERVER_IP MANAGEMENT_TOKEN
Prints one JSON line naming what it created (for the caller to compare the client agent's
answers with the server's), and exits non-zero with a message on the first mismatch.
"""
import json
import os
import sys

import consul

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from consul_rpc import check, plain_codec  # noqa: E402


def main():
    host, port, server, management = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    c = consul.Consul(host=host, port=port, token=management)

    # Policies: create, read by ID and by name, list, update.
    # py-consul sends rules as JSON text, which the rule language reads as HCL does.
    rules = {"key_prefix": {"calls/": {"policy": "read"}}}
    policy = c.acl.policy.create("calls-policy", description="first", rules=rules)
    check(policy["Name"] == "calls-policy" and policy["Description"] == "first",
          "policy create: %r" % policy)
    check(c.acl.policy.read(policy["ID"])["Rules"] == policy["Rules"], "policy read")
    listed = [p for p in c.acl.policy.list() if p["ID"] == policy["ID"]]
    check(len(listed) == 1 and "Rules" not in listed[0], "policy list stub: %r" % listed)
    updated = c.acl.policy.update(policy["ID"], "calls-policy", description="second",
                                  rules=rules)
    check(updated["Description"] == "second" and updated["ModifyIndex"] > policy["ModifyIndex"],
          "policy update: %r" % updated)

    # Roles: create linking the policy by name, read by ID and name, list, update.
    role = c.acl.role.create("calls-role", policies_name=["calls-policy"],
                             service_identities=[{"ServiceName": "web"}])
    check(role["Policies"] == [{"ID": policy["ID"], "Name": "calls-policy"}],
          "role links the policy: %r" % role)
    check(c.acl.role.read(role["ID"])["Name"] == "calls-role", "role read")
    check(c.acl.role.read_by_name("calls-role")["ID"] == role["ID"], "role read by name")
    check(any(r["ID"] == role["ID"] for r in c.acl.role.list(policy=policy["ID"])),
          "role list by policy")
    role = c.acl.role.update(role["ID"], "calls-role", description="updated",
                             policies_id=[policy["ID"]])
    check(role["Description"] == "updated", "role update: %r" % role)

    # Tokens: create, read, list, update, clone, self, delete.
    token = c.acl.token.create(description="calls-token", policies_id=[policy["ID"]],
                               roles_name=["calls-role"],
                               templated_policies=[{"builtin/service": {"Name": "api"}}])
    check(token["Policies"][0]["Name"] == "calls-policy", "token links: %r" % token)
    check(token["TemplatedPolicies"][0]["TemplateVariables"] == {"Name": "api"},
          "templated policy kept: %r" % token)
    read = c.acl.token.read(token["AccessorID"])
    check(read == token, "token read %r != create %r" % (read, token))
    listed = [t for t in c.acl.token.list(policy=policy["ID"])
              if t["AccessorID"] == token["AccessorID"]]
    check(len(listed) == 1 and listed[0]["Legacy"] is False, "token list: %r" % listed)
    updated = c.acl.token.update(token["AccessorID"], description="calls-token-2",
                                 policies_id=[policy["ID"]])
    check(updated["Description"] == "calls-token-2" and "Roles" not in updated,
          "token update: %r" % updated)
    clone = c.acl.token.clone(token["AccessorID"], description="calls-clone")
    check(clone["Description"] == "calls-clone" and clone["AccessorID"] != token["AccessorID"],
          "token clone: %r" % clone)
    me = c.acl.token.read_self(token=token["SecretID"])
    check(me["AccessorID"] == token["AccessorID"], "token self: %r" % me)

    # The token may not read ACLs: the server's refusal, in Consul's words, as a 403.
    try:
        c.acl.token.list(token=token["SecretID"])
        check(False, "a token without acl:read listed tokens")
    except consul.ACLPermissionDenied as denied:
        check("Permission denied" in str(denied), "refusal words: %s" % denied)

    check(c.acl.token.delete(clone["AccessorID"]) is True, "token delete")
    check(c.acl.token.read(clone["AccessorID"]) is None, "a deleted token reads as None")

    # A raw call of the new methods on the server's port, as any Consul client makes it.
    sock, codec = plain_codec(server)
    reply = codec.ok("ACL.PolicyRead", {"PolicyName": "calls-policy", "Token": management})
    check(reply["Policy"]["ID"] == policy["ID"] and reply["Index"] > 0,
          "ACL.PolicyRead by name: %r" % reply)
    error, _ = codec.call("ACL.RoleList", {"Token": token["SecretID"]})
    check(error.startswith("Permission denied"), "ACL.RoleList as a reader: %r" % error)
    created = codec.ok("ACL.PolicySet", {"Policy": {"Name": "raw-policy", "Rules": ""},
                                         "Token": management})
    check(created["Name"] == "raw-policy" and len(created["ID"]) == 36,
          "ACL.PolicySet: %r" % created)
    name = codec.ok("ACL.PolicyDelete", {"PolicyID": created["ID"], "Token": management})
    check(name == "raw-policy", "ACL.PolicyDelete answers the name: %r" % name)
    sock.close()

    print(json.dumps({"policy": policy["ID"], "role": role["ID"],
                      "accessor": token["AccessorID"], "secret": token["SecretID"]}))


if __name__ == "__main__":
    main()
