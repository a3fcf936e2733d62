# Root disks and volume mount points only on these storages (the scheduler's choice is checked too: the
# fleet as planned carries the datastore it picked).
package pxfleet.allowed_datastores

allowed := {"local-zfs", "local-lvm"}

deny_datastore contains {"msg": sprintf("datastore %s is not allowed (allowed: %v)", [c.datastore_id, allowed]), "container": name} if {
	some name, c in input.fleet.containers
	c.datastore_id != null
	not allowed[c.datastore_id]
}

deny_datastore contains {"msg": sprintf("mount point %s on datastore %s is not allowed", [mp.path, mp.datastore_id]), "container": name} if {
	some name, c in input.fleet.containers
	some mp in c.mount_points
	mp.datastore_id
	not allowed[mp.datastore_id]
}
