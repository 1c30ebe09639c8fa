"""ACL objects through py-consul against a praetor agent with ACLs on.

Usage: acl_client.py HOST PORT MANAGEMENT_TOKEN. Exits non-zero with a message on the first
mismatch. A deleted object reads back as None: py-consul turns Consul's 404 for a missing
ACL object into an empty result (a 403 would raise ACLPermissionDenied instead).
"""
import sys

import consul


def check(condition, message):
    if not condition:
        print("FAIL: " + message, file=sys.stderr)
        sys.exit(1)


def main():
    host, port, management = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    c = consul.Consul(host=host, port=port, token=management)

    # py-consul sends rules as JSON text, which the rule language reads as HCL does.
    policy = c.acl.policy.create("py-policy", rules={"key_prefix": {"app/": {"policy": "read"}}})
    check(c.acl.policy.read(policy["ID"])["Name"] == "py-policy", "policy read")
    check(c.acl.policy.delete(policy["ID"]) is True, "policy delete")
    check(c.acl.policy.read(policy["ID"]) is None, "a deleted policy reads as None")

    role = c.acl.role.create("py-role", service_identities=[{"ServiceName": "web"}])
    check(c.acl.role.delete(role["ID"]) is True, "role delete")
    check(c.acl.role.read(role["ID"]) is None, "a deleted role reads as None")
    check(c.acl.role.read_by_name("py-role") is None, "a deleted role reads by name as None")

    token = c.acl.token.create(
        description="py-token",
        node_identities=["node-1:dc1"],
        service_identities=[{"ServiceName": "api"}],
        templated_policies=[{"builtin/service": {"Name": "web"}}],
    )
    for field in ("AccessorID", "SecretID", "Description", "NodeIdentities",
                  "ServiceIdentities", "TemplatedPolicies", "Local", "CreateTime", "Hash",
                  "CreateIndex", "ModifyIndex"):
        check(field in token, "token create answer carries %s: %r" % (field, token))
    check(token["TemplatedPolicies"][0]["TemplateName"] == "builtin/service",
          "templated policy kept: %r" % token["TemplatedPolicies"])
    listed = [t for t in c.acl.token.list() if t["AccessorID"] == token["AccessorID"]]
    check(len(listed) == 1 and "TemplatedPolicies" in listed[0],
          "token list carries TemplatedPolicies: %r" % listed)
    clone = c.acl.token.clone(token["AccessorID"], description="py-clone")
    check(clone["TemplatedPolicies"] == token["TemplatedPolicies"], "clone keeps templated policies")
    check(c.acl.token.delete(clone["AccessorID"]) is True, "token delete")
    check(c.acl.token.read(clone["AccessorID"]) is None, "a deleted token reads as None")

    # The templated policy grants what the template says: service "web" write.
    web = consul.Consul(host=host, port=port, token=token["SecretID"])
    check(web.agent.service.register("web", port=80) is True, "the templated policy allows web")

    method = c.acl.auth_method.create(
        "py-method", "jwt", config={"JWTValidationPubKeys": [sys.argv[4]]}
    )
    rule = c.acl.binding_rule.create("py-method", "service", "web")
    check(c.acl.binding_rule.delete(rule["ID"]) is True, "binding rule delete")
    check(c.acl.binding_rule.read(rule["ID"]) is None, "a deleted binding rule reads as None")
    check(c.acl.auth_method.delete(method["Name"]) is True, "auth method delete")
    check(c.acl.auth_method.read("py-method") is None, "a deleted auth method reads as None")

    templates = c.acl.templated_policies.list()
    check(sorted(templates) == ["builtin/api-gateway", "builtin/dns", "builtin/node",
                                "builtin/nomad-client", "builtin/nomad-server",
                                "builtin/service"], "templated policy names: %r" % sorted(templates))
    service = c.acl.templated_policy.read("builtin/service")
    check(service["TemplateName"] == "builtin/service" and "{{.Name}}" in service["Template"],
          "templated policy read: %r" % service)
    preview = c.acl.templated_policy.preview("builtin/service", {"Name": "api"})
    check('service "api"' in preview["Rules"], "preview renders the name: %r" % preview)
    check(preview["Name"].startswith("synthetic-policy-"), "preview name: %r" % preview)
    check(preview["Description"] ==
          "synthetic policy generated from templated policy: builtin/service",
          "preview description: %r" % preview)
    print("ok")


if __name__ == "__main__":
    main()
