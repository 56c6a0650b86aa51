"""openstacksdk against bootvol's REST API: the flow of real-clients.md section 1.

    python sdk_flow.py ENDPOINT [USER PASSWORD]

Prints "ALL OK" at the end; any failure raises.
"""
import sys

import openstack
import openstack.version

endpoint = sys.argv[1]
if len(sys.argv) > 3:
    conn = openstack.connect(auth_type="http_basic", auth={"username": sys.argv[2], "password": sys.argv[3]},
                             baremetal_endpoint_override=endpoint, load_yaml_config=False, load_envvars=False)
else:
    conn = openstack.connect(auth_type="none", auth={"endpoint": endpoint},
                             load_yaml_config=False, load_envvars=False)
bm = conn.baremetal

node = bm.create_node(name="sdk-1", driver="fake", driver_info={"fake_password": "pw"},
                      properties={"capabilities": "iscsi_boot:true"})
assert node.driver_info["fake_password"] == "******", node.driver_info
assert any(n.name == "sdk-1" for n in bm.nodes())
assert any(n.driver == "fake" for n in bm.nodes(details=True))
node = bm.get_node("sdk-1")
node = bm.update_node(node, storage_interface="external")
assert node.storage_interface == "external", node.storage_interface
port = bm.create_port(node_id=node.id, address="52:54:00:cc:00:01")
assert [p.id for p in bm.ports(node_id=node.id)] == [port.id]
connector = bm.create_volume_connector(node_id=node.id, type="iqn",
                                      connector_id="iqn.2024-01.org.example.node:sdk-1")
target = bm.create_volume_target(node_id=node.id, volume_type="iscsi", boot_index=0, volume_id="vol-sdk",
                                 properties={"target_iqn": "iqn.2024-01.org.example.san:v1",
                                             "target_portal": "192.0.2.5:3260", "target_lun": 1,
                                             "auth_method": "CHAP", "auth_username": "u",
                                             "auth_password": "chap-pw"})
assert target.properties["auth_password"] == "******"
assert [c.id for c in bm.volume_connectors(node=node.id)] == [connector.id]
targets = list(bm.volume_targets(node=node.id, details=True))
assert [t.id for t in targets] == [target.id] and targets[0].properties["auth_password"] == "******"
bm.set_node_provision_state(node, "manage", wait=True, timeout=30)
bm.set_node_provision_state(node, "provide", wait=True, timeout=30)
result = bm.validate_node(node, required=("boot", "deploy", "power", "storage"))
bm.set_node_provision_state(node, "active", wait=True, timeout=30)
bm.set_node_power_state(node, "power off", wait=True, timeout=30)
bm.set_node_provision_state(node, "deleted", wait=True, timeout=30)
bm.delete_volume_target(target)
bm.delete_volume_connector(connector)
bm.delete_port(port)
bm.delete_node(node)
assert bm.find_node("sdk-1") is None
print("ALL OK (openstacksdk %s)" % openstack.version.__version__)
