"""openstacksdk against bootvol's REST API: an Ironic user's flow (issue 15).

    python sdk_ironic_flow.py ENDPOINT CONFIGDRIVE_FILE

fake-hardware nodes, drivers, instance_id, traits, VIFs, the provision verbs with a config
drive, and a volume target of a type no scenario boots. Prints "ALL OK" at the end; any failure
raises.
"""
import sys

import openstack
import openstack.exceptions
import openstack.version

endpoint = sys.argv[1]
with open(sys.argv[2]) as f:
    configdrive = f.read().strip()
conn = openstack.connect(auth_type="none", auth={"endpoint": endpoint},
                         load_yaml_config=False, load_envvars=False)
bm = conn.baremetal

assert "fake-hardware" in [d.name for d in bm.drivers()]
driver = bm.get_driver("fake-hardware")
assert driver.default_boot_interface == "fake", driver

node = bm.create_node(name="sdk-fh", driver="fake-hardware", network_interface="flat")
assert node.boot_interface == "fake" and node.network_interface == "flat", node
node = bm.update_node(node, instance_id="3e6a1b2c-3d4e-4f50-8a1b-2c3d4e5f6a7b")
assert node.instance_id == "3e6a1b2c-3d4e-4f50-8a1b-2c3d4e5f6a7b", node.instance_id
assert [n.id for n in bm.nodes(instance_id=node.instance_id)] == [node.id]

bm.set_node_traits(node, ["CUSTOM_GOLD", "HW_CPU_X86_AVX2"])
bm.add_node_trait(node, "CUSTOM_SILVER")
bm.remove_node_trait(node, "CUSTOM_GOLD")
assert sorted(bm.get_node(node).traits) == ["CUSTOM_SILVER", "HW_CPU_X86_AVX2"]
try:
    bm.add_node_trait(node, "NOT_A_TRAIT")
    raise AssertionError("an invalid trait was accepted")
except openstack.exceptions.BadRequestException:
    pass

port = bm.create_port(node_id=node.id, address="52:54:00:cc:00:09")
bm.attach_vif_to_node(node, "vif-sdk")
assert bm.list_node_vifs(node) == ["vif-sdk"]
bm.detach_vif_from_node(node, "vif-sdk")
assert bm.list_node_vifs(node) == []

bm.set_node_provision_state(node, "manage", wait=True, timeout=30)
bm.set_node_provision_state(node, "inspect", wait=True, timeout=30)
bm.set_node_provision_state(node, "provide", wait=True, timeout=30)
bm.set_node_provision_state(node, "active", config_drive=configdrive, wait=True, timeout=30)
bm.set_node_provision_state(node, "rebuild", wait=True, timeout=30)
bm.set_node_provision_state(node, "rescue", rescue_password="pw", wait=True, timeout=30)
bm.set_node_provision_state(node, "unrescue")  # the SDK cannot wait for unrescue itself
bm.wait_for_nodes_provision_state([node], "active", timeout=30)
bm.set_node_provision_state(node, "deleted", wait=True, timeout=30)
node = bm.get_node(node)
assert node.provision_state == "available" and node.instance_id is None, node

other = bm.create_node(name="sdk-rbd", driver="fake", storage_interface="external",
                       properties={"capabilities": "iscsi_boot:true"})
target = bm.create_volume_target(node_id=other.id, volume_type="rbd", boot_index=0, volume_id="vol-sdk-rbd")
assert target.volume_type == "rbd"
result = bm.validate_node(other, required=())
assert not result["boot"].result and "volume_type rbd" in result["boot"].reason, result["boot"]

bm.delete_volume_target(target)
bm.delete_port(port)
bm.delete_node(node)
bm.delete_node(other)
print("ALL OK (openstacksdk %s, Ironic flow)" % openstack.version.__version__)
