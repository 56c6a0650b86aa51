#!/usr/bin/env python3
"""All-in-one OpenStack Cinder for bootvol's tests: API, scheduler and volume
service in ONE process (oslo.messaging's ``fake://`` transport only works
in-process), noauth, SQLite, and our fake iSCSI backend.

    target/cinder-venv/bin/python tests/cinder/cinder_aio.py \
        --state-dir /tmp/cinder-state --port 8776

- renders ``cinder.conf.in`` (beside this file) to ``<state>/cinder.conf``;
- writes ``<state>/backend.json`` (what the fake driver hands out) unless it
  exists, so a test may seed it before the start;
- runs the database migrations (``cinder-manage db sync``, in-process);
- starts cinder-volume (backend ``fake``), then cinder-scheduler (it waits for
  the volume service's capabilities), then osapi_volume on
  ``127.0.0.1:<port>``;
- prints ``READY http://127.0.0.1:<port> pid=<pid> cinder=<version>`` on
  stdout once ``GET /`` answers 200 and the scheduler has the backend;
  nothing else is ever printed on stdout (logs: ``<state>/cinder.log``);
- SIGTERM (or SIGINT): stops the three services, exits 0.

Exit status: 0 after SIGTERM/SIGINT, 1 if the start failed or READY was not
reached within --ready-timeout seconds, 2 on bad arguments.

The OSSA-2023-003 / bug #2004555 check: Cinder asks Nova, before deleting
an attachment that has an ``instance_uuid`` and a ``connection_info``,
whether the server still uses it. There is no Nova here, so by default
(``--nova stub``) ``cinder.compute.nova.API.get_server_volume`` is replaced
by a stub that answers what Nova answers for a server it does not know
(novaclient ``NotFound``): Cinder's own code then logs a warning and deletes
the attachment. A server uuid listed in backend.json's
``nova_servers_using_volumes`` instead gets a "still attached" answer, so
the DELETE gets Cinder's real 409 ``ConflictNovaUsingAttachment``.
``--nova real`` leaves Cinder untouched (such a DELETE then fails: there
is no Nova endpoint to ask).
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--state-dir', required=True,
                   help='directory for cinder.conf, SQLite, locks, logs, '
                        'backend.json (created if missing)')
    p.add_argument('--port', required=True, type=int,
                   help='TCP port of the API on --listen')
    p.add_argument('--listen', default='127.0.0.1',
                   help='API listen address (default 127.0.0.1)')
    p.add_argument('--nova', choices=('stub', 'real'), default='stub',
                   help='how the OSSA-2023-003 Nova check is answered '
                        '(default stub: no Nova, see the module doc)')
    p.add_argument('--ready-timeout', type=float, default=90.0,
                   help='seconds to wait for READY before giving up')
    p.add_argument('--debug', action='store_true',
                   help='debug logging in <state>/cinder.log')
    args = p.parse_args(argv)
    if not 0 < args.port < 65536:
        p.error('--port must be 1..65535')
    args.state_dir = os.path.abspath(args.state_dir)
    return args


ARGS = parse_args(sys.argv[1:])

# Until oslo's launcher takes the signals over, SIGTERM/SIGINT only ask for a
# stop, honoured at the next safe point (never half-way through db sync).
import signal  # noqa: E402
STOP_REQUESTED = False


def _early_stop(signo, frame):
    global STOP_REQUESTED
    STOP_REQUESTED = True


signal.signal(signal.SIGTERM, _early_stop)
signal.signal(signal.SIGINT, _early_stop)

# eventlet 0.40+ warns on import that it is deprecated (Cinder 29 still runs
# on it); keep stderr for our own messages.
import warnings  # noqa: E402
warnings.filterwarnings('ignore', message=r'\s*Eventlet is deprecated')

# Cinder's own entry points monkey-patch with eventlet before importing
# anything else; so do we.
from cinder import monkey_patch  # noqa: E402
monkey_patch.patch()

import json  # noqa: E402
import logging as python_logging  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402
import urllib.error  # noqa: E402
import urllib.request  # noqa: E402

import eventlet  # noqa: E402
import os_brick  # noqa: E402
from oslo_config import cfg  # noqa: E402
from oslo_log import log as logging  # noqa: E402
from oslo_service import service as oslo_service  # noqa: E402

from cinder import i18n  # noqa: E402
i18n.enable_lazy()
from cinder.common import config  # noqa: E402
from cinder.common import constants  # noqa: E402
from cinder import coordination  # noqa: E402
from cinder import context  # noqa: E402
from cinder.db import migration  # noqa: E402
from cinder import objects  # noqa: E402
from cinder import rpc  # noqa: E402
from cinder import service  # noqa: E402
from cinder import version  # noqa: E402

CONF = cfg.CONF
LOG = logging.getLogger('bootvol.cinder_aio')

DEFAULT_BACKEND = {
    'target_portal': '127.0.0.1:3260',
    'target_iqn': 'iqn.2010-10.org.openstack:volume-{volume_id}',
    'target_lun': 0,
    'auth_method': 'CHAP',
    'auth_username': 'bootvol-chap-user',
    'auth_password': 'bootvol-chap-secret-1',
}


def stderr(msg):
    sys.stderr.write('cinder_aio: %s\n' % msg)
    sys.stderr.flush()


def prepare_state_dir(args):
    state = args.state_dir
    for sub in ('', 'locks', 'coordination'):
        os.makedirs(os.path.join(state, sub), exist_ok=True)
    api_paste = os.path.join(sys.prefix, 'etc', 'cinder', 'api-paste.ini')
    if not os.path.exists(api_paste):
        raise SystemExit('cinder_aio: %s missing (is this the cinder venv '
                         'python?)' % api_paste)
    with open(os.path.join(HERE, 'cinder.conf.in'), encoding='utf-8') as f:
        text = f.read()
    for key, value in (('@STATE_DIR@', state), ('@LISTEN@', args.listen),
                       ('@PORT@', str(args.port)), ('@API_PASTE@', api_paste),
                       ('@DEBUG@', 'true' if args.debug else 'false')):
        text = text.replace(key, value)
    conf_path = os.path.join(state, 'cinder.conf')
    with open(conf_path, 'w', encoding='utf-8') as f:
        f.write(text)
    backend = os.path.join(state, 'backend.json')
    if not os.path.exists(backend):
        tmp = backend + '.tmp'
        with open(tmp, 'w', encoding='utf-8') as f:
            json.dump(DEFAULT_BACKEND, f, indent=2)
            f.write('\n')
        os.rename(tmp, backend)
    return conf_path


def install_nova_stub(state_dir):
    """Answer the OSSA-2023-003 check as a Nova that knows no such server."""
    from cinder.compute import nova

    backend = os.path.join(state_dir, 'backend.json')

    def get_server_volume(context, server_id, volume_id):
        try:
            with open(backend, encoding='utf-8') as f:
                using = json.load(f).get('nova_servers_using_volumes') or []
        except (OSError, ValueError):
            using = []
        if server_id in using:
            for att in objects.VolumeAttachmentList.get_all_by_volume_id(
                    context, volume_id):
                if att.instance_uuid == server_id:
                    LOG.info('bootvol Nova stub: server %s still uses volume '
                             '%s (attachment %s)', server_id, volume_id,
                             att.id)
                    return types.SimpleNamespace(
                        attachment_id=att.id, volumeId=volume_id,
                        serverId=server_id)
        LOG.info('bootvol Nova stub: server %s unknown (no Nova)', server_id)
        raise nova.API.NotFound(
            404, 'bootvol harness: no Nova, server %s not found' % server_id)

    nova.API.get_server_volume = staticmethod(get_server_volume)


class AioService(service.Service):
    """cinder.service.Service for several services in one process.

    Cinder keeps the database id of "the" service of a process in a class
    attribute (``Service.service_id``) that ``report_state`` (the heartbeat)
    reads: with the volume and the scheduler service in one process, the
    last one started would get both heartbeats and the volume service would
    never be "up" for the scheduler. Point it at our own row first.
    """

    def report_state(self):
        service.Service.service_id = self.origin_service_id
        return super().report_state()


class AllInOne(oslo_service.ServiceBase):
    """cinder-volume, cinder-scheduler and osapi_volume, started in order."""

    def __init__(self, args):
        self.args = args
        self.volume = AioService.create(
            host='%s@fake' % CONF.host, service_name='fake',
            binary=constants.VOLUME_BINARY, coordination=True)
        self.scheduler = AioService.create(
            binary=constants.SCHEDULER_BINARY)
        self.api = service.WSGIService('osapi_volume')
        self.started = []

    def start(self):
        if STOP_REQUESTED:  # asked before the launcher had the signals
            os.kill(os.getpid(), signal.SIGTERM)
            return
        t0 = time.monotonic()
        try:
            for svc in (self.volume, self.scheduler, self.api):
                svc.start()
                self.started.append(svc)
            # Cinder keeps running with a driver that failed do_setup or
            # check_for_setup_error (volumes then go to error): fail instead.
            if not self.volume.manager.driver.initialized:
                raise RuntimeError('volume driver failed to initialize')
            # First heartbeat now rather than after report_interval: until
            # then the scheduler takes the volume service for down.
            self.volume.report_state()
        except Exception:
            LOG.exception('bootvol: start failed')
            stderr('start failed, see %s/cinder.log' % self.args.state_dir)
            global START_FAILED
            START_FAILED = True
            os.kill(os.getpid(), signal.SIGTERM)  # graceful stop, exit 1
            return
        LOG.info('bootvol: services started in %.1f s', time.monotonic() - t0)
        eventlet.spawn_n(self._announce_ready)

    def _announce_ready(self):
        url = 'http://%s:%d' % (self.api.host, self.api.port)
        ctxt = context.get_admin_context()
        deadline = time.monotonic() + self.args.ready_timeout
        while time.monotonic() < deadline:
            try:
                # The version document answers 300 Multiple Choices.
                with urllib.request.urlopen(url + '/', timeout=2) as r:
                    api_ok = r.status in (200, 300)
            except urllib.error.HTTPError as e:
                api_ok = e.code == 300
            except Exception:
                api_ok = False
            # The scheduler can place a volume once it has the volume
            # service's capabilities (sent in answer to its request at start)
            # and sees that service up. _update_backend_state_map is what it
            # runs for every request; it keeps only services that are up.
            hm = self.scheduler.manager.driver.host_manager
            if api_ok:
                hm._update_backend_state_map(ctxt)
            if api_ok and hm.backend_state_map and hm.has_all_capabilities():
                sys.stdout.write('READY %s pid=%d cinder=%s\n' % (
                    url, os.getpid(), version.version_string()))
                sys.stdout.flush()
                return
            eventlet.sleep(0.1)
        stderr('not READY after %.0f s, see %s/cinder.log'
               % (self.args.ready_timeout, self.args.state_dir))
        global READY_FAILED
        READY_FAILED = True
        os.kill(os.getpid(), signal.SIGTERM)  # graceful stop, then exit 1

    def stop(self):
        for svc in (self.api, self.scheduler, self.volume):
            try:
                svc.stop()
            except Exception:
                LOG.exception('bootvol: stopping %s', svc)

    def wait(self):
        for svc in self.started:
            try:
                svc.wait()
            except Exception:
                LOG.exception('bootvol: waiting for %s', svc)

    def reset(self):
        for svc in self.started:
            svc.reset()


READY_FAILED = False
START_FAILED = False


class Launcher(oslo_service.ServiceLauncher):
    """oslo's launcher, with SIGINT as graceful as SIGTERM (oslo: exit 1)."""

    def handle_signal(self):
        self.signal_handler.clear()
        self.signal_handler.add_handler('SIGTERM', self._graceful_shutdown)
        self.signal_handler.add_handler('SIGINT', self._graceful_shutdown)
        self.signal_handler.add_handler('SIGHUP', self._reload_service)
        self.signal_handler.add_handler('SIGALRM', self._on_timeout_exit)


def main(args):
    conf_path = prepare_state_dir(args)
    sys.path.insert(0, HERE)  # bootvol_fake_iscsi
    sys.dont_write_bytecode = True  # no __pycache__ in the source tree

    objects.register_all()
    CONF(['--config-file', conf_path], project='cinder',
         version=version.version_string())
    config.set_middleware_defaults()
    logging.setup(CONF, 'cinder')
    python_logging.captureWarnings(True)
    os_brick.setup(CONF)

    t0 = time.monotonic()
    migration.db_sync()
    LOG.info('bootvol: db sync took %.1f s', time.monotonic() - t0)
    if STOP_REQUESTED:
        stderr('stopped before start')
        return 0

    if args.nova == 'stub':
        install_nova_stub(args.state_dir)

    rpc.init(CONF)
    coordination.COORDINATOR.start()

    launcher = Launcher(CONF, restart_method='mutate')
    launcher.launch_service(AllInOne(args))
    status = launcher.wait()
    LOG.info('bootvol: stopped (status %s)', status)
    try:
        coordination.COORDINATOR.stop()
        rpc.cleanup()
    except Exception:
        LOG.exception('bootvol: cleanup')
    stderr('stopped')
    sys.stdout.flush()
    sys.stderr.flush()
    failed = READY_FAILED or START_FAILED or status not in (None, 0)
    code = 1 if failed else 0
    python_logging.shutdown()
    # Green threads of oslo/tooz may linger and block the interpreter's exit;
    # everything is flushed by now.
    os._exit(code)
    return code


if __name__ == '__main__':
    try:
        sys.exit(main(ARGS))
    except SystemExit:
        raise
    except BaseException as e:
        stderr('failed: %s: %s (log: %s/cinder.log)' % (
            type(e).__name__, e, ARGS.state_dir))
        sys.exit(1)
