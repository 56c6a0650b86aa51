#!/usr/bin/env python3
"""A stand-in identity service for tests/tempest/run.sh: tokens and a catalog, nothing else.

    identity.py BAREMETAL_URL PORT_FILE

Written for the tests (not a copy of Keystone): it listens on 127.0.0.1 (a free port, written
to PORT_FILE once it listens) and answers what tempest's credential provider and auth plugin
ask of Keystone v3 (shapes from Keystone's api-ref):

  GET  /, /v3                 version discovery (v3 only)
  POST /v3/auth/tokens        201, X-Subject-Token, a token whose catalog has `identity` (this
                              service) and `baremetal` (BAREMETAL_URL, bootvol's API)
  GET  /v3/auth/tokens        200, the token named by X-Subject-Token (validation)

Any password is accepted for any user: bootvol runs with auth_strategy = "noauth", the token
only has to exist for tempest. Standard library only; the venv's python runs it.
"""

import datetime
import json
import os
import sys
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BAREMETAL = sys.argv[1].rstrip("/")
PORT_FILE = sys.argv[2]
TOKENS = {}


def stamp(delta=0):
    moment = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=delta)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def endpoints(url):
    return [
        {"id": uuid.uuid4().hex, "interface": i, "region": "RegionOne",
         "region_id": "RegionOne", "url": url}
        for i in ("public", "internal", "admin")
    ]


def token_body(auth, identity_url):
    """The token for an auth request: its user, its project (or system) scope, role admin."""
    password = auth.get("identity", {}).get("password", {}).get("user", {})
    user = {"id": uuid.uuid5(uuid.NAMESPACE_URL, "user:" + password.get("name", "admin")).hex,
            "name": password.get("name", "admin"),
            "domain": {"id": "default", "name": "Default"},
            "password_expires_at": None}
    token = {"methods": ["password"], "user": user, "audit_ids": [uuid.uuid4().hex[:22]],
             "issued_at": stamp(), "expires_at": stamp(3600), "is_domain": False,
             "roles": [{"id": uuid.uuid5(uuid.NAMESPACE_URL, "role:admin").hex, "name": "admin"}]}
    scope = auth.get("scope", {})
    if "system" in scope:
        token["system"] = {"all": True}
    elif "project" in scope or not scope:
        name = scope.get("project", {}).get("name", "admin")
        token["project"] = {"id": uuid.uuid5(uuid.NAMESPACE_URL, "project:" + name).hex,
                            "name": name, "domain": {"id": "default", "name": "Default"}}
    elif "domain" in scope:
        token["domain"] = {"id": "default", "name": "Default"}
    token["catalog"] = [
        {"id": uuid.uuid4().hex, "type": "identity", "name": "keystone",
         "endpoints": endpoints(identity_url)},
        {"id": uuid.uuid4().hex, "type": "baremetal", "name": "ironic",
         "endpoints": endpoints(BAREMETAL)},
    ]
    return {"token": token}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        sys.stderr.write("identity: %s\n" % (fmt % args))

    def base(self):
        return "http://%s:%d" % self.server.server_address[:2]

    def reply(self, status, body=None, headers=()):
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if body is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def version(self):
        return {"id": "v3.14", "status": "stable", "updated": "2020-04-07T00:00:00Z",
                "links": [{"rel": "self", "href": self.base() + "/v3/"}],
                "media-types": [{"base": "application/json",
                                 "type": "application/vnd.openstack.identity-v3+json"}]}

    def do_GET(self):
        path = self.path.split("?")[0].rstrip("/")
        if path == "":
            self.reply(300, {"versions": {"values": [self.version()]}})
        elif path == "/v3":
            self.reply(200, {"version": self.version()})
        elif path == "/v3/auth/tokens":
            body = TOKENS.get(self.headers.get("X-Subject-Token", ""))
            if body is None:
                self.reply(404, {"error": {"code": 404, "title": "Not Found",
                                           "message": "Could not find token."}})
            else:
                self.reply(200, body, [("X-Subject-Token", self.headers["X-Subject-Token"])])
        else:
            self.reply(404, {"error": {"code": 404, "title": "Not Found",
                                       "message": "The resource could not be found."}})

    def do_POST(self):
        length = min(int(self.headers.get("Content-Length") or 0), 1 << 16)
        try:
            request = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            request = None
        if self.path.split("?")[0].rstrip("/") != "/v3/auth/tokens":
            self.reply(404, {"error": {"code": 404, "title": "Not Found",
                                       "message": "The resource could not be found."}})
            return
        if not isinstance(request, dict) or not isinstance(request.get("auth"), dict):
            self.reply(400, {"error": {"code": 400, "title": "Bad Request",
                                       "message": "Expecting to find auth in request body."}})
            return
        token_id = uuid.uuid4().hex
        body = token_body(request["auth"], self.base() + "/v3")
        TOKENS[token_id] = body
        self.reply(201, body, [("X-Subject-Token", token_id)])


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(PORT_FILE + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(PORT_FILE + ".tmp", PORT_FILE)
    server.serve_forever()


if __name__ == "__main__":
    main()
