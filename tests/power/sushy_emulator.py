"""sushy-tools' Redfish emulator with its fake driver (no libvirt), for bootvol's power tests.

    python sushy_emulator.py --port PORT --state-dir DIR [--systems N] [--power-delay S]
                             [--auth-file HTPASSWD] [--ssl-cert PEM --ssl-key PEM]
                             [--reset-types On,ForceOff,...] [--alt-reset-target] [--etag]

Runs sushy-tools' own application (`sushy_tools.emulator.main`) on 127.0.0.1:PORT with N fake
systems (`node-1`..., all off, uuids 00000000-0000-4000-8000-00000000000<i>), state in DIR.
What it adds, all through Flask hooks around sushy's own views:

- every request that passed authentication is appended to DIR/requests.jsonl (method, path,
  JSON body, If-Match header, the user that basic auth let in), so tests can check exactly
  what bootvol sent;
- a power change lands after exactly --power-delay seconds (default 0: at once) instead of
  sushy's random 1-11 s;
- BootSourceOverrideEnabled is kept, as real BMCs do (sushy's fake driver always answers
  "Continuous");
- --reset-types narrows the ResetType@Redfish.AllowableValues the system resource lists;
- --alt-reset-target names another URL as the Reset action's target (served by sushy's own
  reset view), so a client that hard-codes the usual URL is caught;
- --etag sends an ETag with each system resource.

Prints nothing special when ready: poll GET /redfish/v1/ (open even with --auth-file).
"""

import argparse
import hashlib
import json
import os
import re
import sys
import types

from sushy_tools.emulator import main as sushy
from sushy_tools.emulator.resources.systems import fakedriver

import flask

SYSTEM_PATH = re.compile(r"^/redfish/v1/Systems/([^/]+)/?$")
ALT_RESET = "/bootvol-test/Systems/<identity>/Reset"


def system_uuid(i):
    return "00000000-0000-4000-8000-%012d" % i


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--systems", type=int, default=1)
    parser.add_argument("--power-delay", type=int, default=0)
    parser.add_argument("--auth-file")
    parser.add_argument("--ssl-cert")
    parser.add_argument("--ssl-key")
    parser.add_argument("--reset-types")
    parser.add_argument("--alt-reset-target", action="store_true")
    parser.add_argument("--etag", action="store_true")
    return parser.parse_args()


def main():
    args = parse_args()
    app = sushy.app
    log_path = os.path.join(args.state_dir, "requests.jsonl")
    override_enabled = {}

    # sushy's fake driver applies a power change at int(time.time()) + random.randint(1, 11).
    fakedriver.random = types.SimpleNamespace(randint=lambda a, b: args.power_delay)

    app.config.update(
        SUSHY_EMULATOR_FAKE_DRIVER=True,
        SUSHY_EMULATOR_STATE_DIR=args.state_dir,
        SUSHY_EMULATOR_FAKE_SYSTEMS=[
            {
                "uuid": system_uuid(i),
                "name": "node-%d" % i,
                "power_state": "Off",
                "external_notifier": False,
                "nics": [{"mac": "52:54:00:00:00:%02x" % i, "ip": "192.0.2.%d" % (10 + i)}],
            }
            for i in range(1, args.systems + 1)
        ],
    )
    if args.auth_file:
        app.config["SUSHY_EMULATOR_AUTH_FILE"] = args.auth_file

    if args.alt_reset_target:
        app.add_url_rule(
            ALT_RESET,
            endpoint="bootvol_alt_reset",
            view_func=sushy.system_reset_action,
            methods=["POST"],
        )

    @app.before_request
    def record():
        body = flask.request.get_json(silent=True)
        entry = {
            "method": flask.request.method,
            "path": flask.request.path,
            "json": body,
            "if_match": flask.request.headers.get("If-Match"),
            # sushy's auth middleware takes the Authorization header away and names the user.
            "user": flask.request.headers.get("X-User"),
        }
        with open(log_path, "a") as log:
            log.write(json.dumps(entry) + "\n")
        match = SYSTEM_PATH.match(flask.request.path)
        if match and flask.request.method == "PATCH" and isinstance(body, dict):
            enabled = (body.get("Boot") or {}).get("BootSourceOverrideEnabled")
            if enabled:
                override_enabled[match.group(1)] = enabled

    @app.after_request
    def adjust(response):
        match = SYSTEM_PATH.match(flask.request.path)
        if not (match and flask.request.method == "GET" and response.status_code == 200):
            return response
        identity = match.group(1)
        system = json.loads(response.get_data())
        boot = system.get("Boot", {})
        if identity in override_enabled:
            boot["BootSourceOverrideEnabled"] = override_enabled[identity]
        reset = system.get("Actions", {}).get("#ComputerSystem.Reset", {})
        if args.reset_types is not None:
            reset["ResetType@Redfish.AllowableValues"] = [
                t for t in args.reset_types.split(",") if t
            ]
        if args.alt_reset_target:
            reset["target"] = ALT_RESET.replace("<identity>", identity)
        data = json.dumps(system, indent=4)
        response.set_data(data)
        if args.etag:
            response.headers["ETag"] = '"%s"' % hashlib.sha256(data.encode()).hexdigest()[:16]
        return response

    argv = ["sushy-emulator", "--fake", "-i", "127.0.0.1", "-p", str(args.port)]
    if args.ssl_cert:
        argv += ["--ssl-certificate", args.ssl_cert, "--ssl-key", args.ssl_key]
    sys.argv = argv
    return sushy.main()


if __name__ == "__main__":
    sys.exit(main())
