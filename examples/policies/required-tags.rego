# Every container carries a tag naming its fleet (dev, prod, ...), for billing and for the PVE web UI.
# Containers without any other tag only get a warning.
package pxfleet.required_tags

deny_tags contains {"msg": sprintf("missing the tag \"%s\" (tags: %v)", [input.fleet.name, c.tags]), "container": name} if {
	some name, c in input.fleet.containers
	not input.fleet.name in c.tags
}

warn_tags contains {"msg": "only the fleet tag: add one saying what the container is for", "container": name} if {
	some name, c in input.fleet.containers
	count(c.tags) == 1
}
