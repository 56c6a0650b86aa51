"""A fake iSCSI volume driver for bootvol's Cinder test harness.

It subclasses ``cinder.volume.driver.VolumeDriver`` (the plain base class:
no LVM, no iSCSI target tools, no ``cinder.tests`` import) and keeps no
storage at all. Volumes are rows in Cinder's database, nothing more.

What ``initialize_connection`` hands out comes from a JSON file (the
backend option ``bootvol_backend_file``, set by cinder_aio.py to
``<state dir>/backend.json``), **re-read on every call**, so a test can
change the portal, the IQN, the LUN or the CHAP secrets while Cinder runs.
Write the file atomically (write a temporary file, then rename it).

Keys (all optional; defaults in ``DEFAULTS``):

    driver_volume_type  "iscsi" (anything else is passed through as is)
    target_portal       "127.0.0.1:3260"
    target_iqn          "iqn.2010-10.org.openstack:volume-{volume_id}"
                        ("{volume_id}" and "{volume_name}" are substituted)
    target_lun          0 (int)
    auth_method         "CHAP"; null or "" -> no auth_* keys at all
    auth_username       "bootvol-chap-user"
    auth_password       "bootvol-chap-secret-1"
    target_portals      list of portals (default: [target_portal])
    target_iqns         list (default: target_iqn once per portal)
    target_luns         list (default: target_lun once per portal)
                        the singular keys default to the first path
    multipath           when connection_info gets target_portals,
                        target_iqns and target_luns: "auto" (default: more
                        than one portal, or the connector says
                        "multipath": true, like Cinder's reference iSCSI
                        target), "always", or "never"
    target_discovered   false
    extra               object merged last into connection_info["data"]
                        (e.g. discovery_auth_* keys)
    volumes             {"<volume id>": {any key above}}: per-volume
                        overrides, applied over the top-level keys
    fail                {"create_volume"|"initialize_connection"|
                         "terminate_connection"|"delete_volume": "message"}:
                        that driver call raises VolumeBackendAPIException
    nova_servers_using_volumes
                        list of server (instance) uuids: read by
                        cinder_aio.py's Nova stub, not by this driver

Each driver call is appended as one JSON line to ``<state>/driver-calls.jsonl``
({"call", "volume_id", "connector", "time"}), so a test can check that
Cinder really asked the backend (e.g. terminate_connection on detach).
"""

import copy
import json
import os
import time

from oslo_config import cfg
from oslo_log import log as logging

from cinder import exception
from cinder.volume import driver

LOG = logging.getLogger(__name__)

bootvol_opts = [
    cfg.StrOpt('bootvol_backend_file',
               help='JSON file describing the iSCSI target to hand out; '
                    're-read on every driver call.'),
    cfg.StrOpt('bootvol_calls_file',
               help='JSON-lines file where every driver call is logged.'),
]

DEFAULTS = {
    'driver_volume_type': 'iscsi',
    'target_portal': '127.0.0.1:3260',
    'target_iqn': 'iqn.2010-10.org.openstack:volume-{volume_id}',
    'target_lun': 0,
    'auth_method': 'CHAP',
    'auth_username': 'bootvol-chap-user',
    'auth_password': 'bootvol-chap-secret-1',
    'multipath': 'auto',
    'target_discovered': False,
}

# The keys a per-volume override may carry, besides these defaults.
_PLURAL = ('target_portals', 'target_iqns', 'target_luns')


class BootvolFakeISCSIDriver(driver.VolumeDriver):
    """No storage; connection info from a JSON file re-read on every call."""

    VERSION = '1.0.0'
    SUPPORTS_ACTIVE_ACTIVE = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.configuration.append_config_values(bootvol_opts)
        self.backend_name = (
            self.configuration.safe_get('volume_backend_name') or 'fake')

    # ----------------------------------------------------------- helpers
    def _backend_file(self):
        return self.configuration.safe_get('bootvol_backend_file')

    def _read_backend(self):
        """The JSON file, parsed now (never cached)."""
        path = self._backend_file()
        if not path or not os.path.exists(path):
            return {}
        last_error = None
        # A writer that does not rename atomically may be caught half-way:
        # retry briefly before failing the call.
        for _ in range(5):
            try:
                with open(path, encoding='utf-8') as f:
                    doc = json.load(f)
                if not isinstance(doc, dict):
                    raise ValueError('top level must be an object')
                return doc
            except (OSError, ValueError) as e:
                last_error = e
                time.sleep(0.05)
        raise exception.VolumeBackendAPIException(
            data='bootvol backend file %s unreadable: %s' % (path, last_error))

    def _settings(self, volume_id):
        """(merged settings, keys the file gives explicitly) from one read."""
        doc = self._read_backend()
        given = {k: v for k, v in doc.items() if k != 'volumes'}
        per_volume = (doc.get('volumes') or {}).get(volume_id) or {}
        given.update(per_volume)
        settings = dict(DEFAULTS)
        settings.update(given)
        return settings, set(given)

    def _log_call(self, call, volume=None, connector=None):
        path = self.configuration.safe_get('bootvol_calls_file')
        if not path:
            return
        entry = {'call': call,
                 'volume_id': volume['id'] if volume is not None else None,
                 'connector': connector,
                 'time': time.time()}
        try:
            with open(path, 'a', encoding='utf-8') as f:
                f.write(json.dumps(entry, sort_keys=True) + '\n')
        except OSError as e:  # never fail a call because of the log
            LOG.warning('bootvol: cannot log driver call: %s', e)

    def _maybe_fail(self, call, volume):
        volume_id = volume['id'] if volume is not None else None
        fail = self._settings(volume_id)[0].get('fail') or {}
        if call in fail:
            raise exception.VolumeBackendAPIException(
                data='bootvol injected failure in %s: %s' % (call, fail[call]))

    # ------------------------------------------------------ driver: setup
    def do_setup(self, context):
        pass

    def check_for_setup_error(self):
        # Fail early (at start-up) on a malformed file rather than at attach.
        self._read_backend()

    def _update_volume_stats(self):
        self._stats = {
            'volume_backend_name': self.backend_name,
            'vendor_name': 'bootvol',
            'driver_version': self.VERSION,
            'storage_protocol': 'iSCSI',
            'pools': [{
                'pool_name': self.backend_name,
                'total_capacity_gb': 10000,
                'free_capacity_gb': 10000,
                'provisioned_capacity_gb': 0,
                'reserved_percentage': 0,
                'max_over_subscription_ratio': 20.0,
                'thin_provisioning_support': True,
                'thick_provisioning_support': True,
                'multiattach': True,
                'QoS_support': False,
                'online_extend_support': True,
            }],
        }

    # ---------------------------------------------------- driver: volumes
    def create_volume(self, volume):
        self._log_call('create_volume', volume)
        self._maybe_fail('create_volume', volume)
        return None

    def create_volume_from_snapshot(self, volume, snapshot):
        self._log_call('create_volume_from_snapshot', volume)
        return None

    def create_cloned_volume(self, volume, src_vref):
        self._log_call('create_cloned_volume', volume)
        return None

    def delete_volume(self, volume):
        self._log_call('delete_volume', volume)
        self._maybe_fail('delete_volume', volume)

    def extend_volume(self, volume, new_size):
        self._log_call('extend_volume', volume)

    def create_snapshot(self, snapshot):
        pass

    def delete_snapshot(self, snapshot):
        pass

    def local_path(self, volume):
        raise NotImplementedError()

    # ---------------------------------------------------- driver: exports
    def ensure_export(self, context, volume):
        pass

    def create_export(self, context, volume, connector):
        return None

    def remove_export(self, context, volume):
        pass

    def create_export_snapshot(self, context, snapshot, connector):
        return None

    def remove_export_snapshot(self, context, snapshot):
        pass

    # ------------------------------------------------ driver: connections
    def validate_connector(self, connector):
        # Like Cinder's ISCSIDriver: an iSCSI initiator name is required.
        settings = self._settings(None)[0]
        if (settings.get('driver_volume_type') == 'iscsi'
                and 'initiator' not in connector):
            raise exception.InvalidConnectorException(missing='initiator')

    def initialize_connection(self, volume, connector, **kwargs):
        self._log_call('initialize_connection', volume, connector)
        self._maybe_fail('initialize_connection', volume)
        s, explicit = self._settings(volume['id'])
        subst = {'volume_id': volume['id'], 'volume_name': volume['name']}

        def fmt(value):
            return value.format(**subst) if isinstance(value, str) else value

        data = {
            'target_discovered': bool(s.get('target_discovered')),
            'target_iqn': fmt(s.get('target_iqn')),
            'target_portal': s.get('target_portal'),
            'target_lun': s.get('target_lun'),
            'volume_id': volume['id'],
        }

        # Multipath, like Cinder's reference iSCSI target: the plural keys
        # when there is more than one path or the connector asks for
        # multipath ("auto"), or always/never as the file says.
        portals = list(s.get('target_portals') or [data['target_portal']])
        n = len(portals)
        iqns = [fmt(i) for i in
                (s.get('target_iqns') or [data['target_iqn']] * n)]
        luns = list(s.get('target_luns') or [data['target_lun']] * n)
        if not len(iqns) == len(luns) == n:
            raise exception.VolumeBackendAPIException(
                data='bootvol backend file: target_portals, target_iqns and '
                     'target_luns differ in length')
        mode = s.get('multipath', 'auto')
        wants = bool(connector and connector.get('multipath'))
        if mode == 'always' or (mode == 'auto' and (n > 1 or wants)):
            data['target_portals'] = portals
            data['target_iqns'] = iqns
            data['target_luns'] = luns
        # The singular keys follow the first path unless the file gives
        # them explicitly.
        if 'target_portal' not in explicit:
            data['target_portal'] = portals[0]
        if 'target_iqn' not in explicit:
            data['target_iqn'] = iqns[0]
        if 'target_lun' not in explicit:
            data['target_lun'] = luns[0]

        if s.get('auth_method'):
            data['auth_method'] = s['auth_method']
            data['auth_username'] = s.get('auth_username')
            data['auth_password'] = s.get('auth_password')

        data.update(copy.deepcopy(s.get('extra') or {}))
        return {'driver_volume_type': s.get('driver_volume_type', 'iscsi'),
                'data': data}

    def terminate_connection(self, volume, connector, **kwargs):
        self._log_call('terminate_connection', volume, connector)
        self._maybe_fail('terminate_connection', volume)

    def initialize_connection_snapshot(self, snapshot, connector, **kwargs):
        raise NotImplementedError()

    def terminate_connection_snapshot(self, snapshot, connector, **kwargs):
        pass
