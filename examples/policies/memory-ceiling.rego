# Memory ceilings per fleet: per container and for the whole fleet (MiB). Fleets not listed get `default`.
package pxfleet.memory_ceiling

ceilings := {
	"dev": {"container": 8192, "fleet": 16384},
	"prod": {"container": 65536, "fleet": 262144},
	"default": {"container": 4096, "fleet": 8192},
}

limits := ceilings[input.fleet.name] if {
	ceilings[input.fleet.name]
} else := ceilings["default"]

deny_memory contains {"msg": sprintf("memory %d MiB is above the %d MiB ceiling of fleet %s", [c.memory, limits.container, input.fleet.name]), "container": name} if {
	some name, c in input.fleet.containers
	c.memory > limits.container
}

deny_fleet_memory contains sprintf("the fleet asks for %d MiB in all, above its %d MiB ceiling", [total, limits.fleet]) if {
	total := sum([c.memory | some c in input.fleet.containers])
	total > limits.fleet
}
