"""ACL auth methods, binding rules, login and logout through py-consul against a praetor
client agent (which answers them with Consul's typed ACL.* calls to its server), then raw
msgpack-rpc calls of the new methods on the server's port (consul_rpc.py's codec).

Usage: acl_auth_calls.py CLIENT_IP CLIENT_PORT SERVER_IP MANAGEMENT_TOKEN
Prints one JSON line naming what it created (for the caller to compare the client agent's
answers with the server's), with a signed JWT the caller logs in with, and exits non-zero
with a message on the first mismatch.
"""
import base64
import json
import os
import sys
import time

import consul
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from consul_rpc import check, plain_codec  # noqa: E402

ISSUER = "https://ci.example"
AUDIENCE = "praetor"


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def sign_es256(key, claims):
    """A compact JWT signed with ES256 (the signature as r || s, 32 bytes each)."""
    header = b64(json.dumps({"alg": "ES256", "typ": "JWT"}).encode())
    payload = b64(json.dumps(claims).encode())
    message = f"{header}.{payload}".encode()
    r, s = decode_dss_signature(key.sign(message, ec.ECDSA(hashes.SHA256())))
    return f"{header}.{payload}.{b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


def main():
    host, port, server, management = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    c = consul.Consul(host=host, port=port, token=management)
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()
    config = {
        "JWTValidationPubKeys": [pem],
        "BoundIssuer": ISSUER,
        "BoundAudiences": [AUDIENCE],
        "ClaimMappings": {"sub": "name"},
    }

    # Auth methods: create, read, list, update.
    method = c.acl.auth_method.create("calls-jwt", "jwt", description="first", config=config,
                                      max_token_ttl="10m", token_locality="local")
    check(method["Name"] == "calls-jwt" and method["Config"]["BoundIssuer"] == ISSUER
          and method["MaxTokenTTL"] == "10m0s", "auth method create: %r" % method)
    read = c.acl.auth_method.read("calls-jwt")
    check(read == method, "auth method read %r != create %r" % (read, method))
    other = c.acl.auth_method.create("other-jwt", "jwt", config=config)
    listed = {m["Name"]: m for m in c.acl.auth_method.list()}
    check(set(listed) == {"calls-jwt", "other-jwt"} and "Config" not in listed["calls-jwt"],
          "auth method list stubs: %r" % listed)
    updated = c.acl.auth_method.update("calls-jwt", "jwt", description="second",
                                       display_name="Calls", config=config,
                                       max_token_ttl="10m", token_locality="local")
    check(updated["Description"] == "second" and updated["DisplayName"] == "Calls"
          and updated["ModifyIndex"] > method["ModifyIndex"], "auth method update: %r" % updated)

    # Binding rules: create, read, list (all, and filtered by auth method), update.
    rule = c.acl.binding_rule.create("calls-jwt", "service", "svc-${value.name}",
                                     description="deployers",
                                     selector='value.name == "deployer"')
    check(rule["AuthMethod"] == "calls-jwt" and len(rule["ID"]) == 36,
          "binding rule create: %r" % rule)
    check(c.acl.binding_rule.read(rule["ID"]) == rule, "binding rule read")
    other_rule = c.acl.binding_rule.create("other-jwt", "node", "node-${value.name}")
    everything = {r["ID"] for r in c.acl.binding_rule.list()}
    check(everything == {rule["ID"], other_rule["ID"]}, "binding rule list: %r" % everything)
    mine = c.acl.binding_rule.list(auth_method="calls-jwt")
    check([r["ID"] for r in mine] == [rule["ID"]], "binding rule list by method: %r" % mine)
    rule = c.acl.binding_rule.update(rule["ID"], "calls-jwt", "service", "api-${value.name}",
                                     description="deployers, renamed",
                                     selector='value.name == "deployer"')
    check(rule["BindName"] == "api-${value.name}", "binding rule update: %r" % rule)

    # Login with a JWT the method verifies, then logout.
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "deployer", "iat": now, "exp": now + 600}
    jwt = sign_es256(key, claims)
    login = c.acl.login("calls-jwt", jwt, meta={"pipeline": "42"})
    check(login["AuthMethod"] == "calls-jwt"
          and login["ServiceIdentities"] == [{"ServiceName": "api-deployer"}]
          and login["Local"] is True and "ExpirationTime" in login,
          "login token: %r" % login)
    me = c.acl.token.read_self(token=login["SecretID"])
    check(me["AccessorID"] == login["AccessorID"], "the login token resolves: %r" % me)
    check(c.acl.logout(login["SecretID"]) is True, "logout")
    try:
        c.acl.logout(login["SecretID"])
        check(False, "a logged-out token logged out again")
    except consul.ACLPermissionDenied as denied:
        check("ACL not found" in str(denied), "logout of a gone token: %s" % denied)
    try:
        c.acl.login("calls-jwt", sign_es256(key, dict(claims, sub="intruder", aud="other")))
        check(False, "a JWT for another audience logged in")
    except consul.ACLPermissionDenied as denied:
        check("Permission denied" in str(denied), "login refusal words: %s" % denied)

    # A token that may read ACLs but not write them: the server's refusal, as a 403.
    reader_policy = c.acl.policy.create("auth-reader", rules={"acl": "read"})
    reader = c.acl.token.create(description="auth-reader", policies_id=[reader_policy["ID"]])
    check(c.acl.auth_method.read("calls-jwt", token=reader["SecretID"])["Name"] == "calls-jwt",
          "a reader reads auth methods")
    try:
        c.acl.binding_rule.delete(rule["ID"], token=reader["SecretID"])
        check(False, "a reader deleted a binding rule")
    except consul.ACLPermissionDenied as denied:
        check("lacks permission 'acl:write'" in str(denied), "refusal words: %s" % denied)

    # Deletes: a rule, then a method (which takes its rules with it).
    check(c.acl.binding_rule.delete(other_rule["ID"]) is True, "binding rule delete")
    check(c.acl.binding_rule.read(other_rule["ID"]) is None, "a deleted rule reads as None")
    check(c.acl.auth_method.delete("other-jwt") is True, "auth method delete")
    check(c.acl.auth_method.read("other-jwt") is None, "a deleted method reads as None")

    # Raw calls of the new methods on the server's port, as any Consul client makes them.
    sock, codec = plain_codec(server)
    reply = codec.ok("ACL.AuthMethodList", {"Token": management})
    stubs = reply["AuthMethods"]
    check([m["Name"] for m in stubs] == ["calls-jwt"] and "Config" not in stubs[0]
          and stubs[0]["MaxTokenTTL"] == 600 * 1_000_000_000 and reply["Index"] > 0,
          "ACL.AuthMethodList: %r" % reply)
    reply = codec.ok("ACL.AuthMethodRead", {"AuthMethodName": "calls-jwt", "Token": management})
    check(reply["AuthMethod"]["Config"]["BoundAudiences"] == [AUDIENCE],
          "ACL.AuthMethodRead: %r" % reply)
    reply = codec.ok("ACL.BindingRuleList", {"AuthMethod": "calls-jwt", "Token": management})
    check([r["ID"] for r in reply["BindingRules"]] == [rule["ID"]]
          and reply["BindingRules"][0]["BindVars"] is None, "ACL.BindingRuleList: %r" % reply)
    error, _ = codec.call("ACL.AuthMethodList", {"Token": reader["SecretID"] + "x"})
    check(error == "ACL not found", "ACL.AuthMethodList with an unknown token: %r" % error)
    error, _ = codec.call("ACL.AuthMethodDelete", {"AuthMethodName": "calls-jwt",
                                                   "Token": reader["SecretID"]})
    check(error.startswith("Permission denied"), "ACL.AuthMethodDelete as a reader: %r" % error)
    gone = codec.ok("ACL.BindingRuleDelete", {"BindingRuleID": other_rule["ID"],
                                              "Token": management})
    check(gone is False, "ACL.BindingRuleDelete of a missing rule answers false: %r" % gone)
    token = codec.ok("ACL.Login", {"Auth": {"AuthMethod": "calls-jwt", "BearerToken": jwt}})
    check(token["AuthMethod"] == "calls-jwt" and len(token["SecretID"]) == 36,
          "ACL.Login: %r" % token)
    check(codec.ok("ACL.Logout", {"Token": token["SecretID"]}) is True, "ACL.Logout")
    sock.close()

    print(json.dumps({"rule": rule["ID"], "reader": reader["SecretID"], "jwt": jwt}))


if __name__ == "__main__":
    main()
